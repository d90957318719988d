"""``cairn plan [MANIFEST] [--family F]... [--store DIR] [--json]``: the graph, before anything runs."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from rich.console import Console
from rich.table import Table

from cairn.cli_options import add_json, add_store
from cairn.plan.prepare import load, make_plan
from cairn.plan.status import statuses
from cairn.store.local import LocalStore


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", nargs="?", help="release manifest path or name (default: the default release)")
    parser.add_argument("--family", action="append", default=[], help="limit to this gfx family (repeatable)")
    add_store(parser, "store to check for cached actions")
    add_json(parser, "machine-readable output")


def run(args: argparse.Namespace) -> int:
    manifest, registry = load(args.manifest)
    plan = make_plan(manifest, registry, args.family, store=args.store)
    store = LocalStore(args.store) if args.store.exists() else None
    by_id = plan.by_id()
    rows = statuses(plan, store)
    if args.json:
        print(json.dumps({
            "schema": "cairn.plan/v1",
            "manifest": plan.manifest,
            "manifest_sha256": plan.manifest_sha256,
            "release": {"name": manifest.release.name, "version": manifest.release.version},
            "families": list(args.family or manifest.release.families),
            "notes": list(plan.notes),
            "actions": [
                {"id": r.action, "kind": by_id[r.action].kind, "status": r.status, "key": r.key or None,
                 "reason": r.reason or None, "deps": list(by_id[r.action].deps), "inputs": by_id[r.action].inputs}
                for r in rows
            ],
        }, indent=2, sort_keys=False, default=str, ensure_ascii=False))
        return 0
    console = Console()
    if not console.is_terminal:  # piped or logged: wide enough that ids and reasons stay on one line
        console = Console(width=220)
    table = Table(title=f"{manifest.release.name} {manifest.release.version} — {len(rows)} actions", title_justify="left")
    table.add_column("action", no_wrap=True)
    table.add_column("status")
    table.add_column("key / reason", overflow="fold")
    colours = {"cached": "green", "to run": "yellow", "blocked": "red"}
    for row in rows:
        detail = row.reason if row.status == "blocked" or not row.key else row.key[:16]
        table.add_row(row.action, f"[{colours[row.status]}]{row.status}[/]", detail)
    console.print(table)
    for note in plan.notes:
        console.print(f"note: {note}")
    counts = Counter(r.status for r in rows)
    console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 0
