"""``cairn doctor [--root DIR] [--matrix URL]... [--json] [-v]``: what is wrong with this ROCm host.

One line per check, worst first, each with its fix; then the advice (which validated image and pip
command fit this host). Exit codes: 0 every check ok, 1 warnings, 2 failures. ``--json`` prints the
stable document described in docs/doctor.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from cairn.cli_options import add_json
from cairn.doctor import advice as adv
from cairn.doctor import host as h
from cairn.doctor.all_checks import run_checks
from cairn.doctor.checks import Check, Facts, exit_code
from cairn.doctor.read import read_snapshot
from cairn.doctor.release import load_release_matrix
from cairn.doctor.snapshot import HostSnapshot
from cairn.errors import InputError
from cairn.model.targets import Registry, load_registry

SCHEMA = "cairn.doctor/v1"
_STYLE = {"fail": "bold red", "warn": "yellow", "ok": "green", "skip": "dim"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="/", metavar="DIR", help="read a captured host tree instead of / (see docs/doctor.md)")
    parser.add_argument("--matrix", action="append", default=[], metavar="URL",
                        help="compatibility matrix: path, directory, file://, http(s):// or s3:// (repeatable; default $CAIRN_MATRIX)")
    add_json(parser, "print the stable JSON document")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the evidence behind each check")
    parser.add_argument("--no-audit", action="store_true", help="skip the device-code audit of installed libraries")
    parser.add_argument("--no-probe", action="store_true",
                        help="do not start a Python process that imports the installed ROCm packages to see which HIP runtimes it maps")


def diagnose(root: str = "/", matrices: list[str] | None = None, *, audit: bool = True, probe: bool = True) -> dict[str, Any]:
    """The whole diagnosis as the ``--json`` document (library entry point for other stages)."""
    if not os.path.isdir(root):
        # a mistyped --root would otherwise read as an empty host: "no AMD GPU", which is not the problem
        what = "not a directory" if os.path.exists(root) else "no such directory"
        raise InputError(root, what, "give --root the directory a host capture wrote (docs/doctor.md), or leave it out for this host")
    registry = load_registry()
    loaded = [adv.load(source) for source in matrices or []]
    snap = read_snapshot(root, audit=audit, probe=probe)
    missing = ("no-matrix", adv.NO_MATRIX)
    if not matrices:  # nobody named a matrix: the release this host installs from, verified, or one line why not
        loaded, missing = load_release_matrix(snap)
    advice = adv.advise(loaded, host_facts(snap, registry), registry, missing)
    nearest = {a.target: a.nearest for a in advice.each if a.target and a.nearest}
    picks = advice.picks + tuple(p for n in nearest.values() for p in n.picks)  # the nearest builds are advised too
    facts = Facts(registry, tuple(loaded), adv.install_commands(advice), picks, nearest)
    checks = run_checks(snap, facts)
    return document(snap, facts, checks, advice)


def host_facts(snap: HostSnapshot, registry: Registry) -> adv.HostFacts:
    """The host as the advice matches it: every distinct real GPU target, in KFD node order."""
    gpus = h.host_gpus(snap, registry)
    targets = list(dict.fromkeys(g.target.name for g in gpus if g.target))
    return adv.HostFacts(targets[0] if targets else None, snap.kernel, snap.amdgpu_version, snap.python,
                         tuple(d.name for d in snap.dists), tuple(targets[1:]),
                         tuple((g.target.name, g.node) for g in gpus if g.target))


def document(snap: HostSnapshot, facts: Facts, checks: list[Check], advice: adv.Advice) -> dict[str, Any]:
    gpus = h.host_gpus(snap, facts.registry)
    probe = snap.probe
    return {
        "schema": SCHEMA,
        "exit_code": exit_code(checks),
        "status": checks[0].status if checks and checks[0].status in ("fail", "warn") else "ok",
        "host": {
            "root": snap.root,
            "os": snap.os_release.get("PRETTY_NAME", ""),
            "kernel": snap.kernel,
            "python": snap.python,
            "container": snap.container,
            "amdgpu": {"loaded": snap.amdgpu_loaded, "version": snap.amdgpu_version},
            "rocm": [{"source": i.source, "version": i.version, "where": i.where} for i in snap.rocm],
            "glibc": {"version": snap.glibc, "where": snap.glibc_where},
            "libstdcxx": {"glibcxx": snap.glibcxx, "where": snap.glibcxx_where},
            "cmdline": list(snap.cmdline),
            "hip_runtimes_in_process": None if probe is None else {
                "imported": list(probe.imported), "failed": list(probe.failed), "mapped": list(probe.maps), "where": probe.where},
            "gpus": [
                {"node": g.node, "index": index, "kind": h.gpu_kind(g, facts.registry),
                 "target": g.target.name if g.target else None, "target_id": g.target_id,
                 "gfx_target_version": g.kfd_version, "product": g.product, "families": list(g.families),
                 "vram_bytes": g.vram_bytes, "pci_id": g.pci_id, "pci_slot": g.pci_slot, "render_node": g.render}
                for index, g in enumerate(gpus)
            ],
        },
        "checks": [c.to_json() for c in checks],
        "advice": advice.to_json(),
    }


def run(args: argparse.Namespace) -> int:
    sources = list(args.matrix) or ([os.environ["CAIRN_MATRIX"]] if os.environ.get("CAIRN_MATRIX") else [])
    doc = diagnose(args.root, sources, audit=not args.no_audit, probe=not args.no_probe)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=False))
    else:
        show(doc, Console(file=sys.stdout, highlight=False, soft_wrap=True), verbose=args.verbose)
    return int(doc["exit_code"])


def show(doc: dict[str, Any], console: Console, *, verbose: bool = False) -> None:
    host = doc["host"]
    where = [host["os"] or "unknown OS", f"kernel {host['kernel'] or '?'}", f"Python {host['python'] or '?'}"]
    if host["container"]:
        where.append(f"in a {host['container']} container")
    if host["root"] != "/":
        where.append(f"captured tree {host['root']}")
    console.print(f"[bold]cairn doctor[/] — {escape(', '.join(where))}")
    width = max(len(c["id"]) for c in doc["checks"])
    for check in doc["checks"]:
        status = check["status"]
        line = f"[{_STYLE[status]}]{status.upper():4}[/] {check['id']:<{width}}  {escape(check['summary'])}"
        if check["fix"]:
            line += f" [bold]→ {escape(check['fix'])}[/]"
        console.print(line)
        if verbose:
            for item in check["evidence"]:
                console.print(f"     {'':<{width}}  [dim]· {escape(item)}[/]")
    advice = doc["advice"]
    for each in advice["gpus"] or [{"summary": advice["summary"], "install": []}]:  # one advice line per GPU target
        console.print(f"[bold]advice[/] {escape(each['summary'])}")
        for command in each["install"]:
            console.print(f"  {escape(command)}")
        nearest = each.get("nearest")
        if nearest:  # a target with no build: the same-generation build, its override line first
            if nearest["override"]:
                console.print(f"  export {escape(nearest['override'])}   [dim]# unsupported: {escape(nearest['target'])}'s code on "
                              f"{escape(each['target'])}[/]")
            for command in nearest["install"]:
                console.print(f"  {escape(command)}")
    if verbose:
        for reason in advice["reasons"]:
            console.print(f"  [dim]· {escape(reason)}[/]")
        for source in advice["matrices"]:
            console.print(f"  [dim]matrix {escape(source)}[/]")
    counts = {s: sum(1 for c in doc["checks"] if c["status"] == s) for s in ("fail", "warn", "ok", "skip")}
    console.print(f"{counts['fail']} failed, {counts['warn']} warnings, {counts['ok']} ok, {counts['skip']} skipped "
                  f"(exit {doc['exit_code']})")
