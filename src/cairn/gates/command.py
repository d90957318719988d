"""``cairn gate [MANIFEST] [--store DIR] [--channel C] [--json]``: gate results per image, pass rate, parity.

Reads the last build of the store. Exit 1 when a gate required for the channel failed or did not run; exit 2
for a channel that does not exist (``--channel stabel`` once judged against no gates and reported 0/0).
The results are listed per image and target, each gate's reason on its own lines wrapped at whole words to
the terminal's width: an 80-column table cut "librocprofiler-sdk.so.1" into "librocprofil" and "er-sdk…".
``--sign-with KEY`` (on the GPU host) instead signs the last build's verdicts of ``--sign-gate`` (default gpu)
as attestations ``cairn promote --gates`` accepts (``cairn.gates.attest``).
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from cairn.cli_options import add_json, add_store, check_choice
from cairn.gates.summary import collect, figures
from cairn.model.image_recipes import GATES
from cairn.model.manifest import CHANNELS
from cairn.paths import describe_store
from cairn.plan.prepare import load

_STYLE = {"passed": "green", "failed": "red", "not-run": "yellow"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", nargs="?", help="release manifest (default: the default release)")
    add_store(parser, "store of the build")
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
    channel = check_choice("--channel", args.channel, CHANNELS, "channel") if args.channel else manifest.release.channel
    required = manifest.gates.get(channel, ())
    order = {gate: n for n, gate in enumerate(GATES)}
    rows = sorted(collect(args.store), key=lambda r: (r.target, r.image, order.get(r.gate, len(order))))
    family_of = {t: f for f in manifest.release.families for t in registry.expand(f)}
    figs = figures(rows, required, manifest.release.families, family_of)
    ok = figs["parity"] and all(v["pass_rate"] == 1.0 for v in figs["families"].values())
    if args.json:
        print(json.dumps({"schema": "cairn.gates/v1", "channel": channel, "store": str(args.store.absolute()), **figs,
                          "ok": ok, "results": [r.__dict__ for r in rows]}, indent=2, sort_keys=True))
        return 0 if ok else 1
    console = Console(highlight=False)
    width = max(40, console.width)
    for line in words(f"gates — channel {channel} requires {', '.join(required) or 'no gate'} (marked *)", width):
        console.print(escape(line), soft_wrap=True)
    console.print(escape(describe_store(args.store)), soft_wrap=True)  # a path to copy: never broken
    mark = max((len(r.gate) for r in rows), default=0) + 2
    cell = None
    for r in rows:
        if (r.image, r.target) != cell:
            cell = (r.image, r.target)
            console.print(f"[bold]{escape(r.image)}@{escape(r.target)}[/]")
        gate = (r.gate + (" *" if r.gate in required else "")).ljust(mark)
        console.print(f"  {escape(gate)} [{_STYLE.get(r.status, '')}]{r.status}[/]", soft_wrap=True)
        for line in words(r.reason, width - 6):
            console.print("      " + escape(line), soft_wrap=True)
    for family, v in figs["families"].items():
        rate = f"{v['pass_rate']:.0%}" if v["pass_rate"] is not None else "—"
        extra = f", {v['not_gated']} not gated" if v["not_gated"] else ""
        console.print(f"gating pass rate {family}: {v['passed']}/{v['gated']} gated = {rate}{extra}", soft_wrap=True)
    parity = "yes" if figs["parity"] else "NO — " + "; ".join(figs["parity_gaps"])
    for n, line in enumerate(words("gating parity: " + parity, width)):
        console.print(("" if n == 0 else "    ") + escape(line), soft_wrap=True)
    return 0 if ok else 1


def _sign(args: argparse.Namespace) -> int:
    # lazy: cryptography, securesystemslib, cairn.gates, 49 ms at start-up (python -X importtime)
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


def words(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken only between words; a single word longer than a
    line (a long path) stays whole on a line of its own for the terminal to wrap, never cut."""
    return textwrap.wrap(" ".join(text.split()), max(20, width), break_long_words=False, break_on_hyphens=False)
