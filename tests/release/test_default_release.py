"""Real fetches from the package registries, and the default release's SDK tree, rebuilt byte for byte."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from cairn.errors import PinMismatch
from cairn.execute.executor import execute
from cairn.plan.prepare import load, make_plan
from cairn.sources.fetch import fetch
from cairn.stages import RUNNERS
from cairn.store.local import LocalStore
from support import LEGACY, need, need_tool

pytestmark = pytest.mark.network

ROCM_CMAKE = {"package": "rocm-cmake", "version": "5.4.0-1",
              "sha256": "4f57f6c68c2b79f3c413042e05d41fdbb719e0a8b262d9d27a49631e0617d54b"}
SIX = {"name": "six", "version": "1.16.0", "filename": "six-1.16.0-py2.py3-none-any.whl",
       "sha256": "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"}


def test_deb_fetch_downloads_the_exact_version_and_checks_its_digest(tmp_path: Path) -> None:
    need_tool("apt-get", "apt")
    fetch("deb", ROCM_CMAKE, tmp_path, io.StringIO())
    assert [p.name for p in tmp_path.iterdir()] == ["rocm-cmake_5.4.0-1_all.deb"]
    wrong = dict(ROCM_CMAKE, sha256="0" * 64)
    other = tmp_path / "wrong"
    other.mkdir()
    with pytest.raises(PinMismatch, match="the manifest pins 0000"):
        fetch("deb", wrong, other, io.StringIO())
    assert list(other.iterdir()) == []


def test_pypi_fetch_gets_exactly_the_pinned_file(tmp_path: Path) -> None:
    fetch("pypi", SIX, tmp_path, io.StringIO())
    assert [p.name for p in tmp_path.iterdir()] == [SIX["filename"]]
    other = tmp_path / "wrong"
    other.mkdir()
    with pytest.raises(PinMismatch, match="the manifest pins 1111"):
        fetch("pypi", dict(SIX, sha256="1" * 64), other, io.StringIO())
    assert list(other.iterdir()) == []


@pytest.mark.slow
def test_default_release_sdk_tree_is_complete_and_rebuilds_to_the_same_bytes(tmp_path: Path) -> None:
    for tool, pkg in (("apt-get", "apt"), ("dpkg-deb", "dpkg"), ("hipcc", "hipcc")):
        need_tool(tool, pkg)
    manifest, registry = load(LEGACY)
    plan = make_plan(manifest, registry, ["gfx90a"], stages=())  # SDK tree and kernels; wheels and images test themselves
    blocked = [a.id for a in plan.actions if a.blocked]
    need(not blocked, f"default release blocked here: {blocked}")
    store = LocalStore(tmp_path / "store")
    first = execute(plan, store, runners=RUNNERS, jobs=2)
    assert first.ok, {k: o.detail for k, o in first.outcomes.items() if o.status == "failed"}
    sdk = store.tree(first.output("assemble:sdk"))
    for rel in ("bin/hipcc", "bin/rocminfo", "lib/libamdhip64.so.5", "lib/librocsparse.so.0", "include/hip/hip_runtime.h",
                "amdgcn/bitcode/ocml.bc", "share/cairn/manifest.json"):
        assert (sdk / rel).exists(), rel
    embedded = json.loads((sdk / "share/cairn/manifest.json").read_text())
    assert embedded["sha256"] == manifest.digest
    pins = {c["name"]: c["source"] for c in embedded["manifest"]["core"]["components"]}
    assert pins["hip-runtime"]["deb"]["sha256"] == manifest.component("hip-runtime").source.get("sha256")
    assert set(embedded["components"]) >= {"build:hip-runtime", "build:rocsparse"}
    smoke = store.tree(first.output("build:cairn-smoke@gfx90a"))
    assert (smoke / "lib" / "libcairn_smoke.so").is_file()

    # rebuild every build and assemble action from scratch; fetched inputs stay
    for record in (store.root / "ac").glob("*.json"):
        if not json.loads(record.read_text())["action"].startswith("fetch:"):
            record.unlink()
    for tree in (store.root / "trees").iterdir():
        if tree.name not in {o.output for k, o in first.outcomes.items() if k.startswith("fetch:")}:
            shutil.rmtree(tree)
    second = execute(plan, store, runners=RUNNERS, jobs=2)
    rebuilt = {k for k, o in second.outcomes.items() if o.status == "ran"}
    assert rebuilt == {a.id for a in plan.actions if not a.id.startswith("fetch:")}
    assert {k: o.output for k, o in second.outcomes.items()} == {k: o.output for k, o in first.outcomes.items()}
