"""Run a plan into a store: dependencies first, up to ``jobs`` actions at once, cached actions skipped.

An action runs when all its dependencies have outputs. Its key is computed from their output digests;
a key already in the action cache is a hit and nothing runs. Otherwise the runner writes into a fresh
work directory, the store commits it (digest, then rename), and the cache record is written last.
Blocked actions never run and neither do their dependents; a failure stops only what depends on it.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from cairn.errors import CairnError
from cairn.execute.compiler_cache import CompilerCache
from cairn.execute.runners import ActionContext, Runner, runner_for
from cairn.plan.graph import Action, Plan
from cairn.store.base import ActionRecord, Store


@dataclass
class Outcome:
    action: str
    status: str  # cached | ran | blocked | failed | skipped
    key: str = ""
    output: str = ""
    seconds: float = 0.0  # how long the run that built it took (for a cached action: an earlier run's, from its record)
    detail: str = ""
    log: str = ""


@dataclass
class BuildReport:
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes.values() if o.status == status)

    def ran(self) -> set[str]:
        return {a for a, o in self.outcomes.items() if o.status == "ran"}

    def output(self, action_id: str) -> str:
        return self.outcomes[action_id].output

    @property
    def ok(self) -> bool:
        return not any(o.status == "failed" for o in self.outcomes.values())


Listener = Callable[[str, Outcome | Action], None]  # ("start", action) / ("done", outcome)


# Kinds that run one at a time, whatever ``jobs`` says: an image build holds its installed tree several times
# over on disk while it runs (the engine's layer, the saved tar, the normalized tar) — for ROCm 7.2's GB of
# libraries two at once doubled that peak and filled the disk. Other kinds keep running beside it.
ONE_AT_A_TIME = frozenset({"image-build"})


def execute(plan: Plan, store: Store, *, runners: Mapping[str, Runner], jobs: int = 2, only: set[str] | None = None,
            listener: Listener | None = None, compiler_cache: CompilerCache | None = None) -> BuildReport:
    """Run every runnable action of ``plan`` (or of ``only`` and their dependencies).

    ``runners``: the later stages' runners by action kind (``cairn.stages.RUNNERS``, handed in by the command:
    the executor imports no stage).

    ``compiler_cache`` is how compiles run, not what they make: it is in no action key."""
    actions = plan.by_id()
    wanted = closure(plan, only) if only else set(actions)
    report = BuildReport()
    notify = listener or (lambda event, item: None)
    pending = [a for a in plan.actions if a.id in wanted]

    def ready(action: Action) -> bool:
        return all(d in report.outcomes for d in action.deps)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        running: dict[Future[Outcome], Action] = {}
        while pending or running:
            for action in [a for a in pending if ready(a)]:
                if action.kind in ONE_AT_A_TIME and any(a.kind == action.kind for a in running.values()):
                    continue  # waits for the running one; it stays pending
                pending.remove(action)
                outcome = _precheck(action, report)
                if outcome:
                    report.outcomes[action.id] = outcome
                    notify("done", outcome)
                    continue
                if len(running) >= max(1, jobs):
                    pending.insert(0, action)
                    break
                notify("start", action)
                running[pool.submit(_run, action, report, store, runners, compiler_cache)] = action
            if not running:
                if pending and not any(ready(a) for a in pending):
                    raise CairnError("internal error: plan has actions whose dependencies never finish")
                continue
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                action = running.pop(future)
                outcome = future.result()
                report.outcomes[action.id] = outcome
                notify("done", outcome)
    return report


def closure(plan: Plan, only: set[str]) -> set[str]:
    actions = plan.by_id()
    unknown = only - set(actions)
    if unknown:
        raise CairnError(f"unknown action(s): {', '.join(sorted(unknown))}")
    result: set[str] = set()
    stack = list(only)
    while stack:
        current = stack.pop()
        if current not in result:
            result.add(current)
            stack.extend(actions[current].deps)
    return result


def _precheck(action: Action, report: BuildReport) -> Outcome | None:
    """Blocked or skipped (a dependency failed): known without asking the store."""
    if action.blocked:
        return Outcome(action.id, "blocked", detail=action.blocked)
    bad = next((d for d in action.deps if report.outcomes[d].status != "cached" and report.outcomes[d].status != "ran"), None)
    if bad:
        return Outcome(action.id, "skipped", detail=f"{bad} {report.outcomes[bad].status}")
    return None


def _run(action: Action, report: BuildReport, store: Store, runners: Mapping[str, Runner],
         compiler_cache: CompilerCache | None = None) -> Outcome:
    """Cached when the store has the key, else run. The lookup is on a worker too: with a shared cache behind
    the store it downloads and unpacks a tree, and two of those at once (or one beside a compile) use both cores."""
    dep_outputs = {d: report.outcomes[d].output for d in action.deps}
    key = action.key(dep_outputs)
    record = store.lookup(key)
    if record:  # the seconds of the run that built it: a no-op build must not tell CI sharding that it takes 0 s
        return Outcome(action.id, "cached", key=key, output=record.output, seconds=record.seconds)
    log_path = store.log_path(key)
    started = time.monotonic()
    workdir = store.workdir(action.id)
    with open(log_path, "w") as log:
        log.write(f"# {action.id}\n# key {key}\n")
        mirror = getattr(store, "root", None)  # a local store keeps fetched inputs by sha256 under sources/
        ctx = ActionContext(action, workdir, log, {d: store.tree(o) for d, o in dep_outputs.items()}, dep_outputs, mirror,
                            compiler_cache)
        try:
            runner_for(action, runners)(ctx)
        except CairnError as exc:
            log.write(f"\nFAILED: {exc}\n")
            return Outcome(action.id, "failed", key=key, detail=str(exc), log=str(log_path),
                           seconds=time.monotonic() - started)
        except Exception as exc:  # a bug in a runner: keep the build going, keep the evidence in the log

            log.write("\n" + traceback.format_exc())
            return Outcome(action.id, "failed", key=key, detail=f"internal error: {exc!r} (see log)",
                           log=str(log_path), seconds=time.monotonic() - started)
    output = store.commit(workdir)
    seconds = time.monotonic() - started
    store.record(ActionRecord(key=key, action=action.id, output=output, seconds=round(seconds, 3)))
    return Outcome(action.id, "ran", key=key, output=output, seconds=seconds, log=str(log_path))

