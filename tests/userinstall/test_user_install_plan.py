"""The user-install gate in the plan: one action per target over what the bundle is made from, host roots as
actions, its verdict a dependency of the bundle; none where the family's wheels cannot be made."""

from __future__ import annotations

from cairn.plan.prepare import load, make_plan
from cairn.plan.probe import Host
from cairn.stages import STAGES


def _plan(docker_host: str, mmdebstrap: bool = True) -> dict:
    manifest, registry = load("default")
    archive: dict[str, dict[str, tuple[str, ...]]] = {}
    for source in [*(c.source for c in manifest.components), *(g.source for g in manifest.grafts)]:
        if source.kind == "deb" and source.get("suite"):
            archive.setdefault(str(source.get("suite")), {})[str(source.get("package"))] = (str(source.get("version")),)
    tools = {"git", "apt-get", "dpkg-deb", "hipcc", "cmake", "patchelf", "docker", "pip", *(["mmdebstrap"] if mmdebstrap else [])}
    host = Host(tools=frozenset(tools), docker_host=docker_host, registry="127.0.0.1:1" if docker_host else "", registry_id="fixed",
                mmdebstrap_version="mmdebstrap 9.9" if mmdebstrap else "", patchelf_version="patchelf 9.9", suite_versions=archive)
    return make_plan(manifest, registry, ["gfx1151"], host=host, stages=STAGES).by_id()


def test_the_gate_is_planned_per_target_over_the_bundles_wheels() -> None:
    plan = _plan("unix:///nowhere/docker.sock")
    gate = plan["gate:user-install:wheels@gfx1151"]
    assert gate.kind == "user-install" and not gate.blocked
    assert {"index:gfx1151", "host:debian-12", "host:debian-13", "host:debian-sid"} <= set(gate.deps)
    # a dev build installs each cell on one host; the images of the target, each with the framework its cell ships
    assert gate.inputs["every_host"] is False and gate.inputs["hosts"] == ["debian-12", "debian-13", "debian-sid"]
    assert gate.inputs["images"] == {"jax": "jax", "llama-cpp": "llama-cpp-python", "runtime": "", "smoke": "cairn-smoke"}
    assert not [d for d in gate.deps if d.startswith(("image:", "push:", "gate:", "fetch:"))]  # wheels only, no image
    assert gate.inputs["bundle"]["families"] == {"gfx1151": ["gfx1151"]} and gate.inputs["bundle"]["planned_gates"] == []
    assert gate.inputs["required"] is False and gate.inputs["channel"] == "dev"  # the default release is a dev build
    assert plan["host:debian-13"].inputs["suite"] == "trixie" and plan["host:debian-13"].inputs["tool"] == "mmdebstrap 9.9"
    bundle = plan["bundle:release"]
    assert gate.id in bundle.deps and gate.id in bundle.inputs["planned_gates"]
    assert "user-install" in bundle.inputs["release"]["required_gates"]["nightly"]


def test_without_an_engine_there_are_no_wheels_to_install() -> None:
    """No engine, no build image: the family's wheels cannot be made here, so no user-install gate is planned; the
    bundle says why the index is missing, and the matrix lists the required gate as not run."""
    plan = _plan("")
    assert "gate:user-install:wheels@gfx1151" not in plan
    assert "index:gfx1151" in plan["bundle:release"].inputs["not_built"]
