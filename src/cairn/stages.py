"""The pipeline after the SDK, declared once: each stage's planner and the runners of the action kinds it adds.

manifest → plan → fetch → build → **coverage → wheels → images → gates → user-install → bundle** → sign → publish →
matrix.
The SDK's own actions (fetch, build, assemble) are planned by ``cairn.plan.planner`` and run by
``cairn.execute.runners``; every later stage is listed here, in pipeline order, and imported explicitly, so
the planner and the executor find the same stages whichever of them a process uses first. Each stage's
package splits what to do from doing it: ``<stage>/plan.py`` has ``extend_plan(context)``, which may read
the actions the stages before it added and reads no dependency's output nor runs a tool; ``<stage>/run.py``
has the runners of the action kinds it adds (its ``RUNNERS``), which read their dependencies' trees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cairn.containers import plan as images_plan
from cairn.containers import run as images_run
from cairn.coverage import plan as coverage_plan
from cairn.coverage import run as coverage_run
from cairn.execute.runners import Runner
from cairn.gates import plan as gates_plan
from cairn.gates import run as gates_run
from cairn.plan.context import StageContext
from cairn.plan.graph import Action
from cairn.plan.planner import Pipeline
from cairn.plan.toolchain import IMAGE_ID, PUSH_ID
from cairn.publish import plan as bundle_plan
from cairn.publish import run as bundle_run
from cairn.userinstall import plan as user_install_plan
from cairn.userinstall import run as user_install_run
from cairn.wheels import plan as wheels_plan
from cairn.wheels import run as wheels_run


@dataclass(frozen=True)
class Stage:
    name: str
    extend_plan: Callable[[StageContext], None]
    runners: Mapping[str, Runner]


STAGES: tuple[Stage, ...] = (
    Stage("coverage", coverage_plan.extend_plan, coverage_run.RUNNERS),
    Stage("wheels", wheels_plan.extend_plan, wheels_run.RUNNERS),
    Stage("images", images_plan.extend_plan, images_run.RUNNERS),
    Stage("gates", gates_plan.extend_plan, gates_run.RUNNERS),
    Stage("user-install", user_install_plan.extend_plan, user_install_run.RUNNERS),
    Stage("bundle", bundle_plan.extend_plan, bundle_run.RUNNERS),
)
NAMES = tuple(stage.name for stage in STAGES)

# action kind → runner, over every stage (a kind belongs to exactly one stage)
RUNNERS: dict[str, Runner] = {kind: run for stage in STAGES for kind, run in stage.runners.items()}
assert len(RUNNERS) == sum(len(stage.runners) for stage in STAGES), "two stages declare the same action kind"


def chosen(names: Sequence[str] | None) -> tuple[Stage, ...]:
    """The stages ``names`` picks, in pipeline order (``None``: all of them; ``[]``: none, the SDK only)."""
    if names is None:
        return STAGES
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}: the stages are {', '.join(NAMES)}")
    return tuple(stage for stage in STAGES if stage.name in names)


SDK_STAGE = "sdk"  # the SDK's own actions (fetch, build, assemble, the build image), planned by cairn.plan
STAGE_ORDER = (SDK_STAGE, *NAMES)


def stage_of(action: Action) -> str:
    """The stage an action belongs to: the one whose runners run its kind (the SDK's own kinds: ``sdk``)."""
    if action.id in (IMAGE_ID, PUSH_ID):
        return SDK_STAGE
    for stage in STAGES:
        if action.kind in stage.runners:
            return stage.name
    return SDK_STAGE


PIPELINE = Pipeline(STAGES, RUNNERS, stage_of, STAGE_ORDER)
