"""What is installed next to the GPU: copies of the HIP runtime, device payloads for other targets, and an
override that hides a missing one — each on a captured host tree, asserted as ``cairn doctor`` prints it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cairn.cli import COMMANDS, main
from cairn.doctor import diagnose
from cairn.matrix.model import VersionRange
from support import doctor_hosts as hosts
from support import requires
from support.matrices import DIGEST, cell, publish

pytestmark = requires(os.geteuid() == 0, "run as root: fixture device nodes are chowned to render/video gids")


def checks(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["checks"]}


def doctor_lines(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    COMMANDS.setdefault("doctor", ("cairn.doctor.command", "diagnose a ROCm host"))
    code = main(["doctor", *args])
    return code, capsys.readouterr().out.splitlines()


# -- duplicate runtime libraries ---------------------------------------------------------------------------
def test_two_hip_runtimes_are_named_with_the_one_that_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts.desktop_with_two_hip_runtimes(tmp_path)
    code, lines = doctor_lines(capsys, "--root", str(tmp_path), "--no-audit")
    line = next(x for x in lines if x.startswith("WARN libraries"))
    assert ("2 copies of libamdhip64: /opt/rocm-6.4.1/lib/libamdhip64.so (LD_LIBRARY_PATH), "
            "/usr/local/lib/python3.12/dist-packages/_rocm_sdk_core/lib/libamdhip64.so.7 (wheel rocm-sdk-core 7.2.4); "
            "/opt/rocm-6.4.1/lib/libamdhip64.so wins for a program without an RPATH") in line
    assert ("→ keep /opt/rocm-6.4.1/lib/libamdhip64.so: pip uninstall rocm-sdk-core (it brings "
            "/usr/local/lib/python3.12/dist-packages/_rocm_sdk_core/lib/libamdhip64.so.7) — two HIP runtimes") in line
    # amd-smi has one copy (reached through /opt/rocm, LD_LIBRARY_PATH and ld.so.conf alike): not a duplicate
    assert "libamd_smi" not in line.split("→")[0]
    assert code == 1


def test_library_evidence_follows_links_inside_the_tree(tmp_path: Path) -> None:
    hosts.desktop_with_two_hip_runtimes(tmp_path)
    lib = checks(diagnose(str(tmp_path), audit=False))["libraries"]
    assert ("libamdhip64: /opt/rocm-6.4.1/lib/libamdhip64.so → /opt/rocm-6.4.1/lib/libamdhip64.so.6.4.60401 "
            "(LD_LIBRARY_PATH, search order 1)") in lib["evidence"]
    assert any(e.startswith("libamdhip64: /usr/local/lib/python3.12/dist-packages/_rocm_sdk_core/lib/libamdhip64.so.7 "
                            "(wheel rocm-sdk-core 7.2.4, not on the loader's search path)") for e in lib["evidence"])
    assert len([e for e in lib["evidence"] if e.startswith("libamdhip64:")]) == 2


def test_ld_so_conf_copy_wins_without_ld_library_path(tmp_path: Path) -> None:
    host = hosts.desktop_with_two_hip_runtimes(tmp_path)
    host.environ()  # no LD_LIBRARY_PATH: the loader finds /opt/rocm/lib through /etc/ld.so.conf.d/rocm.conf
    lib = checks(diagnose(str(tmp_path), audit=False))["libraries"]
    assert lib["status"] == "warn"
    assert "/opt/rocm/lib/libamdhip64.so (/etc/ld.so.conf.d/rocm.conf)" in lib["summary"]
    assert lib["summary"].endswith("/opt/rocm/lib/libamdhip64.so wins for a program without an RPATH")


def test_ld_library_path_copy_beats_the_ld_so_conf_one(tmp_path: Path) -> None:
    host = hosts.desktop_with_two_hip_runtimes(tmp_path)
    host.shared_library("home/alice/hip-6.2/lib", "libamdhip64.so.6.2.41133", "libamdhip64.so.6")
    host.environ(LD_LIBRARY_PATH="/home/alice/hip-6.2/lib:")
    lib = checks(diagnose(str(tmp_path), audit=False))["libraries"]
    assert lib["summary"].startswith("3 copies of libamdhip64: /home/alice/hip-6.2/lib/libamdhip64.so.6 (LD_LIBRARY_PATH), "
                                     "/opt/rocm/lib/libamdhip64.so (/etc/ld.so.conf.d/rocm.conf), ")
    assert lib["fix"].startswith("keep /home/alice/hip-6.2/lib/libamdhip64.so.6: remove /opt/rocm/lib from "
                                 "/etc/ld.so.conf.d/rocm.conf and run ldconfig, pip uninstall rocm-sdk-core (it brings ")


def test_copies_off_the_search_path_say_no_one_wins(tmp_path: Path) -> None:
    host = hosts.desktop_with_two_hip_runtimes(tmp_path)
    host.environ()
    (tmp_path / "etc/ld.so.conf.d/rocm.conf").unlink()
    lib = checks(diagnose(str(tmp_path), audit=False))["libraries"]
    assert lib["status"] == "warn"
    assert "none is on the loader's search path: each loads through the RPATH of the package beside it" in lib["summary"]


def test_one_copy_each_is_ok(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path)
    host.shared_library("opt/rocm-6.4.1/lib", "libamdhip64.so.6.4.60401", "libamdhip64.so.6", "libamdhip64.so")
    lib = checks(diagnose(str(tmp_path), audit=False))["libraries"]
    assert lib["status"] == "ok"
    assert lib["summary"] == "one copy of each ROCm runtime library: /opt/rocm/lib/libamdhip64.so"


# -- device payloads --------------------------------------------------------------------------------------
def test_payload_for_another_family_fails_and_names_what_fits(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path)
    host.wheel(host.site("3.12"), "rocm-sdk-libraries-gfx94X-dcgpu", "7.2.4")  # no libraries.json: the registry's targets
    payload = checks(diagnose(str(tmp_path), audit=False))["device-payload"]
    assert payload["status"] == "fail"
    assert payload["summary"] == ("installed device payload is for other targets than this host's gfx1100: "
                                  "rocm-sdk-libraries-gfx94x-dcgpu 7.2.4 (carries gfx942)")
    assert payload["fix"].startswith("for gfx1100 install the device payload for gfx1100 (rocm-sdk-libraries-<family> of a "
                                     "family holding it: gfx1100, ")
    assert payload["fix"].endswith(", then pip uninstall rocm-sdk-libraries-gfx94x-dcgpu")


def test_payload_fix_is_the_matrix_command_for_the_host_gpu(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path / "host")
    hosts.libraries_wheel(host, "gfx90a-dcgpu", ("gfx90a",))
    pub = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx1100", python="3.12")])
    payload = checks(diagnose(str(tmp_path / "host"), [str(pub)], audit=False))["device-payload"]
    assert payload["status"] == "fail" and "rocm-sdk-libraries-gfx90a-dcgpu 7.2.4 (carries gfx90a)" in payload["summary"]
    assert payload["fix"] == (f"for gfx1100 install docker pull registry.example/cairn/pytorch@{DIGEST} and pip install "
                              f"--index-url {pub.resolve().as_uri()}/simple/gfx1100/ 'torch==2.12.0', "
                              "then pip uninstall rocm-sdk-libraries-gfx90a-dcgpu")


def test_extra_payload_for_no_gpu_here_warns(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path)
    hosts.libraries_wheel(host, "gfx110X-dgpu", ("gfx1100", "gfx1101", "gfx1102"))
    host.wheel(host.site("3.12"), "rocm-sdk-device-gfx1201", "7.2.4")
    payload = checks(diagnose(str(tmp_path), audit=False))["device-payload"]
    assert payload["status"] == "warn"
    assert payload["summary"] == "rocm-sdk-device-gfx1201 7.2.4 (carries gfx1201): code for no GPU on this host (gfx1100)"
    assert payload["fix"] == "pip uninstall rocm-sdk-device-gfx1201"


def test_matching_payload_is_ok_and_no_payload_is_skipped(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path / "a")
    hosts.libraries_wheel(host, "gfx110X-dgpu", ("gfx1100", "gfx1101", "gfx1102"))
    payload = checks(diagnose(str(tmp_path / "a"), audit=False))["device-payload"]
    assert payload["status"] == "ok"
    assert payload["summary"] == "device payload for gfx1100 installed: rocm-sdk-libraries-gfx110x-dgpu"  # pip's spelling
    hosts.rx7900xtx_desktop(tmp_path / "b")
    assert checks(diagnose(str(tmp_path / "b"), audit=False))["device-payload"]["status"] == "skip"


def test_two_gpus_need_both_payloads(tmp_path: Path) -> None:
    host = hosts.workstation_two_gpus(tmp_path)
    hosts.libraries_wheel(host, "gfx110X-dgpu", ("gfx1100", "gfx1101", "gfx1102"))
    payload = checks(diagnose(str(tmp_path), audit=False))["device-payload"]
    assert payload["status"] == "fail"
    assert payload["summary"].startswith("installed device payload is for other targets than this host's gfx1030: ")
    assert payload["fix"].startswith("for gfx1030 install the device payload for gfx1030")


# -- an override that masks a missing target -----------------------------------------------------------------
def test_override_masking_a_missing_target_says_what_to_install(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = hosts.strix_halo_laptop(tmp_path / "host")  # gfx1151 with HSA_OVERRIDE_GFX_VERSION=11.0.0 (gfx1100)
    hosts.libraries_wheel(host, "gfx110X-dgpu", ("gfx1100", "gfx1101", "gfx1102"))
    pub = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx1151", python="3.12", kernel=VersionRange("6.8", "6.20"))])
    code, lines = doctor_lines(capsys, "--root", str(tmp_path / "host"), "--matrix", str(pub), "--no-audit")
    line = next(x for x in lines if x.startswith("FAIL override"))
    assert ("gfx1151 impersonates gfx1100 via HSA_OVERRIDE_GFX_VERSION=11.0.0 (both gfx11-generic: usually runs, but "
            "gfx1100-tuned kernels may be wrong or slow on gfx1151); it masks a missing gfx1151: no installed device "
            "payload carries gfx1151, only gfx1100's (rocm-sdk-libraries-gfx110x-dgpu)") in line
    assert line.endswith(f"→ unset HSA_OVERRIDE_GFX_VERSION and install the build for gfx1151: docker pull "
                         f"registry.example/cairn/pytorch@{DIGEST} and pip install --index-url "
                         f"{pub.resolve().as_uri()}/simple/gfx1151/ 'torch==2.12.0' (gfx1151's own value would be 11.5.1)")
    assert code == 2


def test_override_with_the_real_target_installed_only_warns(tmp_path: Path) -> None:
    host = hosts.strix_halo_laptop(tmp_path)
    hosts.libraries_wheel(host, "gfx11-all", ("gfx1100", "gfx1151"))
    override = checks(diagnose(str(tmp_path), audit=False))["override"]
    assert override["status"] == "warn" and "masks" not in override["summary"]


def test_an_installed_variant_is_judged_by_the_target_it_carries(tmp_path: Path) -> None:
    """``rocm-sdk-device`` (a PEP 825 variant, one name for every target) names its target in libraries.json."""
    import json

    host = hosts.rx7900xtx_desktop(tmp_path)
    info = json.dumps({"family": "gfx120X-all", "target": "gfx1201", "targets": ["gfx1201"], "version": "7.2.4"}).encode()
    host.wheel(host.site("3.12"), "rocm-sdk-device", "7.2.4", files={"_rocm_sdk_libraries/share/cairn/libraries.json": info})
    payload = checks(diagnose(str(tmp_path), audit=False))["device-payload"]
    assert payload["status"] == "fail"
    assert payload["summary"] == ("installed device payload is for other targets than this host's gfx1100: "
                                  "rocm-sdk-device 7.2.4 (carries gfx1201)")
