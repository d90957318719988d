"""``cairn audit PATH|IMAGE... [--target T]... [--family F]... [--json]``.

Exit codes: 0 every requested target is covered (or none was requested), 1 some requested target is not
covered, 2 bad input (unreadable path, corrupt fat binary, unknown target). JSON format: docs/audit.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from cairn.audit.model import KPACK, NONE, Coverage
from cairn.audit.report import AuditReport, audit_paths, parse_device
from cairn.cli_options import add_json

if TYPE_CHECKING:
    from rich.console import Console


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="ELF file, wheel, directory, tarball, .deb, OCI layout, or image reference "
                        "(registry/name:tag, docker://…, docker-daemon:name:tag)")
    parser.add_argument("--target", action="append", default=[], metavar="T", help="require coverage of a target ID (repeatable)")
    parser.add_argument("--family", action="append", default=[], metavar="F", help="require coverage of every target of a family (repeatable)")
    add_json(parser, "print the stable JSON document instead of tables")


def run(args: argparse.Namespace) -> int:
    report = audit_paths(args.paths)
    coverage = requested_coverage(report, args.target, args.family)
    if args.json:
        # one line, sorted keys: the C encoder keeps this fast on libraries with thousands of entries
        print(json.dumps(report.to_json(coverage), sort_keys=True, separators=(",", ":")))
    else:
        show(report, coverage)
    return 0 if all(c.covered for c in coverage) else 1


def requested_coverage(report: AuditReport, targets: list[str], families: list[str]) -> list[Coverage]:
    """Coverage for each requested target and each member of each family, in order, without repeats."""
    for text in targets:
        parse_device(text, report.registry)  # fail on a bad target before doing any work
    results: dict[str, Coverage] = {}
    for text in targets:
        result = report.coverage(text)
        results.setdefault(result.target, result)
    for family in families:
        for result in report.family_coverage(family):
            results.setdefault(result.target, result)
    return list(results.values())


def show(report: AuditReport, coverage: list[Coverage], console: Console | None = None) -> None:
    """Short rich tables: one row per binary, then the summary and the requested targets."""
    # lazy: rich, fractions, pickle, 33 ms at start-up (python -X importtime)
    from rich.console import Console  # only the human output needs rich
    from rich.table import Table

    console = console or Console(file=sys.stdout, highlight=False, width=max(Console().width, 100))
    files = Table(title=f"{len(report.binaries)} binaries ({report.elf_files} ELF files looked at)", title_justify="left")
    for column in ("file", "bundles", "format", "targets"):
        files.add_column(column, overflow="fold")
    for binary in report.binaries:
        if binary.kind == KPACK:
            shown = "device code lives in an external kpack"
        elif binary.kind == NONE:
            shown = "no device code"
        else:
            partial = set(binary.targets) - set(binary.complete_targets)
            shown = " ".join(t + ("*" if t in partial else "") for t in binary.targets) or "none"
        files.add_row(binary.path, str(len(binary.bundles)), ", ".join(binary.formats) or "-", shown)
    console.print(files)
    for binary in report.binaries:
        for line in (*binary.notes, *binary.mismatches):
            console.print(f"[yellow]note[/]: {binary.path}: {line}")
    if any(set(b.targets) != set(b.complete_targets) for b in report.device_binaries):
        console.print("* present in some bundles only")
    console.print(f"in every binary: {' '.join(report.targets_everywhere) or '-'}")
    console.print(f"in some binaries only: {' '.join(report.targets_somewhere) or '-'}")
    if not coverage:
        return
    table = Table(title="requested targets", title_justify="left")
    for column in ("target", "covered", "via", "lacking"):
        table.add_column(column, overflow="fold")
    for result in coverage:
        lacking = "; ".join(
            g.path + (" (kpack)" if g.reason == "kpack" else " (bundle " + ", ".join(f"#{b.index}" for b in g.bundles[:5])
                      + (f" +{len(g.bundles) - 5}" if len(g.bundles) > 5 else "") + ")")
            for g in result.gaps[:4]
        ) + (f"; +{len(result.gaps) - 4} more" if len(result.gaps) > 4 else "")
        if not result.binaries and not result.gaps:
            lacking = "no device code found"
        via = ", ".join(result.via) if result.covered else "-"
        table.add_row(result.target, "[green]yes[/]" if result.covered else "[red]no[/]", via or "-", lacking or "-")
    console.print(table)
