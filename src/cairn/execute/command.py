"""``cairn build [MANIFEST] [--family F]... [--jobs N] [--store DIR] [--cache s3://B/P [--cache-read-only]]
[--compiler-cache s3://B/P] [--json]``.

Runs the plan into the store with a progress display (rich on a terminal, one plain line per action
otherwise), then prints where the SDK tree is. Exit 0 when everything runnable succeeded, 1 if an action
failed; blocked actions are listed with their reasons but do not fail the build. With ``--cache`` the
local store gets a shared S3 action cache behind it (``cairn.store.shared``); with ``--compiler-cache`` the
compiles of actions that do run go through sccache in S3 (``cairn.execute.compiler_cache``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cairn.cli_options import add_json, add_store, positive_int
from cairn.errors import CairnError
from cairn.execute.compiler_cache import CompilerCache
from cairn.execute.executor import BuildReport, Outcome, closure, execute
from cairn.io import atomic_write
from cairn.plan.graph import Action
from cairn.plan.prepare import load, make_plan
from cairn.store.local import LocalStore
from cairn.store.shared import CachedStore, SharedCache


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", nargs="?", help="release manifest path or name (default: the default release)")
    parser.add_argument("--family", action="append", default=[], help="limit to this gfx family (repeatable)")
    parser.add_argument("--jobs", "-j", type=positive_int, default=os.cpu_count() or 2, help="actions to run at once")
    add_store(parser, "content-addressed store (default .cairn/)")
    parser.add_argument("--only", action="append", default=[], metavar="ACTION",
                        help="run only this action and what it depends on (repeatable), e.g. assemble:sdk")
    add_json(parser, "print a machine-readable report at the end")
    parser.add_argument("--cache", metavar="s3://BUCKET/PREFIX", default=os.environ.get("CAIRN_CACHE") or None,
                        help="shared action cache in S3 (endpoint from $CAIRN_S3_ENDPOINT; default $CAIRN_CACHE): "
                             "looked up before an action runs, written after it ran")
    parser.add_argument("--cache-read-only", action="store_true",
                        help="read the shared cache, never write it (for untrusted jobs such as pull requests)")
    parser.add_argument("--compiler-cache", metavar="s3://BUCKET/PREFIX", default=os.environ.get("CAIRN_COMPILER_CACHE") or None,
                        help="sccache in S3 for the compiles in the build image (endpoint as for --cache; default "
                             "$CAIRN_COMPILER_CACHE): speeds up actions that run, changes no output")


def run(args: argparse.Namespace) -> int:
    manifest, registry = load(args.manifest)
    if args.cache_read_only and not args.cache:
        raise CairnError("--cache-read-only needs --cache s3://BUCKET/PREFIX (or $CAIRN_CACHE) — there is no cache to read")
    cache = SharedCache(args.cache, read_only=args.cache_read_only) if args.cache else None
    compiler_cache = CompilerCache.from_url(args.compiler_cache) if args.compiler_cache else None
    plan = make_plan(manifest, registry, args.family, store=args.store)
    local = LocalStore(args.store)
    store: LocalStore | CachedStore = CachedStore(local, cache) if cache else local
    store.lock()
    try:
        try:
            report = _execute_with_progress(plan, store, args.jobs, quiet=args.json, only=set(args.only) or None,
                                            compiler_cache=compiler_cache)
        finally:
            if cache:
                cache.finish()  # every upload in the bucket (or reported failed) before the report and the unlock
    finally:
        store.unlock()
    sdk = report.outcomes.get("assemble:sdk")
    summary = {
        "schema": "cairn.execute/v1",
        "manifest": plan.manifest,
        "manifest_sha256": plan.manifest_sha256,
        "store": str(store.root),
        "counts": {s: report.count(s) for s in ("ran", "cached", "blocked", "failed", "skipped")},
        "sdk_tree": str(store.tree(sdk.output)) if sdk and sdk.output else None,
        "cache": cache.report.to_json() if cache else None,
        "compiler_cache": compiler_cache.url if compiler_cache else None,
        "actions": {o.action: {"status": o.status, "output": o.output or None, "detail": o.detail or None,
                               "seconds": round(o.seconds, 3), "log": o.log or None} for o in report.outcomes.values()},
    }
    _write_report(store.root / "last-build.json", summary)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(report, summary)
    return 0 if report.ok else 1


def _execute_with_progress(plan, store: LocalStore | CachedStore, jobs: int, quiet: bool, only: set[str] | None,
                           compiler_cache: CompilerCache | None = None) -> BuildReport:
    total = len(closure(plan, only)) if only else len(plan.actions)
    if quiet:
        return execute(plan, store, jobs=jobs, only=only, compiler_cache=compiler_cache)
    console = Console(stderr=True)
    if not console.is_terminal:
        done_count = 0

        def plain(event: str, item: Outcome | Action) -> None:
            nonlocal done_count
            if event == "done" and isinstance(item, Outcome):
                done_count += 1
                extra = f" — {item.detail}" if item.detail else ""
                print(f"[{done_count}/{total}] {item.action}: {item.status} ({item.seconds:.1f}s){extra}", file=sys.stderr, flush=True)

        return execute(plan, store, jobs=jobs, listener=plain, only=only, compiler_cache=compiler_cache)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("building", total=total)
        active: set[str] = set()

        def live(event: str, item: Outcome | Action) -> None:
            if isinstance(item, Action):
                active.add(item.id)
            else:
                active.discard(item.action)
                progress.advance(task)
                if item.status in ("ran", "failed"):
                    progress.console.print(f"{item.action}: {item.status} ({item.seconds:.1f}s)" + (f" — {item.detail}" if item.status == "failed" else ""))
            progress.update(task, description=", ".join(sorted(active))[:60] or "building")

        return execute(plan, store, jobs=jobs, listener=live, only=only, compiler_cache=compiler_cache)


def _print_summary(report: BuildReport, summary: dict) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=220)
    counts = summary["counts"]
    console.print(f"{counts['ran']} ran, {counts['cached']} cached, {counts['blocked']} blocked, "
                  f"{counts['failed']} failed, {counts['skipped']} skipped")
    for outcome in report.outcomes.values():
        if outcome.status in ("failed", "blocked"):
            console.print(f"  {outcome.action}: {outcome.status} — {outcome.detail}" + (f" (log: {outcome.log})" if outcome.log else ""))
    cache = summary["cache"]
    if cache:
        console.print(f"cache {cache['url']}{' (read-only)' if cache['read_only'] else ''}: {len(cache['fetched'])} fetched, "
                      f"{len(cache['uploaded'])} uploaded, {len(cache['raced'])} raced, {len(cache['damaged'])} damaged, "
                      f"{len(cache['failed'])} failed; {_megabytes(cache['received_bytes'])} received, "
                      f"{_megabytes(cache['sent_bytes'])} sent")
    if summary["sdk_tree"]:
        console.print(f"SDK tree: {summary['sdk_tree']}")


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


def _write_report(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")
