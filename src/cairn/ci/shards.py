"""From a plan to CI shards: which actions each CI job builds, which jobs it waits for, how long it should take.

Sharding is by *stage* and *family*, nothing cleverer:

1. An action's stage is the pipeline stage whose runner runs its kind (``cairn.stages``); the SDK's own kinds
   (fetch, build, assemble) and the release's build image (``image:toolchain``, ``push:toolchain``, an input of
   every compile) are the ``sdk`` stage.
2. An action's family is its own ``family``, else the release family its id ends in (``index:gfx1151``,
   ``linkage:jax@gfx1151``), else the one family all its same-stage dependencies share (``push:runtime@gfx942``
   follows ``image:runtime@gfx942``); otherwise it is family-neutral.
3. Shard name = stage, plus ``-<family>`` for a family's actions: ``sdk``, ``sdk-gfx1151``, ``wheels-gfx1151``,
   ``images-gfx1151``, ``gates-gfx1151``, ``bundle`` …
4. A shard needs every shard that holds a dependency of one of its actions. Should two shards ever need each
   other (through a chain of actions), the shards of that cycle are merged into one, so the job graph is
   acyclic by construction whatever the stage planners add.

A shard's job runs ``cairn build --only`` on the shard's *sinks* (its actions no other action of the shard
depends on): ``--only`` builds what they depend on, which is the rest of the shard plus actions of the shards
it needs — those come from the shared action cache the earlier jobs filled.

Sizing: given the per-action ``seconds`` of a ``last-build.json``, a shard's estimate is the sum over its
actions (what one job takes at ``--jobs 1``, an upper bound). A shard with an action the report does not
measure has no estimate: it is *unknown*, never guessed. Pure: no I/O but :func:`read_timings`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cairn.errors import InputError
from cairn.plan.graph import Action, Plan, strongly_connected
from cairn.plan.ids import parse_action_id
from cairn.plan.toolchain import IMAGE_ID, PUSH_ID
from cairn.stages import STAGE_ORDER, stage_of

MAX_TIMEOUT_MINUTES = 360  # GitHub-hosted runners stop a job after 6 hours
DOCKER_STAGES = ("images", "gates", "user-install")  # stages whose every action builds, pushes or runs an image


@dataclass(frozen=True)
class Shard:
    """One CI job's share of the plan."""

    name: str
    stage: str
    family: str  # "" for family-neutral shards
    actions: tuple[str, ...]  # every action the shard holds, in plan order
    only: tuple[str, ...]  # what its job passes to `cairn build --only`
    needs: tuple[str, ...]  # shards whose actions it depends on
    seconds: float | None  # estimated duration; None = unknown
    unmeasured: int = 0  # how many of its actions the timings report did not measure
    gates: int = 0  # how many of its actions are gates (a gate shard's job is required before publish)
    docker: bool = False  # one of its actions needs a Docker Engine and a registry (``needs_docker``)

    @property
    def is_gate(self) -> bool:
        return self.gates > 0

    def timeout_minutes(self) -> int:
        """Three times the estimate plus ten minutes (a cold cache, a slower runner); the maximum when unknown."""
        if self.seconds is None:
            return MAX_TIMEOUT_MINUTES
        return min(MAX_TIMEOUT_MINUTES, max(15, math.ceil(3 * self.seconds / 60) + 10))

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "stage": self.stage, "family": self.family or None, "actions": list(self.actions),
                "only": list(self.only), "needs": list(self.needs), "seconds": self.seconds,
                "unmeasured": self.unmeasured, "gates": self.gates, "docker": self.docker,
                "timeout_minutes": self.timeout_minutes()}


def read_timings(path: Path) -> dict[str, float]:
    """Per-action ``seconds`` from a ``cairn build`` report (``<store>/last-build.json``)."""
    fix = "pass the last-build.json a `cairn build` wrote into its store"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(path, "no such file", fix) from None
    except (OSError, ValueError) as exc:
        raise InputError(path, f"cannot read the build report ({exc})", fix) from None
    actions = data.get("actions") if isinstance(data, dict) else None
    if not isinstance(actions, dict):
        raise InputError(path, "not a build report: no 'actions' object", fix)
    timings: dict[str, float] = {}
    for action_id, outcome in actions.items():
        seconds = outcome.get("seconds") if isinstance(outcome, dict) else None
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0 or not math.isfinite(seconds):
            raise InputError(path, f"action {action_id!r} has no valid 'seconds' ({seconds!r})", fix)
        timings[str(action_id)] = float(seconds)
    return timings


def needs_docker(action: Action) -> bool:
    """Whether running ``action`` talks to a Docker Engine and a registry: building, pushing and gating images,
    and compiling in the release's build image, which is a ``docker run`` of it."""
    return (stage_of(action) in DOCKER_STAGES or action.id in (IMAGE_ID, PUSH_ID)
            or isinstance(action.inputs.get("toolchain"), dict))


def shard_plan(plan: Plan, families: tuple[str, ...], timings: Mapping[str, float] | None = None) -> tuple[Shard, ...]:
    """The plan's shards, dependencies first (see the module docstring for the rules)."""
    by_id = plan.by_id()
    stage = {a.id: stage_of(a) for a in plan.actions}
    family: dict[str, str] = {}
    for action in plan.actions:  # dependencies first, so a dependency's family is known when it is inherited
        family[action.id] = _family_of(action, families, stage, family)
    shard_of = {a.id: stage[a.id] + (f"-{family[a.id]}" if family[a.id] else "") for a in plan.actions}
    shard_of = _merge_cycles(plan, shard_of)

    members: dict[str, list[str]] = {}
    for action in plan.actions:
        members.setdefault(shard_of[action.id], []).append(action.id)
    needs = {name: sorted({shard_of[d] for a in ids for d in by_id[a].deps} - {name}) for name, ids in members.items()}
    order = _order(members, needs)
    shards = []
    for name in order:
        ids = members[name]
        inside = set(ids)
        depended_on = {d for a in ids for d in by_id[a].deps if d in inside}
        unmeasured = sum(1 for a in ids if a not in (timings or {}))
        seconds = round(sum(timings[a] for a in ids), 3) if timings is not None and not unmeasured else None
        first = by_id[ids[0]]
        shards.append(Shard(name=name, stage=stage[first.id], family=family[first.id] if name != stage[first.id] else "",
                            actions=tuple(ids), only=tuple(a for a in ids if a not in depended_on),
                            needs=tuple(sorted(needs[name], key=order.index)), seconds=seconds,
                            unmeasured=unmeasured if timings is not None else 0,
                            gates=sum(1 for a in ids if by_id[a].kind == "gate"),
                            docker=any(needs_docker(by_id[a]) for a in ids)))
    return tuple(shards)


@dataclass(frozen=True)
class CriticalPath:
    """The chain of shard jobs that bounds a sharded build's wall time: each job waits for the jobs it needs,
    so with enough runners the build takes as long as its longest chain of estimates."""

    shards: tuple[str, ...]  # first job to last
    seconds: float | None  # None: a shard on some chain has no estimate, so the longest chain is unknown

    def to_json(self) -> dict[str, object]:
        return {"shards": list(self.shards), "seconds": self.seconds}


def critical_path(shards: tuple[Shard, ...]) -> CriticalPath:
    """The longest chain of ``needs`` by estimated seconds (shards come dependencies first). Unknown when any
    shard is unmeasured: a chain through it could be the longest, and it is never guessed."""
    if not shards or any(s.seconds is None for s in shards):
        return CriticalPath(shards=(), seconds=None)
    finish: dict[str, float] = {}
    before: dict[str, str | None] = {}
    for shard in shards:
        longest = max(shard.needs, key=lambda n: finish[n], default=None)
        before[shard.name] = longest
        finish[shard.name] = (finish[longest] if longest else 0.0) + float(shard.seconds or 0.0)
    end_shard = max(finish, key=lambda n: finish[n])
    end = finish[end_shard]
    last: str | None = end_shard
    chain: list[str] = []
    while last is not None:
        chain.append(last)
        last = before[last]
    return CriticalPath(shards=tuple(reversed(chain)), seconds=round(end, 3))


def _family_of(action: Action, families: tuple[str, ...], stage: Mapping[str, str], known: Mapping[str, str]) -> str:
    if action.family:
        return action.family
    ref = parse_action_id(action.id)
    suffix = ref.where or ref.name  # index:gfx1151 names its family; fetch:deb:… never does
    if suffix in families:
        return suffix
    inherited = {known[d] for d in action.deps if stage[d] == stage[action.id]}
    return inherited.pop() if len(inherited) == 1 and action.deps else ""


def _merge_cycles(plan: Plan, shard_of: dict[str, str]) -> dict[str, str]:
    """Merge the shards of every cycle of the shard graph (its strongly connected components) into one."""
    edges: dict[str, set[str]] = {name: set() for name in shard_of.values()}
    for action in plan.actions:
        edges[shard_of[action.id]] |= {shard_of[d] for d in action.deps} - {shard_of[action.id]}
    rank = {name: n for n, name in enumerate(dict.fromkeys(shard_of[a.id] for a in plan.actions))}
    merged = {}
    for component in strongly_connected(edges):
        keep = min(component, key=lambda n: (STAGE_ORDER.index(n.split("-", 1)[0]) if n.split("-", 1)[0] in STAGE_ORDER
                                             else len(STAGE_ORDER), rank[n]))
        merged.update({name: keep for name in component})
    return {action_id: merged[name] for action_id, name in shard_of.items()}


def _order(members: Mapping[str, list[str]], needs: Mapping[str, list[str]]) -> list[str]:
    """Shards with what they need first; ties in the order their first action appears in the plan."""
    order: list[str] = []
    placed: set[str] = set()
    pending = list(members)
    while pending:
        ready = next(name for name in pending if set(needs[name]) <= placed)  # acyclic: one is always ready
        pending.remove(ready)
        placed.add(ready)
        order.append(ready)
    return order
