"""``cairn doctor`` on captured host trees: each fixture host gets the verdict and the fix a person needs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cairn.cli import COMMANDS, main
from cairn.doctor import diagnose
from cairn.doctor.checks import can_open
from cairn.doctor.snapshot import DeviceNode
from cairn.doctor.tools import parse_amd_smi, parse_rocm_smi, parse_rocminfo
from support import doctor_hosts as hosts
from support import need, requires

pytestmark = requires(os.geteuid() == 0, "run as root: fixture device nodes are chowned to render/video gids")


def checks(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["checks"]}


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    COMMANDS.setdefault("doctor", ("cairn.doctor.command", "diagnose a ROCm host"))
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def test_mi300x_node_is_healthy(tmp_path: Path) -> None:
    hosts.mi300x_node(tmp_path)
    doc = diagnose(str(tmp_path))
    assert doc["exit_code"] == 0, doc["checks"]
    gpus = doc["host"]["gpus"]
    assert len(gpus) == 8 and {g["target"] for g in gpus} == {"gfx942"}
    assert [g["node"] for g in gpus] == list(range(1, 9))  # node 0 is the CPU
    assert gpus[0]["target_id"] == "gfx942:sramecc+:xnack-"  # from rocminfo's ISA name
    assert gpus[0]["product"] == "AMD Instinct MI300X"  # from amd-smi
    assert gpus[0]["vram_bytes"] == hosts.MI300X.vram_bytes and gpus[0]["render_node"] == "/dev/dri/renderD128"
    assert "dcgpu-all" in gpus[0]["families"]
    c = checks(doc)
    assert c["gpus"]["summary"].startswith("8× gfx942 AMD Instinct MI300X 192 GiB")
    assert "amdgpu 6.10.5 (DKMS)" in c["driver"]["summary"]
    assert c["rocm"]["summary"] == "ROCm 10.1.0 (opt: /opt/rocm)"


def test_human_output_one_line_per_check_worst_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts.container_without_kfd(tmp_path)
    code, out = run_cli(capsys, "--root", str(tmp_path))
    assert code == 2
    lines = out.splitlines()
    assert lines[0].startswith("cairn doctor — Ubuntu 24.04.1 LTS") and "docker container" in lines[0]
    body = [line for line in lines if line[:4] in ("FAIL", "WARN", "OK  ", "SKIP")]
    assert len(body) == 15
    order = ["FAIL", "WARN", "OK  ", "SKIP"]
    assert [order.index(line[:4]) for line in body] == sorted(order.index(line[:4]) for line in body)
    assert body[0].startswith("FAIL devices") and "--device /dev/kfd --device /dev/dri" in body[0]
    assert lines[-1] == "1 failed, 1 warnings, 7 ok, 6 skipped (exit 2)"


def test_container_without_kfd(tmp_path: Path) -> None:
    hosts.container_without_kfd(tmp_path)
    c = checks(diagnose(str(tmp_path)))
    assert c["devices"]["status"] == "fail"
    assert "docker container was started without the GPU devices: /dev/kfd" in c["devices"]["summary"]
    assert c["gpus"]["status"] == "warn" and "Unable to open /dev/kfd" in c["gpus"]["summary"]
    assert c["access"]["status"] == "skip"


def test_user_not_in_render_group(tmp_path: Path) -> None:
    hosts.desktop_not_in_render(tmp_path)
    c = checks(diagnose(str(tmp_path)))
    assert c["access"]["status"] == "fail"
    assert c["access"]["summary"] == "alice cannot open /dev/kfd, /dev/dri/renderD128: not in render (gid 110)"
    assert c["access"]["fix"] == "sudo usermod -aG render alice, then log out and back in"
    assert c["devices"]["status"] == "ok"


def test_added_to_render_but_session_predates_it(tmp_path: Path) -> None:
    hosts.desktop_not_in_render(tmp_path, relogin=True)
    c = checks(diagnose(str(tmp_path)))
    assert c["access"]["status"] == "fail" and "log out and back in" in c["access"]["fix"]
    assert "session predates it" in c["access"]["summary"]


def test_container_gid_mismatch_names_numeric_group(tmp_path: Path) -> None:
    host = hosts.container_without_kfd(tmp_path)
    host.kfd(gid=992).device("dev/dri/renderD128", 992).device("dev/dri/renderD129", 992)
    host.user("svc", 1001, session_groups=("video", "render"))  # the image's render is 110, the host's is 992
    c = checks(diagnose(str(tmp_path)))
    assert c["access"]["status"] == "fail"
    assert c["access"]["fix"].startswith("start the container with --group-add 992")
    assert any("gid 992 has no name" in e for e in c["access"]["evidence"])


def test_strix_halo_override_is_explained_and_warned(tmp_path: Path) -> None:
    hosts.strix_halo_laptop(tmp_path)
    doc = diagnose(str(tmp_path))
    c = checks(doc)
    assert doc["exit_code"] == 1
    override = c["override"]
    assert override["status"] == "warn"
    assert "gfx1151 impersonates gfx1100 via HSA_OVERRIDE_GFX_VERSION=11.0.0" in override["summary"]
    assert "gfx11-generic" in override["summary"]
    assert override["fix"].startswith("unset HSA_OVERRIDE_GFX_VERSION and install the build for gfx1151")
    assert "11.5.1" in override["fix"]
    # rocminfo reports the spoofed target; that agrees with the override, so the GPU check stays ok
    assert c["gpus"]["status"] == "ok" and doc["host"]["gpus"][0]["target"] == "gfx1151"
    assert any("impersonates" in e for e in c["gpus"]["evidence"])


def test_incompatible_override_fails(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path)
    host.environ(HSA_OVERRIDE_GFX_VERSION_1="9.4.2")  # node 1: a gfx1100 pretending to be gfx942
    c = checks(diagnose(str(tmp_path)))
    assert c["override"]["status"] == "fail"
    assert "incompatible ISA" in c["override"]["summary"] and "HSA_OVERRIDE_GFX_VERSION_1=9.4.2" in c["override"]["summary"]


@pytest.mark.parametrize("value", ["11.0", "gfx1100", "64.0.0", "11.0.9"])
def test_invalid_override_fails(tmp_path: Path, value: str) -> None:
    hosts.rx7900xtx_desktop(tmp_path).environ(HSA_OVERRIDE_GFX_VERSION=value)
    c = checks(diagnose(str(tmp_path)))
    assert c["override"]["status"] == "fail" and "HSA_STATUS_ERROR_INVALID_ISA" in c["override"]["summary"]


def test_wheel_built_for_another_rocm(tmp_path: Path) -> None:
    hosts.desktop_with_foreign_torch(tmp_path)
    doc = diagnose(str(tmp_path))
    c = checks(doc)
    assert c["wheels"]["status"] == "fail"
    assert "torch 2.12.0+rocm7.14.0 (ROCm 7.14.0)" in c["wheels"]["summary"]
    assert "installed 6.4.1" in c["wheels"]["summary"] and "torchvision" not in c["wheels"]["summary"]
    assert any("Requires-Dist rocm[libraries]==7.14.0" in e for e in c["wheels"]["evidence"])
    assert doc["host"]["python"] == "3.12"


def test_wheel_local_version_forms(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path)
    site = host.site("3.12")
    host.wheel(site, "vllm", "0.23.0+rocm641")
    host.wheel(site, "jax-rocm7-plugin", "0.10.0")
    host.wheel(site, "cairn-smoke", "0.1.0+rocm.6.4.1")
    c = checks(diagnose(str(tmp_path)))
    assert c["wheels"]["status"] == "fail"  # the JAX plugin is for ROCm 7, the host has 6.4.1
    assert "jax-rocm7-plugin 0.10.0 (ROCm 7)" in c["wheels"]["summary"]
    assert "vllm" not in c["wheels"]["summary"] and "cairn-smoke" not in c["wheels"]["summary"]


def test_no_gpu_host_says_so_and_runs_the_rest(tmp_path: Path) -> None:
    hosts.bare_host(tmp_path)
    doc = diagnose(str(tmp_path))
    c = checks(doc)
    assert doc["exit_code"] == 2 and doc["host"]["gpus"] == []
    assert c["gpus"]["summary"].startswith("no AMD GPU on this host")
    assert any("ROCk module is NOT loaded" in e for e in c["gpus"]["evidence"])
    assert c["rocm"]["status"] == "ok" and "5.2.3" in c["rocm"]["summary"]
    assert {c[k]["status"] for k in ("driver", "devices", "access", "device-code")} == {"skip"}
    assert c["override"]["status"] == "ok" and c["wheels"]["status"] == "ok"


def test_gpu_on_pci_without_driver(tmp_path: Path) -> None:
    hosts.bare_host(tmp_path).pci_gpu_without_driver(hosts.RX7900XTX, 0x03)
    c = checks(diagnose(str(tmp_path)))
    assert c["gpus"]["status"] == "fail" and "no KFD compute agent" in c["gpus"]["summary"]
    assert c["driver"]["status"] == "fail" and "modprobe amdgpu" in c["driver"]["fix"]
    assert c["devices"]["status"] == "fail"


def test_json_document_is_stable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts.strix_halo_laptop(tmp_path)
    code, out = run_cli(capsys, "--root", str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == doc["exit_code"] == 1
    assert doc["schema"] == "cairn.doctor/v1" and doc["status"] == "warn"
    assert set(doc) == {"schema", "exit_code", "status", "host", "checks", "advice"}
    assert doc["checks"][0]["id"] == "override"
    assert set(doc["checks"][0]) == {"id", "status", "summary", "fix", "evidence"}
    assert doc["host"]["gpus"][0]["gfx_target_version"] == 110501


def test_real_host_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    need(not Path("/sys/class/kfd/kfd/topology/nodes").exists(),
         "a host without an AMD GPU (this one has a KFD; the no-GPU report is also tested on fixture trees)")
    code, out = run_cli(capsys)
    assert code == 2
    assert "FAIL gpus" in out and "no AMD GPU on this host" in out
    assert "advice" in out


# -- parsers ----------------------------------------------------------------------------------------------
def test_tool_parsers_read_realistic_output(tmp_path: Path) -> None:
    host = hosts.mi300x_node(tmp_path)
    gpus = host.gpus
    info = parse_rocminfo(hosts.rocminfo_text(gpus))
    assert [g.target for g in info] == ["gfx942:sramecc+:xnack-"] * 8 and [g.node for g in info] == list(range(1, 9))
    smi = parse_amd_smi(hosts.amd_smi_text(gpus))
    assert [g.processor for g in smi] == ["gfx942"] * 8 and smi[0].name == "AMD Instinct MI300X"
    legacy = parse_rocm_smi(hosts.rocm_smi_text(gpus))
    assert legacy[3].node == 4 and legacy[3].target == "gfx942"
    as_json = json.dumps([{"gpu": 0, "asic": {"market_name": "Radeon RX 7900 XTX", "target_graphics_version": "gfx1100"}}])
    assert parse_amd_smi(as_json)[0].target == "gfx1100"
    assert parse_amd_smi(json.dumps({"gpu_data": json.loads(as_json)}))[0].name == "Radeon RX 7900 XTX"
    assert parse_rocminfo(hosts.ROCMINFO_NO_DRIVER) == ()


def test_permission_rule() -> None:
    kfd = DeviceNode("/dev/kfd", True, 0, 110, 0o660, True)
    assert can_open(kfd, 1000, (1000, 110)) and not can_open(kfd, 1000, (1000, 44)) and can_open(kfd, 0, ())
    assert can_open(DeviceNode("/dev/kfd", True, 0, 110, 0o666, True), 1000, ())
