"""``cairn plan [MANIFEST] [--family F]... [--store DIR] [--all | --json]``: the graph, before anything runs.

By default a summary a person reads at a glance: the counts by status and by stage, the blocked actions grouped
by their reason (``cairn.plan.summary``), the planner's notes and which store was checked. ``--all`` adds the
table of every action with its key or reason; ``--json`` is the whole plan for machines.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cairn.cli_options import add_json, add_store
from cairn.paths import describe_store
from cairn.plan.graph import Plan
from cairn.plan.planner import Pipeline
from cairn.plan.prepare import load, make_plan
from cairn.plan.status import ActionStatus, statuses
from cairn.plan.summary import BlockedGroup, by_stage, count_line, group_blocked, id_list
from cairn.store.local import LocalStore

STATUS_ORDER = ("cached", "to run", "blocked")
_COLOURS = {"cached": "green", "to run": "yellow", "blocked": "red"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", nargs="?", help="release manifest path or name (default: the default release)")
    parser.add_argument("--family", action="append", default=[],
                        help="limit to this gfx family of the release, or one of its targets (repeatable)")
    add_store(parser, "store to check for cached actions")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--all", action="store_true", help="list every action with its key or reason, then the summary")
    add_json(shown, "machine-readable output")


TAKES_PIPELINE = True


def run(args: argparse.Namespace, pipeline: Pipeline) -> int:
    manifest, registry = load(args.manifest)
    plan = make_plan(manifest, registry, args.family, store=args.store, stages=pipeline.stages)
    store = LocalStore(args.store) if args.store.exists() else None
    by_id = plan.by_id()
    rows = statuses(plan, store)
    stage = {a.id: pipeline.stage_of(a) for a in plan.actions}
    groups = group_blocked((r.action, r.reason) for r in rows if r.status == "blocked")
    if args.json:
        print(json.dumps({
            "schema": "cairn.plan/v1",
            "manifest": plan.manifest,
            "manifest_sha256": plan.manifest_sha256,
            "release": {"name": manifest.release.name, "version": manifest.release.version},
            "families": list(args.family or manifest.release.families),
            "store": str(args.store.absolute()),
            "counts": dict(Counter(r.status for r in rows)),
            "stages": {name: dict(c) for name, c in by_stage(((r.action, r.status) for r in rows), stage, pipeline.order).items()},
            "blocked": [g.to_json() for g in groups],
            "notes": list(plan.notes),
            "actions": [
                {"id": r.action, "kind": by_id[r.action].kind, "stage": stage[r.action], "status": r.status,
                 "key": r.key or None, "reason": r.reason or None, "deps": list(by_id[r.action].deps),
                 "inputs": by_id[r.action].inputs}
                for r in rows
            ],
        }, indent=2, sort_keys=False, default=str, ensure_ascii=False))
        return 0
    console = Console(highlight=False)
    if args.all:
        _print_table(console, plan, rows, f"{manifest.release.name} {manifest.release.version}")
    release = f"{manifest.release.name} {manifest.release.version}"
    _print_summary(console, release, plan, rows, stage, groups, describe_store(args.store), listed=args.all,
                   order=pipeline.order)
    return 0


def _print_table(console: Console, plan: Plan, rows: list[ActionStatus], release: str) -> None:
    wide = console if console.is_terminal else Console(width=220, highlight=False)  # logged: ids and reasons on one line
    table = Table(title=f"{release} — {len(rows)} actions", title_justify="left")
    table.add_column("action", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("key / reason")
    for row in rows:
        detail = row.reason if row.status == "blocked" or not row.key else row.key[:16]
        table.add_row(escape(row.action), f"[{_COLOURS[row.status]}]{row.status}[/]", escape(detail))
    wide.print(table)


def _print_summary(console: Console, release: str, plan: Plan, rows: list[ActionStatus], stage: dict[str, str],
                   groups: list[BlockedGroup], store_line: str, listed: bool, order: tuple[str, ...]) -> None:
    counts = Counter(r.status for r in rows)
    console.print(f"[bold]{escape(release)}[/] ({escape(plan.manifest)}): {len(rows)} actions — "
                  f"{count_line(counts, STATUS_ORDER)}")
    console.print(escape(store_line), soft_wrap=True)  # a path to copy: never broken
    stages = by_stage(((r.action, r.status) for r in rows), stage, order)
    width = max(len(name) for name in stages) if stages else 0
    console.print("by stage:")
    for name, c in stages.items():
        console.print(f"  {name:<{width}}  {sum(c.values()):>4}  {count_line(c, STATUS_ORDER)}")
    if groups:
        console.print(f"blocked, by reason ({counts['blocked']}):")
        console.print(blocked_grid(groups))
    if plan.notes:
        notes = Table.grid(padding=(0, 1))
        notes.add_column(no_wrap=True)
        notes.add_column()
        for note in plan.notes:
            notes.add_row("note:", escape(note))
        console.print(notes)
    if not listed:
        console.print("every action: cairn plan --all; for machines: cairn plan --json")


def blocked_grid(groups: list[BlockedGroup]) -> Table:
    """Each group as its count and reason, the actions under the reason; wrapped lines keep the indent."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    for group in groups:
        where = f"blocked here: {id_list(group.here)}" if group.here else ""
        waits = f"{len(group.waiting)} more wait on {'it' if len(group.here) == 1 else 'them'}" if group.waiting else ""
        grid.add_row(f"  [red]{group.count}[/]", escape(group.reason))
        grid.add_row("", f"[dim]{escape('; '.join(x for x in (where, waits) if x))}[/]")
    return grid
