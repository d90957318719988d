"""llama.cpp built from the pinned sdist: what the plan asks for, the script the build image runs, and the
wheel's library staging, each checked with the real tools (the plan, gcc + patchelf, the real sdist).

The compile itself (ggml's HIP backend, ~145 translation units per target) runs in test_llama_hip_image.py,
for one target only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from cairn.errors import CairnError
from cairn.execute.cmake import cmake_script
from cairn.formats import elf
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.planner import plan_release
from cairn.plan.probe import Host
from cairn.stages import STAGES
from cairn.wheels.engine import link_name, sdist_package, stage_libraries
from support import ROOT, need_tool
from support.llama_fixtures import llama_sdist

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"
HOST = Host(tools=frozenset({"mmdebstrap", "git", "pip", "patchelf"}), docker_host="unix:///x", registry="127.0.0.1:1")


def _plan(manifest: Path = MANIFEST) -> dict:
    registry = load_registry()
    return plan_release(load_manifest(manifest, registry), registry, HOST, stages=STAGES).by_id()


def test_the_default_release_builds_llama_cpp_for_every_family_it_ships() -> None:
    registry = load_registry()
    manifest = load_manifest(MANIFEST, registry)
    plan = plan_release(manifest, registry, HOST, stages=STAGES)
    built = sorted(a.id for a in plan.actions if a.id.startswith("build:llama.cpp@"))
    assert built == sorted(f"build:llama.cpp@{fam}" for fam in manifest.release.families)
    assert "gfx1030" in manifest.release.families  # RDNA2 (RX 6800 / 6900 XT, PRO W6800)
    assert not [n for n in plan.notes if "llama.cpp: not built" in n]


def test_every_family_gets_one_llama_build_with_the_code_objects_ggml_can_use() -> None:
    plan = _plan()
    targets = {fam: plan[f"build:llama.cpp@{fam}"].inputs["targets"] for fam in
               ("gfx110X-dgpu", "gfx120X-all", "gfx1151", "gfx94X-dcgpu", "gfx90a-dcgpu", "gfx1030")}
    assert targets == {
        "gfx110X-dgpu": ["gfx11-generic"],  # one compile for gfx1100, gfx1101, gfx1102
        "gfx120X-all": ["gfx12-generic"],
        "gfx1151": ["gfx1151"],  # ggml's RDNA3_5 kernels key on __gfx1151__: gfx11-generic would mismatch the host
        "gfx94X-dcgpu": ["gfx942"],  # CDNA3 (MFMA) keys on __gfx942__: no gfx9-4-generic
        "gfx90a-dcgpu": ["gfx90a"],
        "gfx1030": ["gfx1030"],  # RDNA2 keys on __gfx1030__ (and gfx10-3-generic is not one ggml names)
    }
    build = plan["build:llama.cpp"]  # compile_once: one compile, each family's build cut from it (test_compile_once.py)
    assert build.inputs["build"]["kind"] == "cmake"
    assert {"image:toolchain", "push:toolchain", "fetch:pypi:llama_cpp_python-0.3.36.tar.gz", "build:hipblas-dev",
            "build:rocblas-dev", "build:rocblas", "build:hipblas"} <= set(build.deps)
    args = build.inputs["build"]["args"]
    assert "-DGGML_HIP=ON" in args["cmake_args"] and "-DLLAMA_CURL=OFF" in args["cmake_args"]
    assert args["build_targets"] == ["llama-cli", "llama-simple", "llama-server", "llama-bench", "test-backend-ops"]
    assert args["vendored_build"] == {"number": 11312, "commit": "0c1e57098"}


def test_the_wheel_action_packages_each_family_build_and_the_index_lists_it() -> None:
    plan = _plan()
    wheel = plan["package:llama-cpp-python@gfx1151"]
    # the SDK wheels it requires: its libraries must resolve in them (docs/wheels.md, "Self-contained wheels")
    assert wheel.deps == ("build:llama.cpp@gfx1151", "fetch:pypi:llama_cpp_python-0.3.36.tar.gz", "package:rocm-sdk-core",
                          "package:rocm-sdk-libraries@gfx1151")
    assert wheel.inputs["build_version"] == "0.3.36+rocm.7.2.4.dev.1761811681"
    assert Version(wheel.inputs["build_version"]) < Version("0.3.36+rocm.10.1.0")  # sorts across ROCm majors
    assert wheel.inputs["device_libraries"] == ["libggml-hip.so"] and wheel.inputs["targets"] == ["gfx1151"]
    assert wheel.inputs["requires"] == ["rocm-sdk[gfx1151]==7.2.4.dev1761811681"]
    assert "package:llama-cpp-python@gfx1151" in plan["index:gfx1151"].deps
    assert "package:llama-cpp-python@gfx1151" not in plan["index:gfx110X-dgpu"].deps


@pytest.mark.parametrize(("old", "new", "says"), [
    ('"gfx120X-all" = "gfx12-generic"', '"gfx120X-all" = "gfx11-generic"', "does not cover gfx1200, gfx1201"),
    ('per_family = true\n', 'per_family = true\nfamilies = ["gfx110X-dgpu"]\n', "build.args.families is no longer read"),
], ids=["generic-leaves-members-out", "families-arg-gone"])
def test_a_bad_llama_build_choice_is_refused_in_one_line_naming_the_file(tmp_path: Path, old: str, new: str, says: str) -> None:
    bad = tmp_path / "default.toml"
    text = MANIFEST.read_text()
    assert old in text
    bad.write_text(text.replace(old, new))
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "plan", str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2, result.stdout + result.stderr
    line, = result.stderr.strip().splitlines()
    assert str(bad) in line and says in line and "Traceback" not in result.stderr


def test_the_build_script_unpacks_the_sdist_in_the_container_and_installs_only_the_named_tools() -> None:
    args = {"source_subdir": "llama_cpp_python-0.3.36/vendor/llama.cpp", "stage_deps": "debian",
            "build_targets": ["llama-cli", "llama-server"], "cmake_args": ["-DGGML_HIP=ON"]}
    script = cmake_script(args, ["gfx1151"], deps=2, jobs=2, archive=True)
    lines = script.splitlines()
    assert "tar -xzf /src.tar.gz -C /tmp/src --no-same-owner" in lines[1]
    assert any(line.startswith("cmake -S /tmp/src/llama_cpp_python-0.3.36/vendor/llama.cpp -B /tmp/build") for line in lines)
    assert "for d in /deps/0 /deps/1; do" in lines and "-DCMAKE_PREFIX_PATH='" in script  # found in /usr, not /deps
    assert "cmake --build /tmp/build --parallel 2 --target llama-cli llama-server || status=$?" in lines
    assert "cp -a /tmp/build/bin/llama-cli /out/bin/" in lines and "cmake --install /tmp/build" not in lines
    assert "'-DGPU_TARGETS=gfx1151'" in script and "'-DCMAKE_HIP_COMPILER_LAUNCHER=python3;/tmp/cairn-cpu-seconds.py'" in script
    with pytest.raises(CairnError, match="not a CMake target name"):
        cmake_script({**args, "build_targets": ["llama-cli; rm -rf /"]}, [], deps=0, jobs=1)
    with pytest.raises(CairnError, match="stage_deps 'conda' is not known"):
        cmake_script({**args, "stage_deps": "conda"}, [], deps=0, jobs=1)


def test_link_names_drop_the_version_and_refuse_what_is_not_a_library() -> None:
    assert link_name("libggml-hip.so.0.9.7") == "libggml-hip.so"
    assert link_name("libllama.so") == "libllama.so"
    with pytest.raises(CairnError, match="not a shared library name"):
        link_name("llama-cli")


def test_staged_libraries_are_one_file_per_link_name_with_needed_and_run_path_rewritten(tmp_path: Path) -> None:
    gcc = need_tool("gcc")
    need_tool("patchelf")
    lib = tmp_path / "lib"
    lib.mkdir()
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n")
    (tmp_path / "b.c").write_text("int a(void); int b(void) { return a() + 1; }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-Wl,-soname,liba.so.0", "-o", lib / "liba.so.0.1.2", tmp_path / "a.c"], check=True)
    (lib / "liba.so.0").symlink_to("liba.so.0.1.2")
    (lib / "liba.so").symlink_to("liba.so.0")
    subprocess.run([gcc, "-shared", "-fPIC", "-Wl,-soname,libb.so.0", "-o", lib / "libb.so.0.1.2", tmp_path / "b.c",
                    f"-L{lib}", "-la"], check=True)
    (lib / "libb.so.0").symlink_to("libb.so.0.1.2")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with open(tmp_path / "log", "w") as log:
        staged = stage_libraries(lib, scratch, "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib", log)
    assert [p.name for p in staged] == ["liba.so", "libb.so"]
    b = elf.inspect(scratch / "libb.so")
    assert b is not None and b.soname == "libb.so" and "liba.so" in b.needed and "liba.so.0" not in b.needed
    assert b.runpath == "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib"
    # the rewritten pair still links: a program against the staged copies runs
    (tmp_path / "main.c").write_text("int b(void); int main(void) { return b() == 2 ? 0 : 1; }\n")
    subprocess.run([gcc, "-o", tmp_path / "main", tmp_path / "main.c", f"-L{scratch}", "-lb", f"-Wl,-rpath,{scratch}"], check=True)
    assert subprocess.run([tmp_path / "main"]).returncode == 0


def test_the_python_package_comes_from_the_sdist_with_its_runtime_requirements(cache_dir: Path) -> None:
    files, requires = sdist_package(llama_sdist(cache_dir), "llama_cpp_python-0.3.36", "llama_cpp")
    paths = [p for p, _ in files]
    assert "llama_cpp/__init__.py" in paths and "llama_cpp/_ctypes_extensions.py" in paths
    assert "llama_cpp/server/app.py" in paths and all(p.startswith("llama_cpp/") for p in paths)
    assert not any(p.startswith("llama_cpp/lib/") for p in paths)  # the libraries are ours, not the sdist's
    assert requires == ["typing-extensions>=4.5.0", "numpy>=1.20.0", "diskcache>=5.6.1", "jinja2>=2.11.3"]


DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")


@pytest.mark.hipcc
@pytest.mark.slow
def test_the_engine_wheel_packs_the_sdist_package_with_relinked_libraries_and_tools(cache_dir: Path, tmp_path: Path) -> None:
    """The wheel runner on a build tree shaped like build:llama.cpp's (versioned sonames, symlinks, bin/), made
    of real ELF files: a HIP library named libggml-hip (host hipcc, gfx1030), libllama needing it, a tool."""
    import json
    import zipfile
    from types import SimpleNamespace

    from cairn.errors import CheckFailed
    from cairn.plan.graph import Action
    from cairn.wheels.engine import run_engine_wheel

    hipcc, gcc = need_tool("hipcc"), need_tool("gcc")
    need_tool("patchelf")
    built = tmp_path / "built"
    (built / "lib").mkdir(parents=True)
    (built / "bin").mkdir()
    (tmp_path / "k.hip").write_text("#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 1.0f; }\n"
                                    'extern "C" int ggml_hip_probe(void) { return 7; }\n')
    subprocess.run([hipcc, "-shared", "-fPIC", f"--rocm-device-lib-path={DEVICE_LIBS}", "--offload-arch=gfx1030",
                    "-Wl,-soname,libggml-hip.so.0", "-o", built / "lib" / "libggml-hip.so.0.9.7", tmp_path / "k.hip"],
                   check=True, capture_output=True, env={**os.environ, "HIP_PLATFORM": "amd"})
    (built / "lib" / "libggml-hip.so.0").symlink_to("libggml-hip.so.0.9.7")
    (built / "lib" / "libggml-hip.so").symlink_to("libggml-hip.so.0")
    (tmp_path / "llama.c").write_text("int ggml_hip_probe(void); int llama_probe(void) { return ggml_hip_probe(); }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-Wl,-soname,libllama.so.0", "-o", built / "lib" / "libllama.so.0.0.1",
                    tmp_path / "llama.c", f"-L{built / 'lib'}", "-lggml-hip"], check=True)
    (built / "lib" / "libllama.so.0").symlink_to("libllama.so.0.0.1")
    (tmp_path / "server.c").write_text("int llama_probe(void); int main(void) { return llama_probe() == 7 ? 0 : 1; }\n")
    (built / "lib" / "libllama.so").symlink_to("libllama.so.0")
    subprocess.run([gcc, "-o", built / "bin" / "llama-server", tmp_path / "server.c", f"-L{built / 'lib'}", "-lllama",
                    f"-Wl,-rpath-link,{built / 'lib'}"], check=True)
    sdist = llama_sdist(cache_dir)
    inputs = {"build": "build:llama.cpp@gfx103X", "fetch": "fetch:sdist", "sdist": sdist.name, "package": "llama_cpp",
              "project": "llama-cpp-python", "component": "llama.cpp", "device_libraries": ["libggml-hip.so"],
              "targets": ["gfx1030"], "build_version": "0.3.36+rocm.7.2.4", "description": "test",
              "requires": ["rocm-sdk[gfx1030]==7.2.4"], "source_date_epoch": 1761811681,
              "tools_rpath": "/usr/local/lib/python3.14/dist-packages/llama_cpp/lib", "requires_python": ">=3.11"}

    # the SDK wheel it requires carries the HIP runtime (its report lists the sonames the wheel ships)
    core = tmp_path / "core"
    core.mkdir()
    hip_needed = [n for n in elf.inspect(built / "lib" / "libggml-hip.so.0.9.7").needed if n.startswith("libamdhip64")]
    (core / "report.json").write_text(json.dumps({"sonames": hip_needed}))

    def run(out: Path, with_core: bool = True, **changes: object) -> None:
        out.mkdir()
        action = Action("package:llama-cpp-python@gfx103X", "package", {**inputs, **changes}, family="gfx103X")
        deps = {"build:llama.cpp@gfx103X": built, "fetch:sdist": sdist.parent, **({"package:rocm-sdk-core": core} if with_core else {})}
        with open(tmp_path / f"{out.name}.log", "w") as log:
            run_engine_wheel(SimpleNamespace(action=action, out=out, log=log, deps=deps))

    out = tmp_path / "out"
    run(out)
    (wheel,) = (out / "wheels").glob("*.whl")
    assert wheel.name.startswith("llama_cpp_python-0.3.36+rocm.7.2.4-py3-none-manylinux_2_")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read("llama_cpp_python-0.3.36+rocm.7.2.4.dist-info/METADATA").decode()
        archive.extractall(tmp_path / "site")
    assert {"llama_cpp/__init__.py", "llama_cpp/lib/libllama.so", "llama_cpp/lib/libggml-hip.so"} <= names
    assert not any(n.startswith("llama_cpp/lib/") and n.endswith((".so.0", ".so.0.9.7")) for n in names)
    assert "Requires-Dist: rocm-sdk[gfx1030]==7.2.4" in metadata and "Requires-Dist: numpy>=1.20.0" in metadata
    llama = elf.inspect(tmp_path / "site" / "llama_cpp" / "lib" / "libllama.so")
    assert llama is not None and llama.soname == "libllama.so" and "libggml-hip.so" in llama.needed
    assert llama.runpath == "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib:$ORIGIN/../../_rocm_sdk_libraries/lib"
    tool = elf.inspect(out / "tools" / "llama-server")
    assert tool is not None and "libllama.so" in tool.needed and tool.runpath == inputs["tools_rpath"]
    report = json.loads((out / "report.json").read_text())
    assert report["tools"] == ["llama-server"]
    # what the engine's ELFs load from elsewhere (the matrix keeps only those of its family's partial libraries)
    assert any(n.startswith("libamdhip64.so") for n in report["needed"]) and "libc.so.6" in report["needed"]
    assert not {"libllama.so", "libggml-hip.so"} & set(report["needed"])  # its own libraries are not needs
    with pytest.raises(CheckFailed, match=r"libggml-hip\.so"):  # built for gfx1030, packaged for a family of gfx1100
        run(tmp_path / "wrong", targets=["gfx1100"])
    assert not list((tmp_path / "wrong").glob("wheels/*.whl"))
    # without the SDK wheel that carries libamdhip64 the libraries would not load where pip installs them
    with pytest.raises(CheckFailed, match=r"libggml-hip\.so needs libamdhip64"):
        run(tmp_path / "alone", with_core=False)
    assert not list((tmp_path / "alone").glob("wheels/*.whl"))


@pytest.mark.network
@pytest.mark.slow
def test_the_tiny_models_are_a_content_addressed_artifact_of_the_build(tmp_path: Path) -> None:
    """``model:tiny-llama`` from the pinned sdist: the same bytes every time (the F32 model's sha256 is the one
    docs/engines.md shows), with their references, and nothing else (the vocab is inside the models)."""
    import json

    store = tmp_path / "store"
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", "--family", "gfx110X-dgpu", "--only", "model:tiny-llama",
                             "--store", str(store)], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    record = json.loads((store / "last-build.json").read_text())["actions"]["model:tiny-llama"]
    tree = store / "trees" / record["output"]
    entries = json.loads((tree / "gate-inputs.json").read_text())
    assert [e["quant"] for e in entries] == ["F32", "Q8_0"]
    assert entries[0]["path"] == "tiny-llama-F32-f15569fe2acd2eee.gguf"
    assert sorted(p.name for p in tree.iterdir()) == sorted(
        ["gate-inputs.json", *(e["path"] for e in entries), *(e["reference"] for e in entries)])
