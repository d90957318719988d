"""The pinned build image: HIP compiles of the ROCm 7.2 release run in it, reproducibly, keyed by its digest.

Real parts: mmdebstrap of sid + experimental from the lock, the private Docker Engine and registry,
hipcc 7.2.4 on clang 22 inside the image, the audit on the output. Two builds from fresh stores in
different directories, under different umasks and TMPDIRs, must agree on every key and every digest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.audit import audit_file
from cairn.containers.base import check_lock
from cairn.containers.recipes import load_base
from cairn.errors import CairnError
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.planner import plan_release
from cairn.plan.probe import Host
from conftest import ROOT, need_tool
from test_containers_build import services  # noqa: F401 - the session's Docker Engine + registry

MANIFEST = ROOT / "manifests" / "releases" / "rocm-7.2.4.toml"
SMOKE = "build:cairn-smoke@gfx1151"
pytestmark = pytest.mark.slow


def _build(store: Path, tmpdir: Path, umask: int) -> dict[str, dict[str, str]]:
    """``cairn build --only`` the smoke kernels in a fresh store; returns action -> {key, output, status}."""
    tmpdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", str(MANIFEST), "--family", "gfx1151",
                             "--only", SMOKE, "--store", str(store), "--jobs", "2"],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=3000,
                            preexec_fn=lambda: os.umask(umask))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    actions = json.loads((store / "last-build.json").read_text())["actions"]
    return {a: {"key": Path(r["log"]).stem if r["log"] else "", "output": r["output"], "status": r["status"]}
            for a, r in actions.items()}


@pytest.fixture(scope="module")
def two_builds(services: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:  # noqa: F811
    need_tool("mmdebstrap")
    need_tool("docker", "docker.io")
    base = tmp_path_factory.mktemp("toolchain")
    first = _build(base / "one" / ".cairn", base / "tmp-one", 0o022)
    second = _build(base / "elsewhere" / "store-two", base / "tmp-two", 0o077)
    return base / "one" / ".cairn", first, second


def test_kernels_compile_in_the_build_image_for_the_target_and_its_generic(two_builds: tuple[Path, dict, dict]) -> None:
    store, first, _ = two_builds
    assert first[SMOKE]["status"] == "ran" and first["image:toolchain"]["status"] == "ran"
    tree = store / "trees" / first[SMOKE]["output"]
    audit = audit_file(tree / "lib" / "libcairn_smoke.so")
    assert set(audit.targets) == {"gfx1151", "gfx11-generic"}  # LLVM 22 code for Strix Halo, plus the RDNA3 generic
    info = json.loads((tree / "share" / "cairn" / "cairn-smoke.json").read_text())
    pushed = json.loads((store / "trees" / first["push:toolchain"]["output"] / "push.json").read_text())
    assert info["toolchain"] == f"cairn/toolchain@{pushed['digest']}"
    image = json.loads((store / "trees" / first["image:toolchain"]["output"] / "image.json").read_text())
    assert image["digest"] == pushed["digest"]
    packages = (store / "trees" / first["image:toolchain"]["output"] / "packages.txt").read_text().split()
    assert "hipcc=7.2.4+dfsg-1~exp1" in packages
    assert sorted(packages) == list(load_base(name="toolchain-rocm7").lock)  # exactly the lock, nothing else


def test_fresh_stores_elsewhere_under_other_umasks_agree(two_builds: tuple[Path, dict, dict]) -> None:
    _, first, second = two_builds
    assert second[SMOKE]["status"] == "ran"
    for action in ("image:toolchain", "push:toolchain", SMOKE, "fetch:path:recipes/hip/smoke"):
        assert first[action]["key"] == second[action]["key"], action
        assert first[action]["output"] == second[action]["output"], action


def test_a_rootfs_that_drifts_from_its_lock_fails_naming_the_packages() -> None:
    recipe = load_base(name="toolchain-rocm7")
    installed = [p for p in recipe.lock if not p.startswith("hipcc=")] + ["hipcc=7.2.5-1"]
    with pytest.raises(CairnError) as failure:
        check_lock(recipe, installed, "toolchain-rocm7")
    assert "1 extra, 1 missing: +hipcc=7.2.5-1, -hipcc=7.2.4+dfsg-1~exp1" in str(failure.value)
    assert "cairn pins lock recipes/containers/toolchain-rocm7.toml" in str(failure.value)
    check_lock(recipe, list(recipe.lock), "toolchain-rocm7")  # the lock itself passes


def test_compiles_wait_on_the_build_image_and_say_what_the_host_lacks() -> None:
    manifest = load_manifest(MANIFEST, load_registry())
    plan = plan_release(manifest, load_registry(), Host(tools=frozenset({"mmdebstrap"})), ("gfx1151",), stages=[]).by_id()
    assert plan["image:toolchain"].blocked == ("needs a Docker Engine to compile in the build image — "
                                               "run: cairn services start")
    assert plan[SMOKE].blocked.startswith("waits on image:toolchain (needs a Docker Engine")
    assert {"image:toolchain", "push:toolchain"} <= set(plan[SMOKE].deps)
    assert plan[SMOKE].inputs["targets"] == ["gfx1151", "gfx11-generic"]
