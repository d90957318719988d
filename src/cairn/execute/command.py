"""``cairn build [MANIFEST] [--family F]... [--jobs N] [--store DIR] [--cache s3://B/P --cache-trust FILE
[--cache-key PEM | --cache-read-only]] [--compiler-cache s3://B/P] [--json | --quiet | --verbose]``.

Says which store it uses, runs the plan into it with one progress display (a rich bar on a terminal; logged,
a line per action that ran or failed — a no-op build of 312 cached actions prints none of them; ``--verbose``
a line for every action, ``--quiet`` nothing), then a summary: the counts, failures with their logs, blocked
actions grouped by reason, where the SDK tree is. ``last-build.json`` keeps, for each action, the seconds of
the run that built it (a cached action its earlier run's), which ``cairn ci github --timings`` sizes shards by. Exit 0 when everything runnable succeeded, 1 if an action
failed; blocked actions are listed with their reasons but do not fail the build. With ``--cache`` the
local store gets a shared S3 action cache behind it (``cairn.store.shared``), whose records are used only when
signed by a writer key the trust list names (``cairn.store.signing``); with ``--compiler-cache`` the
compiles of actions that do run go through sccache in S3 (``cairn.execute.compiler_cache``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cairn.cli_options import add_json, add_store, positive_int
from cairn.errors import CairnError
from cairn.execute.compiler_cache import CompilerCache
from cairn.execute.executor import BuildReport, Outcome, closure, execute
from cairn.io import atomic_write
from cairn.paths import describe_store
from cairn.plan.command import blocked_grid
from cairn.plan.graph import Action
from cairn.plan.planner import Pipeline
from cairn.plan.prepare import load, make_plan
from cairn.plan.summary import count_line, group_blocked, id_list
from cairn.store.local import LocalStore
from cairn.store.shared import CachedStore, SharedCache
from cairn.store.signing import KEY_ENV, load_trust, load_writer


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", nargs="?", help="release manifest path or name (default: the default release)")
    parser.add_argument("--family", action="append", default=[], help="limit to this gfx family (repeatable)")
    parser.add_argument("--jobs", "-j", type=positive_int, default=os.cpu_count() or 2, help="actions to run at once")
    add_store(parser, "content-addressed store")
    parser.add_argument("--only", action="append", default=[], metavar="ACTION",
                        help="run only this action and what it depends on (repeatable), e.g. assemble:sdk")
    shown = parser.add_mutually_exclusive_group()
    add_json(shown, "print a machine-readable report at the end (nothing while it runs)")
    shown.add_argument("--quiet", "-q", action="store_true", help="no progress; at the end the counts and failures only")
    shown.add_argument("--verbose", "-v", action="store_true", help="a line for every action as it finishes, cached ones too")
    parser.add_argument("--cache", metavar="s3://BUCKET/PREFIX|file:///DIR", default=os.environ.get("CAIRN_CACHE") or None,
                        help="shared action cache in S3 (endpoint from $CAIRN_S3_ENDPOINT) or in a directory the machines "
                             "share, e.g. an NFS mount (file:///DIR or a path; it must exist); default $CAIRN_CACHE: "
                             "looked up before an action runs, written after it ran; records are signed and checked "
                             "against --cache-trust the same way in both")
    parser.add_argument("--cache-read-only", action="store_true",
                        help="read the shared cache, never write it (for untrusted jobs such as pull requests)")
    parser.add_argument("--cache-trust", metavar="FILE", type=Path, default=None,
                        help="the cache-writer public keys whose records are used (a JSON list; default $CAIRN_CACHE_TRUST): "
                             "a record not signed by one of them is not used, the action runs here")
    parser.add_argument("--cache-key", metavar="PEM", type=Path, default=None,
                        help="this machine's cache-writer key, which signs every record it pushes (default "
                             "$CAIRN_CACHE_SIGNING_KEY: the PEM or its path; make one with cairn keys cache-writer)")
    parser.add_argument("--compiler-cache", metavar="s3://BUCKET/PREFIX", default=os.environ.get("CAIRN_COMPILER_CACHE") or None,
                        help="sccache in S3 for the compiles in the build image (endpoint as for --cache; default "
                             "$CAIRN_COMPILER_CACHE): speeds up actions that run, changes no output")


TAKES_PIPELINE = True


@dataclass(frozen=True)
class BuildRequest:
    """One build, as the command's options ask for it: ``cairn release`` hands the same record in, so both run
    the one build with the same store, progress and report, and neither drives the other through an argv."""

    manifest: str | None  # a path or a release name; None = the default release
    store: Path
    jobs: int = os.cpu_count() or 2
    families: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    mode: str = "normal"  # normal | quiet | verbose | json
    cache: SharedCache | None = None
    compiler_cache: CompilerCache | None = None


def run(args: argparse.Namespace, pipeline: Pipeline) -> int:
    load(args.manifest)  # a bad manifest is its one line before any option of the caches is judged, as always
    if args.cache_read_only and not args.cache:
        raise CairnError("--cache-read-only needs --cache s3://BUCKET/PREFIX or file:///DIR (or $CAIRN_CACHE) — there is no cache to read")
    if (args.cache_trust or args.cache_key) and not args.cache:
        raise CairnError(f"{'--cache-trust' if args.cache_trust else '--cache-key'} needs --cache s3://BUCKET/PREFIX or file:///DIR (or $CAIRN_CACHE) "
                         "— it is for the shared cache's records")
    mode = "json" if args.json else "quiet" if args.quiet else "verbose" if args.verbose else "normal"
    return build(BuildRequest(args.manifest, args.store, args.jobs, tuple(args.family), tuple(args.only), mode,
                              cache=_shared_cache(args) if args.cache else None,
                              compiler_cache=CompilerCache.from_url(args.compiler_cache) if args.compiler_cache else None),
                 pipeline)


def build(request: BuildRequest, pipeline: Pipeline) -> int:
    """Run ``request``'s plan into its store: progress, ``last-build.json`` and the summary; 0 when everything
    runnable succeeded, 1 when an action failed."""
    manifest, registry = load(request.manifest)
    cache, compiler_cache, mode = request.cache, request.compiler_cache, request.mode
    plan = make_plan(manifest, registry, list(request.families), store=request.store, stages=pipeline.stages)
    which = describe_store(request.store)  # before the store is made: "(new)" when this build creates it
    local = LocalStore(request.store)
    if mode in ("normal", "verbose"):  # before the first action: a wrong store is seen before a cold build starts
        print(which, file=sys.stderr, flush=True)
        for note in plan.notes[:1] if plan.notes and plan.notes[0].startswith("--family") else ():
            print(f"note: {note}", file=sys.stderr, flush=True)
    store: LocalStore | CachedStore = CachedStore(local, cache) if cache else local
    started = time.monotonic()
    store.lock()
    try:
        try:
            report = _execute_with_progress(plan, store, pipeline, request.jobs, mode, only=set(request.only) or None,
                                            compiler_cache=compiler_cache)
        finally:
            if cache:
                cache.finish()  # every upload in the bucket (or reported failed) before the report and the unlock
        earlier = _earlier_seconds(store.root / "last-build.json")
    finally:
        store.unlock()
    sdk = report.outcomes.get("assemble:sdk")
    summary = {
        "schema": "cairn.execute/v1",
        "manifest": plan.manifest,
        "manifest_sha256": plan.manifest_sha256,
        "store": str(store.root),
        "counts": {s: report.count(s) for s in ("ran", "cached", "blocked", "failed", "skipped")},
        "seconds": round(time.monotonic() - started, 3),
        "sdk_tree": str(store.tree(sdk.output)) if sdk and sdk.output else None,
        "cache": cache.report.to_json() if cache else None,
        "compiler_cache": compiler_cache.url if compiler_cache else None,
        "actions": {o.action: {"status": o.status, "output": o.output or None, "detail": o.detail or None,
                               "seconds": _seconds(o, earlier), "log": o.log or None} for o in report.outcomes.values()},
    }
    _write_report(store.root / "last-build.json", summary)
    if mode == "json":
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(report, summary, quiet=mode == "quiet")
    return 0 if report.ok else 1


def _shared_cache(args: argparse.Namespace) -> SharedCache:
    """The shared cache with its trust list and, unless read-only, the writer key that signs what it pushes. The
    key is then dropped from the environment: no action's tool (nor the build container) inherits it."""
    trust = load_trust(args.cache_trust)
    signer = None if args.cache_read_only else load_writer(args.cache_key)
    os.environ.pop(KEY_ENV, None)
    return SharedCache(args.cache, read_only=args.cache_read_only, trust=trust, signer=signer)


def _earlier_seconds(path: Path) -> dict[tuple[str, str], float]:
    """(action, output) → seconds from the previous report: a cache record written before records kept seconds
    says 0, and the report of the run that built the output still knows. Unreadable: nothing (it is only a hint)."""
    try:
        actions = json.loads(path.read_text()).get("actions", {})
        return {(str(a), str(o["output"])): float(o["seconds"]) for a, o in actions.items()
                if isinstance(o, dict) and o.get("output") and isinstance(o.get("seconds"), int | float)}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _seconds(outcome: Outcome, earlier: dict[tuple[str, str], float]) -> float:
    """The seconds of the run that built the action's output: this run's, or for a cached action its record's
    (else the previous report's for the same output), never the 0 s a cache hit took."""
    seconds = outcome.seconds
    if outcome.status == "cached" and not seconds:
        seconds = earlier.get((outcome.action, outcome.output), 0.0)
    return round(seconds, 3)


def _line(item: Outcome, done: int, total: int) -> str:
    """One action's line (``--verbose``, and a logged build's ran and failed actions)."""
    took = f" ({item.seconds:.1f}s)" if item.status in ("ran", "failed") else ""
    extra = f" — {item.detail}" if item.detail else ""
    return f"[{done}/{total}] {item.action}: {item.status}{took}{extra}"


def _execute_with_progress(plan, store: LocalStore | CachedStore, pipeline: Pipeline, jobs: int, mode: str, only: set[str] | None,
                           compiler_cache: CompilerCache | None = None) -> BuildReport:
    """``json``/``quiet``: nothing while it runs. On a terminal: one progress bar naming the running actions,
    a line only for each failure (``verbose``: a line for every action). Logged (not a terminal): a line for each
    action that ran or failed — a no-op build prints none (``verbose``: every action, cached ones too)."""
    total = len(closure(plan, only)) if only else len(plan.actions)
    if mode in ("json", "quiet"):
        return execute(plan, store, runners=pipeline.runners, jobs=jobs, only=only, compiler_cache=compiler_cache)
    verbose = mode == "verbose"
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        done_count = 0

        def plain(event: str, item: Outcome | Action) -> None:
            nonlocal done_count
            if event == "done" and isinstance(item, Outcome):
                done_count += 1
                if verbose or item.status in ("ran", "failed"):
                    print(_line(item, done_count, total), file=sys.stderr, flush=True)

        return execute(plan, store, runners=pipeline.runners, jobs=jobs, listener=plain, only=only, compiler_cache=compiler_cache)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("building", total=total)
        active: set[str] = set()
        finished = 0

        def live(event: str, item: Outcome | Action) -> None:
            nonlocal finished
            if isinstance(item, Action):
                active.add(item.id)
            else:
                active.discard(item.action)
                finished += 1
                progress.advance(task)
                if verbose or item.status == "failed":
                    progress.console.print(escape(_line(item, finished, total)))
            progress.update(task, description=", ".join(sorted(active))[:60] or "building")

        return execute(plan, store, runners=pipeline.runners, jobs=jobs, listener=live, only=only, compiler_cache=compiler_cache)


def _print_summary(report: BuildReport, summary: dict, quiet: bool = False) -> None:
    """The end of every build: the counts, what failed (with its log), what is blocked grouped by reason, the cache
    and where the SDK is. ``--quiet``: the counts and the failures only."""
    console = Console(highlight=False)
    counts = summary["counts"]
    console.print(f"{len(report.outcomes)} actions in {summary['seconds']:.1f} s: "
                  f"{count_line(counts, ('ran', 'cached', 'failed', 'skipped', 'blocked'))}")
    for outcome in report.outcomes.values():
        if outcome.status == "failed":
            console.print(f"  [red]failed[/] {escape(outcome.action)} — {escape(outcome.detail)}"
                          + (f" (log: {escape(outcome.log)})" if outcome.log else ""), soft_wrap=True)
    if quiet:
        return
    skipped = [o.action for o in report.outcomes.values() if o.status == "skipped"]
    if skipped:
        console.print(f"  skipped after a failure: {escape(id_list(tuple(skipped)))}")
    groups = group_blocked((o.action, o.detail) for o in report.outcomes.values() if o.status == "blocked")
    if groups:
        console.print(f"blocked, by reason ({counts['blocked']}):")
        console.print(blocked_grid(groups))
    cache = summary["cache"]
    if cache:
        console.print(f"cache {cache['url']}{' (read-only)' if cache['read_only'] else ''}: {len(cache['fetched'])} fetched, "
                      f"{len(cache['uploaded'])} uploaded, {len(cache['raced'])} raced, {len(cache['damaged'])} damaged, "
                      f"{len(cache['untrusted'])} untrusted, {len(cache['failed'])} failed; {_megabytes(cache['received_bytes'])} received, "
                      f"{_megabytes(cache['sent_bytes'])} sent")
    if summary["sdk_tree"]:
        console.print(f"SDK tree: {escape(summary['sdk_tree'])}", soft_wrap=True)  # a path to copy: never broken


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


def _write_report(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")
