"""``compile_once``: llama.cpp compiled once for every family's code objects, each family's build cut from it.

The plan is the default release's; the cut runs the real split on real shared objects (gcc + objcopy, fat
binaries from tests/support/fatbin_writer.py) shaped like the compile's install tree, and is read back with the
audit, as the family's wheel and image read it. The compile itself (ggml's HIP backend in the build image) runs
in tests/engines/test_llama_hip_image.py and the default slice.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from cairn.audit import audit_file
from cairn.audit.split_tree import split_tree
from cairn.errors import CheckFailed
from cairn.execute.runners import ActionContext, run_split, runner_for
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.graph import Action
from cairn.plan.planner import plan_release
from cairn.plan.probe import Host
from cairn.stages import RUNNERS, STAGES
from support import ROOT, need_tool
from support.fatbin_writer import bundle_for, ccob, section, write_elf

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"
HOST = Host(tools=frozenset({"mmdebstrap", "git", "pip", "patchelf"}), docker_host="unix:///x", registry="127.0.0.1:1")
CHOSEN = {"gfx94X-dcgpu": ["gfx942"], "gfx110X-dgpu": ["gfx11-generic"], "gfx1151": ["gfx1151"],
          "gfx120X-all": ["gfx12-generic"], "gfx90a-dcgpu": ["gfx90a"], "gfx1030": ["gfx1030"]}


def _plan(manifest: Path = MANIFEST) -> dict[str, Action]:
    registry = load_registry()
    return plan_release(load_manifest(manifest, registry), registry, HOST, stages=STAGES).by_id()


def test_one_compile_carries_every_familys_code_objects_and_each_family_cuts_its_own() -> None:
    plan = _plan()
    whole = plan["build:llama.cpp"]
    assert whole.inputs["build"]["kind"] == "cmake" and not whole.family
    assert sorted(whole.inputs["targets"]) == sorted(t for targets in CHOSEN.values() for t in targets)
    assert {"image:toolchain", "push:toolchain", "fetch:pypi:llama_cpp_python-0.3.36.tar.gz", "build:hipblas"} <= set(whole.deps)
    for fam, targets in CHOSEN.items():
        cut = plan[f"build:llama.cpp@{fam}"]
        assert cut.deps == ("build:llama.cpp",) and cut.family == fam
        assert cut.inputs["build"]["kind"] == "split" and cut.inputs["targets"] == targets
        assert runner_for(cut, RUNNERS) is run_split
        # what reads a family's build is unchanged: the wheel still names it and its code objects
        wheel = plan[f"package:llama-cpp-python@{fam}"]
        assert wheel.inputs["build"] == cut.id and wheel.inputs["targets"] == targets
    assert not [a for a in plan.values() if a.id.startswith("build:llama.cpp") and a.kind == "build"
                and a.inputs["build"]["kind"] == "cmake" and a.family]


def test_without_compile_once_every_family_compiles_on_its_own(tmp_path: Path) -> None:
    text = MANIFEST.read_text()
    assert "compile_once = true\n" in text
    (tmp_path / "default.toml").write_text(text.replace("compile_once = true\n", ""))
    plan = _plan(tmp_path / "default.toml")
    assert "build:llama.cpp" not in plan
    for fam, targets in CHOSEN.items():
        build = plan[f"build:llama.cpp@{fam}"]
        assert build.inputs["build"]["kind"] == "cmake" and build.inputs["targets"] == targets
        assert "image:toolchain" in build.deps


def _compiled_tree(tmp_path: Path, code_objects: list[str]) -> Path:
    """A tree shaped like the compile's install: lib/ with the HIP backend (one bundle per translation unit, as
    ggml's is) and a host-only library, each behind versioned symlinks, bin/ with a tool."""
    need_tool("gcc")
    need_tool("objcopy")
    scratch, tree = tmp_path / "scratch", tmp_path / "whole"
    scratch.mkdir()
    (tree / "lib").mkdir(parents=True)
    (tree / "bin").mkdir()
    bundles = [ccob(bundle_for(code_objects), method=m) for m in ("zstd", "zlib", "zstd")]
    # as ggml installs it: the name the recipe lists is a link chain to the versioned file that holds the code
    shutil.copy2(write_elf(scratch / "libggml-hip.so", section(bundles)), tree / "lib" / "libggml-hip.so.0.25.3")
    os.symlink("libggml-hip.so.0.25.3", tree / "lib" / "libggml-hip.so.0")
    os.symlink("libggml-hip.so.0", tree / "lib" / "libggml-hip.so")
    shutil.copy2(write_elf(scratch / "libllama.so.0", None, data_string="llama"), tree / "lib" / "libllama.so.0")
    os.symlink("libllama.so.0", tree / "lib" / "libllama.so")
    shutil.copy2(write_elf(scratch / "llama-cli", None, data_string="cli"), tree / "bin" / "llama-cli")
    return tree


def _cut(tree: Path, tmp_path: Path, family: str, targets: list[str]) -> tuple[Path, str]:
    out = tmp_path / f"out-{family}"
    out.mkdir()
    log = io.StringIO()
    action = Action(id=f"build:llama.cpp@{family}", kind="build", deps=("build:llama.cpp",), family=family,
                    inputs={"build": {"kind": "split", "args": {"device_libraries": ["libggml-hip.so"]}}, "targets": targets})
    run_split(ActionContext(action, out, log, {"build:llama.cpp": tree}, {}))
    return out, log.getvalue()


def test_each_family_keeps_exactly_its_own_code_objects_and_everything_else_as_compiled(tmp_path: Path) -> None:
    tree = _compiled_tree(tmp_path, ["gfx942", "gfx11-generic", "gfx1151", "gfx1030"])
    for family, targets in (("gfx1151", ["gfx1151"]), ("gfx110X-dgpu", ["gfx11-generic"]), ("gfx94X-dcgpu", ["gfx942"])):
        out, log = _cut(tree, tmp_path, family, targets)
        assert audit_file(out / "lib" / "libggml-hip.so").targets == tuple(targets), family
        assert os.readlink(out / "lib" / "libggml-hip.so") == "libggml-hip.so.0"
        assert f"libggml-hip.so.0.25.3: gfx1030, gfx11-generic, gfx1151, gfx942 → {targets[0]}, " in log
        assert os.readlink(out / "lib" / "libllama.so") == "libllama.so.0"
        for rel in ("lib/libllama.so.0", "bin/llama-cli"):
            assert (out / rel).read_bytes() == (tree / rel).read_bytes()
        assert os.access(out / "bin" / "llama-cli", os.X_OK)
        assert sorted(p.name for p in out.iterdir()) == ["bin", "lib"]  # nothing of the cut's scratch left
    # "runs on" would keep gfx11-generic beside gfx1151: two code objects, and the family's check would refuse it
    both = split_tree(tree, tmp_path / "runs-on", "gfx1151")
    assert set(audit_file(tmp_path / "runs-on" / "lib" / "libggml-hip.so").targets) == {"gfx1151", "gfx11-generic"}, both


def test_a_compile_without_a_familys_code_object_fails_its_cut_naming_the_library(tmp_path: Path) -> None:
    tree = _compiled_tree(tmp_path, ["gfx942", "gfx11-generic"])
    with pytest.raises(CheckFailed, match=r"^build:llama.cpp@gfx1151: build:llama.cpp compiled no gfx1151 code object into lib/libggml-hip.so \(it holds gfx11-generic, gfx942\)$"):
        _cut(tree, tmp_path, "gfx1151", ["gfx1151"])


def test_cairn_split_exact_keeps_the_named_code_object_alone(tmp_path: Path, capsys) -> None:
    """What the cut does, as a release engineer runs it on a compile's tree: ``--exact`` leaves gfx1151's code
    alone where a plain split keeps the generic code that also runs on it."""
    from cairn.cli import main

    tree = _compiled_tree(tmp_path, ["gfx11-generic", "gfx1151"])
    assert main(["split", str(tree), "--target", "gfx1151", "--exact", "--out", str(tmp_path / "exact"), "--json"]) == 0
    assert main(["split", str(tree), "--target", "gfx1151", "--out", str(tmp_path / "plain"), "--json"]) == 0
    capsys.readouterr()
    assert audit_file(tmp_path / "exact" / "lib" / "libggml-hip.so").targets == ("gfx1151",)
    assert set(audit_file(tmp_path / "plain" / "lib" / "libggml-hip.so").targets) == {"gfx1151", "gfx11-generic"}


def test_a_one_family_plan_cuts_a_compile_of_its_own_code_objects_alone(tmp_path: Path) -> None:
    """``cairn build --family gfx1151`` (the tests' default slice): the one compile holds gfx1151's code alone, and
    the cut keeps every bundle as it is."""
    tree = _compiled_tree(tmp_path, ["gfx1151"])
    out, _ = _cut(tree, tmp_path, "gfx1151", ["gfx1151"])
    assert audit_file(out / "lib" / "libggml-hip.so").targets == ("gfx1151",)
    registry = load_registry()
    plan = plan_release(load_manifest(MANIFEST, registry), registry, HOST, ("gfx1151",), stages=STAGES).by_id()
    assert plan["build:llama.cpp"].inputs["targets"] == ["gfx1151"]
    assert plan["build:llama.cpp@gfx1151"].deps == ("build:llama.cpp",)
