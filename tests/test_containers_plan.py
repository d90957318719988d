"""The containers stage's plan: images install wheels from the family index; framework images this
release cannot build are blocked with the exact missing wheel, derived from what the index publishes."""

from __future__ import annotations

import pytest

from cairn.plan import planner
from cairn.plan.prepare import load, make_plan
from conftest import LEGACY

STAGES = ["cairn.wheels.plan", "cairn.containers.plan", "cairn.gates.plan"]


@pytest.fixture(scope="module")
def actions() -> dict:
    saved = list(planner.STAGE_PLANNERS)
    planner.STAGE_PLANNERS[:] = STAGES
    try:
        manifest, registry = load(LEGACY)
        return make_plan(manifest, registry, ["gfx90a"]).by_id()
    finally:
        planner.STAGE_PLANNERS[:] = saved


def test_images_install_from_the_family_index(actions: dict) -> None:
    runtime, smoke = actions["image:runtime@gfx90a"], actions["image:smoke@gfx90a"]
    assert "index:gfx90a" in runtime.deps and "index:gfx90a" in smoke.deps
    assert runtime.inputs["wheels"] == ["rocm-sdk-core", "rocm-sdk-libraries-gfx90a"]  # the family's math libraries
    assert smoke.inputs["wheels"] == ["cairn-smoke"]
    assert runtime.inputs["links"] == {"opt/rocm": "/usr/local/lib/python3.11/dist-packages/_rocm_sdk_core"}


def test_sglang_is_blocked_by_torch_for_rocm(actions: dict) -> None:
    assert actions["image:sglang@gfx90a"].blocked == (
        "sglang 0.5.10.post1: sglang is in index:gfx90a, but its runtime needs torch built for ROCm, which this "
        "release cannot build: the pytorch source build needs a ROCm ≥ 6 toolchain (this release ships ROCm 5.2.3)")


def test_jax_is_blocked_by_the_unmirrored_pjrt_wheel(actions: dict) -> None:
    reason = actions["image:jax@gfx90a"].blocked
    assert reason.startswith("jax 0.10.0: jax-rocm7-plugin is in index:gfx90a, but its runtime needs jax-rocm7-pjrt, "
                             "which is not mirrored into the index (the jax wheels recipe mirrors only jax-rocm7-plugin 0.10.0)")
    assert reason.endswith("also jax-rocm7-plugin is built for ROCm 7 (this release ships ROCm 5.2.3)")


def test_without_the_wheels_stage_images_say_what_is_missing() -> None:
    saved = list(planner.STAGE_PLANNERS)
    planner.STAGE_PLANNERS[:] = ["cairn.containers.plan"]
    try:
        manifest, registry = load(LEGACY)
        plan = make_plan(manifest, registry, ["gfx90a"]).by_id()
    finally:
        planner.STAGE_PLANNERS[:] = saved
    assert plan["image:runtime@gfx90a"].blocked.startswith(
        "needs index:gfx90a: images install the release's wheels from the family index")
