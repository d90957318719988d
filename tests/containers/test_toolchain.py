"""The pinned build image: HIP compiles of the ROCm 7.2 release run in it, reproducibly, keyed by its digest.

Real parts: mmdebstrap of sid + experimental from the lock, the private Docker Engine and registry,
hipcc 7.2.4 on clang 22 inside the image, the audit on the output. Two builds from fresh stores in
different directories, under different umasks and TMPDIRs, must agree on every key and every digest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.audit import audit_file
from cairn.containers.base import check_lock
from cairn.errors import CairnError
from cairn.model.image_recipes import load_base
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.planner import plan_release
from cairn.plan.probe import Host
from support import ROOT, SLICE_RECORD, need_tool

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"
SMOKE = "build:cairn-smoke@gfx1151"
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.registry]


WHEELS = ("package:rocm-sdk-core", "package:rocm-sdk-libraries@gfx1151", "package:cairn-smoke@gfx1151")


def _records(store: Path, record: str = "last-build.json") -> dict[str, dict[str, str]]:
    actions = json.loads((store / record).read_text())["actions"]
    return {a: {"key": Path(r["log"]).stem if r["log"] else "", "output": r["output"], "status": r["status"]}
            for a, r in actions.items()}


@pytest.fixture(scope="module")
def two_builds(default_slice: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict, dict]]:
    """The session's default slice (umask 022) and a second fresh store elsewhere, under umask 077 and another
    TMPDIR, building the kernels and the wheels again (its debs from the first store's source mirror, so the
    archive is asked once): both must agree on every key and every output digest."""
    need_tool("mmdebstrap")
    need_tool("docker", "docker.io")
    base = tmp_path_factory.mktemp("toolchain")
    store, tmpdir = base / "elsewhere" / "store-two", base / "tmp-two"
    tmpdir.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(tmpdir), "CAIRN_SOURCE_MIRROR": default_slice.as_uri()}
    only = [arg for action in (SMOKE, *WHEELS) for arg in ("--only", action)]
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", str(MANIFEST), "--family", "gfx1151", *only,
                             "--store", str(store), "--jobs", "2"], capture_output=True, text=True, env=env, cwd=ROOT,
                            timeout=3000, preexec_fn=lambda: os.umask(0o077))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    yield default_slice, _records(default_slice, SLICE_RECORD), _records(store) | {"_store": {"key": "", "output": str(store), "status": ""}}
    shutil.rmtree(base)  # the second SDK (GBs): a CI disk holds the session's slice and one more store at a time


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
    for action in ("image:toolchain", "push:toolchain", SMOKE, "fetch:path:recipes/hip/smoke", *WHEELS):
        assert first[action]["key"] == second[action]["key"], action
        assert first[action]["output"] == second[action]["output"], action  # the same bytes, wheels included


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
    every_deb = frozenset(str(c.source.get("sha256")) for c in manifest.components if c.source.kind == "deb")
    host = Host(tools=frozenset({"mmdebstrap"}), mirrored=every_deb)  # sources are there; the engine is not
    plan = plan_release(manifest, load_registry(), host, ("gfx1151",), stages=()).by_id()
    assert plan["image:toolchain"].blocked == ("needs a Docker Engine to compile in the build image — "
                                               "run: cairn services start")
    assert plan[SMOKE].blocked.startswith("waits on image:toolchain (needs a Docker Engine")
    assert {"image:toolchain", "push:toolchain"} <= set(plan[SMOKE].deps)
    assert plan[SMOKE].inputs["targets"] == ["gfx1151", "gfx11-generic"]


CMAKE_FIXTURE = ROOT / "tests" / "fixtures" / "cmake-hip"


def _git_fixture(tmp: Path) -> tuple[Path, str]:
    """The CMake fixture as a local git repository; returns its path and the commit to pin."""
    import shutil

    repo = tmp / "cairn-scale"
    shutil.copytree(CMAKE_FIXTURE, repo)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    for cmd in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "fixture"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    return repo, commit


def _cmake_manifest(tmp: Path, repo: Path, commit: str) -> Path:
    release = MANIFEST.read_text().split("[gates]")[0].replace('families = [', 'families = ["gfx1151", ').split("\n")
    head = "\n".join(line for line in release if not line.startswith("families")) + '\nfamilies = ["gfx1151"]\n'
    path = tmp / "cmake-release.toml"
    path.write_text(head + f'''
[core]
description = "one CMake project with a HIP library"

[[core.components]]
name = "cairn-scale"
version = "0.1.0"
source.git = {{ url = "{repo.as_uri()}", commit = "{commit}" }}
build = {{ kind = "cmake", args = {{ per_family = true, cmake_args = ["-DCMAKE_CXX_COMPILER=hipcc"] }} }}
depends = []
''')
    return path


def test_cmake_kind_configures_builds_and_installs_a_pinned_git_source(two_builds: tuple[Path, dict, dict],
                                                                         tmp_path: Path) -> None:
    store = Path(two_builds[2]["_store"]["output"])  # the second store: the default slice's record stays as it is
    repo, commit = _git_fixture(tmp_path)
    manifest = _cmake_manifest(tmp_path, repo, commit)
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", str(manifest), "--only", "build:cairn-scale@gfx1151",
                             "--store", str(store)], capture_output=True, text=True, cwd=ROOT, timeout=3000)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    actions = json.loads((store / "last-build.json").read_text())["actions"]
    assert actions["image:toolchain"]["status"] == "cached"  # the same build image as the release's kernels
    tree = store / "trees" / actions["build:cairn-scale@gfx1151"]["output"]
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == [
        "include/scale.h", "lib/libcairn_scale.so"]
    assert set(audit_file(tree / "lib" / "libcairn_scale.so").targets) == {"gfx1151", "gfx11-generic"}
    log = Path(actions["build:cairn-scale@gfx1151"]["log"]).read_text()
    assert "-DGPU_TARGETS=gfx1151;gfx11-generic" in log and "--network none" in log


def test_cmake_blocked_reasons_come_from_the_host_and_the_manifest(tmp_path: Path) -> None:
    repo, commit = _git_fixture(tmp_path)
    registry = load_registry()
    manifest = load_manifest(_cmake_manifest(tmp_path, repo, commit), registry)
    no_git = plan_release(manifest, registry, Host(tools=frozenset({"mmdebstrap"}), docker_host="unix:///x",
                                                   registry="127.0.0.1:1"), ("gfx1151",), stages=()).by_id()
    assert no_git["fetch:cairn-scale@" + commit[:12]].blocked == "needs git (apt-get install git)"
    assert no_git["build:cairn-scale@gfx1151"].blocked.startswith("waits on fetch:cairn-scale@")
    ready = plan_release(manifest, registry, Host(tools=frozenset({"mmdebstrap", "git"}), docker_host="unix:///x",
                                                  registry="127.0.0.1:1"), ("gfx1151",), stages=()).by_id()
    assert not ready["build:cairn-scale@gfx1151"].blocked
    production = load_manifest(ROOT / "manifests" / "releases" / "rocm-7.14.0.toml", registry)
    plan = plan_release(production, registry, Host(tools=frozenset({"git"})), ("gfx94X-dcgpu",), stages=()).by_id()
    cmake = [a for a in plan.values() if a.kind == "build" and a.inputs["build"]["kind"] == "cmake"]
    assert cmake and not any("TheRock build host" in a.blocked for a in cmake)
    assert plan["fetch:rocm-systems@2b22ab0195cc"].blocked == "needs git access to github.com/ROCm/rocm-systems"
    assert any(a.blocked.startswith("waits on fetch:rocm-systems@2b22ab0195cc (needs git access") for a in cmake)
