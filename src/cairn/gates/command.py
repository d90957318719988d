"""``cairn gate [MANIFEST] [--store DIR] [--channel C] [--json]``: gate results per image, pass rate, parity.

Reads the last build of the store. Exit 1 when a gate required for the channel failed or did not run.
``--sign-with KEY`` (on the GPU host) instead signs the last build's verdicts of ``--sign-gate`` (default gpu)
as attestations ``cairn promote --gates`` accepts (``cairn.gates.attest``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cairn.cli_options import add_json, add_store
from cairn.gates.summary import collect, figures
from cairn.model.image_recipes import GATES
from cairn.plan.prepare import load

_STYLE = {"passed": "green", "failed": "red", "not-run": "yellow"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", nargs="?", help="release manifest (default: the default release)")
    add_store(parser, "store of the build (default .cairn/)")
    parser.add_argument("--channel", help="judge against this channel's required gates (default: the manifest's)")
    add_json(parser, "machine-readable output")
    parser.add_argument("--sign-with", type=Path, metavar="KEY_PEM",
                        help="sign this build's verdicts with this runner key (cairn keys runner) instead of judging them")
    parser.add_argument("--sign-gate", action="append", default=[], metavar="GATE", help="gate whose verdicts to sign (repeatable; default gpu)")
    parser.add_argument("--attest-out", type=Path, metavar="DIR", help="where the signed verdicts go (default <store>/attestations)")
    parser.add_argument("--host-root", default="/", metavar="DIR", help="read the host's identity from a captured tree (as cairn doctor --root)")


def run(args: argparse.Namespace) -> int:
    if args.sign_with:
        return _sign(args)
    manifest, registry = load(args.manifest)
    channel = args.channel or manifest.release.channel
    required = manifest.gates.get(channel, ())
    order = {gate: n for n, gate in enumerate(GATES)}
    rows = sorted(collect(args.store), key=lambda r: (r.target, r.image, order.get(r.gate, len(order))))
    family_of = {t: f for f in manifest.release.families for t in registry.expand(f)}
    figs = figures(rows, required, manifest.release.families, family_of)
    ok = figs["parity"] and all(v["pass_rate"] == 1.0 for v in figs["families"].values())
    if args.json:
        print(json.dumps({"schema": "cairn.gates/v1", "channel": channel, **figs, "ok": ok,
                          "results": [r.__dict__ for r in rows]}, indent=2, sort_keys=True))
        return 0 if ok else 1
    console = Console()
    table = Table(title=f"gates ({channel}: required {', '.join(required) or 'none'})")
    for column in ("image", "target", "gate", "status", "reason"):
        table.add_column(column, overflow="fold")
    for r in rows:
        mark = r.gate + (" *" if r.gate in required else "")
        table.add_row(r.image, r.target, mark, f"[{_STYLE.get(r.status, '')}]{r.status}[/]", r.reason[:160])
    console.print(table)
    for family, v in figs["families"].items():
        console.print(f"gating pass rate {family}: {v['passed']}/{v['expected']} = {v['pass_rate']:.0%}")
    console.print("gating parity: " + ("yes" if figs["parity"] else "NO — " + "; ".join(figs["parity_gaps"])))
    return 0 if ok else 1


def _sign(args: argparse.Namespace) -> int:
    from cairn.gates.attest import sign_verdicts
    from cairn.sign.attest import load_signer

    signer = load_signer(args.sign_with)
    out = args.attest_out or args.store / "attestations"
    signed = sign_verdicts(args.store, signer, out, tuple(args.sign_gate or ("gpu",)), args.host_root)
    if args.json:
        print(json.dumps([{**s.__dict__, "path": str(s.path)} for s in signed], indent=2, sort_keys=True))
    for s in [] if args.json else signed:
        print(f"{s.gate} {s.status} {s.image}@{s.target}: {s.path}")
    if not signed and not args.json:
        print(f"no {' or '.join(args.sign_gate or ('gpu',))} verdict in {args.store}'s last build ran (passed or failed) — nothing signed")
    return 0
