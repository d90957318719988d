"""The containers stage's plan: images install wheels from the family index; framework images this
release cannot build are blocked with the exact missing wheel, derived from what the index publishes."""

from __future__ import annotations

import pytest

from cairn.plan.prepare import load, make_plan
from cairn.stages import chosen
from support import LEGACY

STAGES = ["wheels", "images", "gates"]


@pytest.fixture(scope="module")
def actions() -> dict:
    manifest, registry = load(LEGACY)
    return make_plan(manifest, registry, ["gfx90a"], stages=chosen(STAGES)).by_id()


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


def test_without_the_wheels_stage_images_say_what_is_missing() -> None:
    manifest, registry = load(LEGACY)
    plan = make_plan(manifest, registry, ["gfx90a"], stages=chosen(["images"])).by_id()
    assert plan["image:runtime@gfx90a"].blocked.startswith(
        "needs index:gfx90a: images install the release's wheels from the family index")


def test_the_7_2_4_jax_image_is_checked_for_linkage_before_it_is_built() -> None:
    manifest, registry = load("default")
    plan = make_plan(manifest, registry, ["gfx94X-dcgpu"], stages=chosen(STAGES)).by_id()
    image, link = plan["image:jax@gfx942"], plan["linkage:jax@gfx94X-dcgpu"]
    assert "linkage:jax@gfx94X-dcgpu" in image.deps and image.inputs["linkage"] == link.id
    wheels = ["numpy", "scipy", "ml-dtypes", "opt-einsum", "jaxlib", "jax", "jax-rocm7-pjrt", "jax-rocm7-plugin"]
    assert image.inputs["wheels"] == link.inputs["wheels"] == wheels  # the check sees exactly what pip installs
    assert plan["image:runtime@gfx942"].inputs["wheels"] == ["rocm-sdk-core", "rocm-sdk-libraries-gfx94X-dcgpu"]
    site = "/usr/local/lib/python3.14/dist-packages"
    assert image.inputs["env"] == link.inputs["env"] == {"LD_LIBRARY_PATH": f"{site}/_rocm_sdk_libraries/lib"}
    assert link.deps == ("image:runtime@gfx942", "index:gfx94X-dcgpu") and link.inputs["site"] == site
    assert image.inputs["script_files"] == ["opt/cairn/bin/cairn-jax"]
    assert {"push:jax@gfx942", "gate:static-coverage:jax@gfx942", "gate:in-container:jax@gfx942"} <= set(plan)
    assert plan["gate:in-container:jax@gfx942"].inputs["commands"] == [["cairn-check"], ["cairn-jax", "--cpu"]]
