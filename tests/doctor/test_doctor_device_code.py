"""The device-code check audits real HIP libraries (built with Debian's hipcc) installed in site-packages."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cairn.doctor import diagnose
from support import doctor_hosts as hosts
from support import need_tool, requires

pytestmark = [pytest.mark.hipcc, requires(os.geteuid() == 0, "run as root: fixture device nodes are chowned to render/video gids")]
KERNEL = """
#include <hip/hip_runtime.h>
__global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
extern "C" void run_scale(float* x, float a, int n) { hipLaunchKernelGGL(scale, dim3((n + 255) / 256), dim3(256), 0, 0, x, a, n); }
"""


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Two real fat binaries: one for gfx90a and gfx1030, one for gfx1030 only."""
    hipcc = need_tool("hipcc")
    work = tmp_path_factory.mktemp("hip")
    (work / "k.hip").write_text(KERNEL)
    built = {}
    for name, archs in (("both", ("gfx90a", "gfx1030")), ("rdna2", ("gfx1030",))):
        out = work / f"lib{name}.so"
        cmd = [hipcc, "-fPIC", "-shared", "--rocm-device-lib-path=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
               *(f"--offload-arch={a}" for a in archs), "-o", str(out), str(work / "k.hip")]
        subprocess.run(cmd, check=True, env={**os.environ, "HIP_PLATFORM": "amd"}, capture_output=True, timeout=300)
        built[name] = out.read_bytes()
    return built


def mi250x_workstation(root: Path, libraries: dict[str, bytes]) -> hosts.HostTree:
    host = hosts.HostTree(root).os("Ubuntu 24.04.1 LTS", "ubuntu", "24.04").kernel("6.8.0-45-generic").amdgpu("6.10.5")
    host.cpu_node(0).gpu(hosts.MI250X_GCD, node=1, bus=0x29, card=1, render=128)
    host.kfd().user("ml", 1000, session_groups=("video", "render")).environ().rocm_opt("6.4.1")
    site = host.site("3.12")
    host.wheel(site, "cairn-smoke", "0.1.0+rocm.6.4.1", files={"cairn_smoke/libcairn_smoke.so": libraries["both"]})
    host.wheel(site, "torch", "2.7.1+rocm6.4", files={"torch/lib/libtorch_hip.so": libraries["rdna2"],
                                                     "torch/lib/libc10_hip.so": libraries["both"]})
    return host


def test_packages_without_code_for_the_gpu_are_named(tmp_path: Path, libraries: dict[str, bytes]) -> None:
    mi250x_workstation(tmp_path, libraries)
    doc = diagnose(str(tmp_path))
    check = next(c for c in doc["checks"] if c["id"] == "device-code")
    assert check["status"] == "fail"
    assert check["summary"] == "torch has no gfx90a code (1 of 2 libraries)"
    assert "invalid device function" in check["fix"]
    evidence = " | ".join(check["evidence"])
    assert "cairn-smoke 0.1.0+rocm.6.4.1 for gfx90a: covered via exact" in evidence
    assert "libtorch_hip.so" in evidence


def test_override_changes_which_code_is_looked_up(tmp_path: Path, libraries: dict[str, bytes]) -> None:
    host = mi250x_workstation(tmp_path, libraries)
    host.environ(HSA_OVERRIDE_GFX_VERSION="10.3.0")  # gfx90a pretending to be gfx1030: both libraries "cover" it
    c = {c["id"]: c for c in diagnose(str(tmp_path))["checks"]}
    assert c["device-code"]["status"] == "ok" and "gfx1030" in c["device-code"]["summary"]
    assert any("without the override, for gfx90a: not covered" in e for e in c["device-code"]["evidence"])
    assert c["override"]["status"] == "fail" and "incompatible ISA" in c["override"]["summary"]


def test_no_audit_flag_skips_the_audit(tmp_path: Path, libraries: dict[str, bytes]) -> None:
    mi250x_workstation(tmp_path, libraries)
    check = next(c for c in diagnose(str(tmp_path), audit=False)["checks"] if c["id"] == "device-code")
    assert check["status"] == "skip" and "--no-audit" in check["summary"]
