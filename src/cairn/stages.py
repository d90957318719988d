"""The pipeline after the SDK, declared once: each stage's planner and the runners of the action kinds it adds.

manifest → plan → fetch → build → **coverage → wheels → images → gates → bundle** → sign → publish → matrix.
The SDK's own actions (fetch, build, assemble) are planned by ``cairn.plan.planner`` and run by
``cairn.execute.runners``; every later stage is listed here, in pipeline order, and imported explicitly, so
the planner and the executor find the same stages whichever of them a process uses first. Each stage's
``extend_plan(context)`` may read the actions the stages before it added.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.containers import plan as images
from cairn.coverage import plan as coverage
from cairn.gates import plan as gates
from cairn.plan.context import StageContext
from cairn.publish import plan as bundle
from cairn.wheels import plan as wheels


@dataclass(frozen=True)
class Stage:
    name: str
    extend_plan: Callable[[StageContext], None]
    runners: Mapping[str, Callable[[Any], None]]


STAGES: tuple[Stage, ...] = (
    Stage("coverage", coverage.extend_plan, coverage.RUNNERS),
    Stage("wheels", wheels.extend_plan, wheels.RUNNERS),
    Stage("images", images.extend_plan, images.RUNNERS),
    Stage("gates", gates.extend_plan, gates.RUNNERS),
    Stage("bundle", bundle.extend_plan, bundle.RUNNERS),
)
NAMES = tuple(stage.name for stage in STAGES)

# action kind → runner, over every stage (a kind belongs to exactly one stage)
RUNNERS: dict[str, Callable[[Any], None]] = {kind: run for stage in STAGES for kind, run in stage.runners.items()}
assert len(RUNNERS) == sum(len(stage.runners) for stage in STAGES), "two stages declare the same action kind"


def chosen(names: Sequence[str] | None) -> tuple[Stage, ...]:
    """The stages ``names`` picks, in pipeline order (``None``: all of them; ``[]``: none, the SDK only)."""
    if names is None:
        return STAGES
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}: the stages are {', '.join(NAMES)}")
    return tuple(stage for stage in STAGES if stage.name in names)
