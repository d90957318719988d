"""The GPU gate's host logic and the llama.cpp gate's judgements, without a GPU.

No AMD GPU exists on the machines these tests run on: every host here is a STAND-IN — a KFD topology and
a ``rocminfo`` output written by ``tests/doctor_hosts.py`` in the real layouts and formats (the ones
``cairn doctor --root`` reads) — and the test-backend-ops and llama-server outputs are written in the
formats llama.cpp's sources (the pinned sdist's ``tests/test-backend-ops.cpp``, ``src/llama-model.cpp``)
print. What is tested is Cairn's reading of them: which target a host has, when the gate runs, its key.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from cairn.errors import CairnError
from cairn.execute.cmake import check_vendored_build, cmake_script, vendored_build_defines
from cairn.gates.container import NO_GPU
from cairn.gates.gpu_host import GpuHost, gpu_lock, not_run_reason, read_gpu_host
from cairn.gates.llama import (
    HIP_DEVICE,
    backend_ops_command,
    judge_backend_ops,
    offload_problem,
    parity_problem,
)
from support import ROOT, need_tool
from support.doctor_hosts import RX7900XTX, GpuSpec, HostTree, rocminfo_text

RX9070XT = GpuSpec("gfx1201", 0x7550, 17112760320, 128, "AMD Radeon RX 9070 XT", "Navi48 [Radeon RX 9070/9070 XT]")


def _host(tmp_path: Path, *gpus: GpuSpec, kfd: bool = True, rocminfo: bool = True, dkms: str = "") -> Path:
    tree = HostTree(tmp_path / "host").kernel("6.18.4-200.fc43.x86_64").amdgpu(dkms).cpu_node()
    for n, spec in enumerate(gpus, start=1):
        tree.gpu(spec, node=n, bus=0x03 + n, card=n, render=127 + n, dev_nodes=False)
    if kfd:
        tree.write("dev/kfd", "")
    if rocminfo:
        tree.rocminfo()
    return tree.root


# -- which GPU the host has, and whether the gate runs on it ------------------------------------------------
def test_a_stand_in_gfx1201_host_records_not_run_for_a_gfx1100_image(tmp_path: Path) -> None:
    host = read_gpu_host(_host(tmp_path, RX9070XT))
    assert (host.agents, host.source) == (("gfx1201",), "kfd")
    assert not_run_reason(host, "gfx1100") == "not run: host is gfx1201, image is gfx1100"
    assert not_run_reason(host, "gfx1201") == ""


def test_an_image_for_a_generic_target_runs_on_a_member_and_not_on_another_generation(tmp_path: Path) -> None:
    host = read_gpu_host(_host(tmp_path, RX7900XTX))
    assert host.agents == ("gfx1100",)
    assert not_run_reason(host, "gfx11-generic") == ""  # gfx1100 is a member of gfx11-generic
    assert not_run_reason(host, "gfx12-generic") == "not run: host is gfx1100, image is gfx12-generic"
    assert not_run_reason(host, "gfx1101") == "not run: host is gfx1100, image is gfx1101"  # exact code: not served


def test_a_stand_in_cpu_only_agent_list_is_never_a_gpu(tmp_path: Path) -> None:
    """KFD nodes of CPUs only and a rocminfo that lists only its CPU agent: no GPU, whatever the image."""
    root = _host(tmp_path)
    host = read_gpu_host(root)
    assert (host.agents, host.cpu_agents) == ((), 2)  # the KFD CPU node and rocminfo's CPU agent
    for target in ("gfx1100", "gfx1201", "gfx11-generic"):
        assert not_run_reason(host, target) == f"{NO_GPU} (its 2 agent(s) are CPUs only)"
    # rocminfo alone (no KFD topology at all), CPU agents only: the same
    alone = read_gpu_host(tmp_path / "none", rocminfo=rocminfo_text([]))
    assert alone.agents == () and not_run_reason(alone, "gfx1100").startswith(NO_GPU)
    # nothing at all: the gate's long-standing reason, word for word
    assert not_run_reason(read_gpu_host(tmp_path / "empty", rocminfo=""), "gfx1100") == NO_GPU


def test_rocminfo_is_read_when_the_topology_names_no_gpu(tmp_path: Path) -> None:
    tree = HostTree(tmp_path / "host").cpu_node()
    tree.gpus.append((1, RX9070XT, "0000:04:00.0"))  # rocminfo's agents only: no KFD GPU node written
    tree.rocminfo()
    tree.write("dev/kfd", "")
    host = read_gpu_host(tree.root)
    assert (host.agents, host.source) == (("gfx1201",), "rocminfo")
    assert not_run_reason(host, "gfx1100") == "not run: host is gfx1201, image is gfx1100"


def test_a_host_with_a_gpu_but_no_dev_kfd_does_not_run(tmp_path: Path) -> None:
    host = read_gpu_host(_host(tmp_path, RX7900XTX, kfd=False))
    assert not_run_reason(host, "gfx1100") == ("not run: host is gfx1100, but /dev/kfd is absent: no container can "
                                               "reach the GPU")


def test_the_gate_key_carries_the_hosts_gfx_targets_and_driver_not_a_boolean(tmp_path: Path) -> None:
    keys = {
        "gfx1100 in-kernel": read_gpu_host(_host(tmp_path / "a", RX7900XTX)).key(),
        "gfx1201 in-kernel": read_gpu_host(_host(tmp_path / "b", RX9070XT)).key(),
        "gfx1100 dkms": read_gpu_host(_host(tmp_path / "c", RX7900XTX, dkms="6.16.13")).key(),
        "none": read_gpu_host(_host(tmp_path / "d")).key(),
    }
    assert keys["gfx1100 in-kernel"] == "gpu gfx1100; driver amdgpu (in kernel 6.18.4-200.fc43.x86_64); kfd yes"
    assert keys["gfx1100 dkms"] == "gpu gfx1100; driver amdgpu-dkms 6.16.13; kfd yes"
    assert keys["none"].startswith("gpu none; ")
    assert len(set(keys.values())) == 4


def test_the_planned_gpu_gate_is_keyed_by_the_stand_in_host(tmp_path: Path) -> None:
    """What the gates planner puts in the GPU gate's inputs for two stand-in host roots (``CAIRN_HOST_ROOT``)."""
    from cairn.gates import plan as gates_plan

    inputs = {name: gates_plan._host_gpu(str(_host(tmp_path / name, spec)))
              for name, spec in (("gfx1100", RX7900XTX), ("gfx1201", RX9070XT))}
    assert inputs["gfx1100"].startswith("gpu gfx1100;") and inputs["gfx1201"].startswith("gpu gfx1201;")


def test_gpu_gates_of_one_host_take_turns(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / "gpu.lock"
    log = io.StringIO()
    with gpu_lock(log, lock), open(lock) as other, pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock) as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the gate is done


# -- llama.cpp's own evidence --------------------------------------------------------------------------------
GPU_LOG = ["llama_model_load_from_file_impl: using device ROCm0 (AMD Radeon RX 7900 XTX) (0000:03:00.0) - 24514 MiB free",
           "load_tensors: offloading output layer to GPU", "load_tensors: offloading 2 repeating layers to GPU",
           "load_tensors: offloaded 3/3 layers to GPU"]


def test_offload_evidence_must_name_the_rocm_device_and_every_layer() -> None:
    assert offload_problem(GPU_LOG) == ""
    assert offload_problem([*GPU_LOG[:3], "load_tensors: offloaded 2/3 layers to GPU"]) == \
        "llama-server offloaded 2/3 layers to GPU, not all"
    cpu_fallback = ["ggml_cuda_init: failed to initialize ROCm: no ROCm-capable device is detected"]
    assert offload_problem(cpu_fallback) == ("llama-server used no ROCm0 device (ggml_cuda_init: failed to initialize "
                                             "ROCm: no ROCm-capable device is detected) — it ran on the CPU")
    assert offload_problem(GPU_LOG[:1]) == "llama-server's log has no 'offloaded N/N layers to GPU' line"


def test_gpu_tokens_must_equal_the_cpu_tokens() -> None:
    run = {"F32": {"completion": [{"id": 5}, {"id": 7}, {"id": 9}]}}
    assert parity_problem(run, run) == ""
    other = {"F32": {"completion": [{"id": 5}, {"id": 8}, {"id": 9}]}}
    assert parity_problem(run, other) == "F32: parity: generated token 1 is [7] on the GPU, [8] on the CPU"
    assert parity_problem(run, {"F32": {"exit": 1}}).startswith("F32: parity: the CPU run gave no tokens")


BACKEND_OPS_OK = ("Testing 2 devices\n\nBackend 1/2: ROCm0\n  Device description: AMD Radeon RX 7900 XTX\n"
                  "  Device memory: 24560 MB (24514 MB free)\n\n"
                  "  MUL_MAT(type_a=f16,type_b=f32,m=16,n=1,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],v=0,o=1): \x1b[1;32mOK\x1b[0m\n"
                  "  MUL_MAT(type_a=q8_0,type_b=f32,m=16,n=1,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],v=0,o=1): \x1b[1;32mOK\x1b[0m\n"
                  "  2/2 tests passed\n  Backend ROCm0: \x1b[1;32mOK\x1b[0m\nBackend 2/2: CPU\n  Skipping CPU backend\n"
                  "2/2 backends passed\n\x1b[1;32mOK\x1b[0m\n")


def test_test_backend_ops_must_test_the_rocm_device_and_pass_every_case() -> None:
    assert backend_ops_command("MUL_MAT", "type_a=f16") == ["test-backend-ops", "test", "-b", HIP_DEVICE, "-o", "MUL_MAT",
                                                           "-p", "type_a=f16"]
    assert judge_backend_ops(BACKEND_OPS_OK) == (True, "2/2")
    failing = BACKEND_OPS_OK.replace("o=1): \x1b[1;32mOK\x1b[0m\n  2/2", "o=1): \x1b[1;31mFAIL\x1b[0m\n  1/2") \
                            .replace("Backend ROCm0: \x1b[1;32mOK", "Backend ROCm0: \x1b[1;31mFAIL")
    ok, detail = judge_backend_ops(failing)
    assert not ok and detail.startswith("1 case(s) differ from the CPU backend, first: MUL_MAT(type_a=q8_0")
    # `-b ROCm0` with no such device: every backend is skipped and test-backend-ops exits 0 — never a pass
    skipped = "Testing 1 devices\n\nBackend 1/1: CPU\n  Skipping\n1/1 backends passed\nOK\n"
    assert judge_backend_ops(skipped) == (False, "test-backend-ops did not test ROCm0 (no such device: ggml's HIP "
                                                 "backend found no GPU)")


# -- the build names the real llama.cpp build ----------------------------------------------------------------
def _sdist(tmp_path: Path, changelog: str) -> Path:
    path = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        data = changelog.encode()
        info = tarfile.TarInfo("llama_cpp_python-0.3.36/CHANGELOG.md")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_vendored_build_becomes_the_cmake_build_number_and_is_checked_against_the_changelog(tmp_path: Path) -> None:
    args = {"vendored_build": {"number": 11312, "commit": "0c1e57098"}, "source_subdir": "x"}
    assert vendored_build_defines(args) == ["-DLLAMA_BUILD_NUMBER=11312", "-DLLAMA_BUILD_COMMIT=0c1e57098"]
    assert "'-DLLAMA_BUILD_NUMBER=11312' '-DLLAMA_BUILD_COMMIT=0c1e57098'" in cmake_script(args, [], 0, 1, archive=True)
    log = "## [Unreleased]\n\n## [0.3.36]\n\n- feat: update llama.cpp to ggml-org/llama.cpp@0c1e57098\n\n" \
          "## [0.3.35]\n\n- feat: update llama.cpp to ggml-org/llama.cpp@4df29be4f\n"
    check_vendored_build(_sdist(tmp_path, log), args)
    stale = {"vendored_build": {"number": 11300, "commit": "4df29be4f"}}  # the previous release's: another section
    with pytest.raises(CairnError, match=r"section \[0.3.36\] names llama.cpp 0c1e57098, not vendored_build's 4df29be4f"):
        check_vendored_build(_sdist(tmp_path, log), stale)
    with pytest.raises(CairnError, match="needs a positive integer number and a hex commit"):
        vendored_build_defines({"vendored_build": {"number": 0, "commit": "unknown"}})


def test_the_pinned_sdist_names_the_manifests_vendored_build(cache_dir: Path) -> None:
    """The real 0.3.36 sdist (cached by tests/llama_fixtures.py) against the default manifest's pin."""
    import tomllib

    from support import ROOT
    from support.llama_fixtures import llama_sdist

    manifest = tomllib.loads((ROOT / "manifests" / "releases" / "default.toml").read_text())
    (component,) = [c for c in manifest["expansion"]["engines"]["components"] if c["name"] == "llama.cpp"]
    args = component["build"]["args"]
    assert "test-backend-ops" in args["build_targets"] and "-DLLAMA_BUILD_TESTS=ON" in args["cmake_args"]
    check_vendored_build(llama_sdist(cache_dir), args)


def test_gpu_host_is_json_friendly() -> None:
    host = GpuHost(("gfx1100",), "amdgpu-dkms 6.16.13", 1, "kfd", True)
    assert json.loads(json.dumps({"host": host.key()}))["host"] == "gpu gfx1100; driver amdgpu-dkms 6.16.13; kfd yes"


# -- cairn-llama --backend-check on stand-in libraries ------------------------------------------------------
STAND_IN_HIP = r"""
#include <stdio.h>
/* A STAND-IN for ggml's HIP backend (no AMD GPU or HIP runtime here): it answers the one call the check
   makes the way ggml_cuda_init does on a host without a device. */
int ggml_backend_cuda_get_device_count(void) {
    fprintf(stderr, "ggml_cuda_init: failed to initialize ROCm: %s\n", DEVICE_ERROR);
    return DEVICES;
}
"""


def _backend_image(tmp_path: Path, *, devices: int = 0, error: str = "no ROCm-capable device is detected",
                   needs: str = "", build: str = "build 11312, commit 0c1e57098") -> tuple[Path, Path]:
    """A site-packages with ``llama_cpp/lib/libggml-hip.so`` (compiled here, optionally needing ``needs``) and
    a ``llama-server`` that prints ``--version`` as llama.cpp's build-info does."""
    need_tool("gcc")
    need_tool("patchelf")
    site = tmp_path / "site"
    lib = site / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("raise ImportError('the check must not import llama_cpp')\n")
    source = tmp_path / "hip.c"
    source.write_text(STAND_IN_HIP)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-DDEVICES={devices}", f'-DDEVICE_ERROR="{error}"', "-o",
                    str(lib / "libggml-hip.so"), str(source)], check=True)
    if needs:
        subprocess.run(["patchelf", "--add-needed", needs, str(lib / "libggml-hip.so")], check=True)
    server = tmp_path / "llama-server"
    server.write_text(f"#!/bin/sh\necho 'version: 0.0.0 ({build})'\necho 'built with GNU 15 for Linux x86_64'\n")
    server.chmod(0o755)
    return site, server


def _backend_check(site: Path, server: Path, expect: str = "no-device") -> tuple[int, dict]:
    script = ROOT / "src" / "cairn" / "containers" / "scripts" / "cairn_llama.py"
    done = subprocess.run([sys.executable, str(script), "--backend-check", "--expect", expect, "--server", str(server)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)}, timeout=120)
    return done.returncode, json.loads(done.stdout)


def test_the_backend_check_passes_a_library_that_loads_and_finds_no_device(tmp_path: Path) -> None:
    code, report = _backend_check(*_backend_image(tmp_path))
    assert (code, report["failures"], report["devices"], report["not_found"]) == (0, [], 0, [])
    assert "no ROCm-capable device is detected" in report["init_log"]
    assert report["version"] == "version: 0.0.0 (build 11312, commit 0c1e57098)"


def test_the_backend_check_names_a_library_libggml_hip_needs_and_the_image_lacks(tmp_path: Path) -> None:
    code, report = _backend_check(*_backend_image(tmp_path, needs="libhipblas.so.99"))
    assert code == 1 and report["not_found"] == ["libhipblas.so.99"] and len(report["failures"]) == 1
    assert report["failures"][0].startswith("libggml-hip.so cannot load: libhipblas.so.99 not found (needed by ")


def test_the_backend_check_refuses_another_initialisation_error_a_device_and_an_unnamed_build(tmp_path: Path) -> None:
    code, report = _backend_check(*_backend_image(tmp_path / "a", error="invalid device ordinal"))
    assert code == 1 and report["failures"][0].startswith("ggml's HIP backend did not initialise to hipErrorNoDevice")
    code, report = _backend_check(*_backend_image(tmp_path / "b", devices=1))
    assert code == 1 and report["failures"] == ["ggml's HIP backend found 1 device(s) where the container has no GPU"]
    code, report = _backend_check(*_backend_image(tmp_path / "c", devices=1), expect="device")
    assert (code, report["failures"]) == (0, [])
    code, report = _backend_check(*_backend_image(tmp_path / "d", build="build 0, commit unknown"))
    assert code == 1 and report["failures"] == [f"{tmp_path / 'd' / 'llama-server'} --version names no real llama.cpp "
                                                "build: 'version: 0.0.0 (build 0, commit unknown)'"]


# -- the image installs the engine's requirements from the same index ------------------------------------
def test_an_image_pins_the_file_of_a_multi_python_project_its_python_installs(tmp_path: Path) -> None:
    """numpy has one file per Python in the family index (the engine's mirrored requirements): the image's
    Python chooses; a pure-Python wheel is taken as it is; without a Python the index's ambiguity is an error."""
    import hashlib

    from cairn.containers.wheels import stage
    from cairn.errors import CheckFailed

    index = tmp_path / "index" / "gfx110X-dgpu"
    names = {"numpy": [f"numpy-2.4.6-cp3{m}-cp3{m}-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl" for m in (11, 12, 13, 14)],
             "typing-extensions": ["typing_extensions-4.16.0-py3-none-any.whl"]}
    for project, files in names.items():
        entries = []
        for name in files:
            path = index / "files" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(name.encode())
            entries.append({"filename": name, "hashes": {"sha256": hashlib.sha256(name.encode()).hexdigest()}})
        page = index / "simple" / project / "index.v1.json"
        page.parent.mkdir(parents=True)
        page.write_text(json.dumps({"files": entries}))
    pinned = stage(tmp_path / "index", "gfx110X-dgpu", ["numpy", "typing-extensions"], tmp_path / "context", "3.14")
    assert [w.filename for w in pinned] == [names["numpy"][3], names["typing-extensions"][0]]
    assert (tmp_path / "context" / "requirements.txt").read_text().splitlines()[0].startswith("numpy==2.4.6 --hash=sha256:")
    with pytest.raises(CheckFailed, match="numpy has 4 files in the gfx110X-dgpu index"):
        stage(tmp_path / "index", "gfx110X-dgpu", ["numpy"], tmp_path / "other")
