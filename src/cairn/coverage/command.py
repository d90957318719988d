"""``cairn coverage [--store DIR] [--json]``: per family and gfx target, which libraries really cover it.

Reads the ``coverage:release`` record of the store's last build (the audit of every unpacked library, not
the packages' labels). Exit 1 when a family is partial, 2 when the store has no such record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cairn.cli_options import add_json, add_store
from cairn.coverage.plan import RELEASE_ID
from cairn.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    add_store(parser, "store of the build")
    add_json(parser, "machine-readable output")


def load_release_coverage(store: Path) -> dict[str, Any]:
    report = store / "last-build.json"
    try:
        actions = json.loads(report.read_text())["actions"]
        output = actions[RELEASE_ID]["output"]
        return dict(json.loads((store / "trees" / str(output) / "coverage.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(report, f"no {RELEASE_ID} record in the last build",
                         f"run: cairn build --store {store} --only {RELEASE_ID}") from None


def run(args: argparse.Namespace) -> int:
    coverage = load_release_coverage(args.store)
    partial = [f for f, v in coverage["families"].items() if not v["complete"]]
    if args.json:
        print(json.dumps({**coverage, "partial": partial}, indent=2, sort_keys=True))
        return 1 if partial else 0
    console = Console()
    table = Table(title="coverage measured by the audit (not the package labels)")
    for column in ("family", "target", "status", "libraries that cannot run there"):
        table.add_column(column, overflow="fold")
    for family, value in coverage["families"].items():
        for target, cell in value["targets"].items():
            status = "[green]complete[/]" if cell["complete"] else "[yellow]partial[/]"
            table.add_row(family, target, status, ", ".join(cell["missing"]) or "-")
    console.print(table)
    for component, diff in coverage["labels"].items():
        shown = "; ".join(f"{k.replace('_', ' ')}: {' '.join(v)}" for k, v in diff.items() if k != "package")
        console.print(f"label differs — {component} ({diff['package']}): {shown}")
    return 1 if partial else 0
