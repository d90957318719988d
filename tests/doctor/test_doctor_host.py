"""``cairn doctor`` on the host around the GPU: glibc/libstdc++ against wheel tags, two HIP runtimes in one
process, the nearest same-generation build, an iGPU beside a dGPU, ``nomodeset`` and a kernel minimum.

No AMD GPU exists on this machine: GPU hosts are captured trees with stand-in KFD topologies and rocminfo /
amd-smi outputs (tests/doctor_hosts.py); the stand-in libc.so.6 and libstdc++.so.6 are real ELF libraries
gcc builds with the symbol versions of the glibc and GCC they stand for. What can be read for real — this
machine's glibc and libstdc++, and a Python process's /proc/<pid>/maps — is read for real.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import support.doctor_hosts as hosts
from cairn.cli import COMMANDS, main
from cairn.doctor import diagnose
from cairn.doctor.read import read_snapshot
from cairn.doctor.read.probe import import_names, run_probe
from cairn.errors import ManifestError
from cairn.matrix.model import Cell, VersionRange, WheelFile
from cairn.model.targets import load_registry
from support import need_tool, requires
from support.matrices import DIGEST, cell, publish

pytestmark = requires(os.geteuid() == 0, "run as root: fixture device nodes are chowned to render/video gids")
WIDE = VersionRange("5.15", "7.0")


def checks(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["checks"]}


def _shared_object(out: Path, source: str = "int f(void) { return 0; }\n", *libs: str) -> bytes:
    need_tool("gcc", "gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    c = out.with_suffix(".c")
    c.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(c), *libs], check=True, capture_output=True)
    return out.read_bytes()


def sdk_cell(target: str, wheel_tag: str) -> Cell:
    """A cell whose wheels carry ``wheel_tag``, as the matrix lists a release's files."""
    wheels = (WheelFile(f"rocm_sdk_core-7.2.4-py3-none-{wheel_tag}.whl", f"simple/{target}/rocm_sdk_core.whl", "0" * 64),)
    return replace(cell("7.2.4", target, kernel=WIDE), wheels=wheels)


# -- A: glibc and libstdc++ ------------------------------------------------------------------------------------
def test_installed_wheel_above_the_host_glibc_fails_with_the_image_as_the_way_out(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path / "host").runtimes("2.36", "3.4.30")  # Debian 12's glibc and GCC 12 runtime
    host.wheel(host.site("3.12"), "rocm-sdk-core", "7.2.4", tag="py3-none-manylinux_2_39_x86_64",
               files={"_rocm_sdk_core/lib/libamdhip64.so.7": b"\x7fELF"})
    pub = publish(tmp_path / "pub", "7.2.4", [cell("7.2.4", "gfx1100", kernel=WIDE)])
    doc = diagnose(str(tmp_path / "host"), [str(pub)], audit=False)
    glibc = checks(doc)["glibc"]
    assert glibc["status"] == "fail"
    assert glibc["summary"] == "glibc 2.36 < 2.39 required by rocm-sdk-core 7.2.4"
    assert glibc["fix"] == (f"use the image (`docker run --device /dev/kfd --device /dev/dri --group-add video --group-add render "
                            f"registry.example/cairn/pytorch@{DIGEST}`) or a host with glibc ≥ 2.39")
    assert doc["host"]["glibc"]["version"] == "2.36" and doc["host"]["libstdcxx"]["glibcxx"] == "3.4.30"
    assert "rocm-sdk-core 7.2.4: manylinux_2_39_x86_64 (glibc ≥ 2.39, GLIBCXX ≤ 3.4.33 by policy)" in glibc["evidence"]


def test_advised_wheels_are_compared_too(tmp_path: Path) -> None:
    hosts.rx7900xtx_desktop(tmp_path / "host").runtimes("2.41", "3.4.30")  # a new glibc, an old libstdc++
    pub = publish(tmp_path / "pub", "7.2.4", [sdk_cell("gfx1100", "manylinux_2_39_x86_64")])
    glibc = checks(diagnose(str(tmp_path / "host"), [str(pub)], audit=False))["glibc"]
    assert glibc["status"] == "warn"
    assert glibc["summary"] == ("libstdc++ GLIBCXX_3.4.30 < GLIBCXX_3.4.33 that manylinux_2_39_x86_64 lets rocm-sdk-core 7.2.4 "
                                "(advised) use: its C++ libraries may not load")
    assert glibc["fix"].startswith("install a libstdc++ defining GLIBCXX_3.4.33 (GCC 14 runtime), or use the image (`docker run")
    hosts.HostTree(tmp_path / "host").runtimes("2.41", "3.4.33")
    ok = checks(diagnose(str(tmp_path / "host"), [str(pub)], audit=False))["glibc"]
    assert ok["status"] == "ok" and ok["summary"].startswith("glibc 2.41 and libstdc++ GLIBCXX_3.4.33 meet the tags of")


def test_a_linux_x86_64_wheel_cannot_be_trusted_and_its_need_is_measured(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path / "host").runtimes("2.31", "3.4.28")  # an older host than this machine
    lib = _shared_object(tmp_path / "b" / "libggml-hip.so", "#include <pthread.h>\nvoid *g(void) { return (void *)pthread_create; }\n")
    host.wheel(host.site("3.12"), "llama-cpp-python", "0.3.36", tag="cp312-cp312-linux_x86_64",
               files={"llama_cpp/lib/libggml-hip.so": lib})
    needs = re.findall(r"GLIBC_2\.(\d+)", subprocess.run(["readelf", "-V", str(tmp_path / "b" / "libggml-hip.so")],
                                                         capture_output=True, text=True, check=True).stdout)
    newest = f"2.{max(int(n) for n in needs)}"  # what the library really needs on this machine (2.34: pthread in libc)
    glibc = checks(diagnose(str(tmp_path / "host"), audit=False))["glibc"]
    assert glibc["status"] == "fail"
    assert glibc["summary"] == (f"glibc 2.31 < {newest} needed by llama-cpp-python 0.3.36 (tagged linux_x86_64, which claims "
                                "every Linux and cannot be trusted: pip installed it here, it will not load)")
    hosts.HostTree(tmp_path / "host").runtimes("2.41", "3.4.33")
    glibc = checks(diagnose(str(tmp_path / "host"), audit=False))["glibc"]
    assert glibc["status"] == "warn" and "claims every Linux and cannot be trusted (it loads here)" in glibc["summary"]


def test_this_machine_glibc_and_libstdcxx_are_read_for_real() -> None:
    need_tool("readelf", "binutils")
    snap = read_snapshot("/", audit=False, probe=False)
    assert snap.glibc == os.confstr("CS_GNU_LIBC_VERSION").split()[1]
    ldd = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert ldd.endswith(" " + snap.glibc)  # "ldd (Debian GLIBC 2.36-9+deb12u10) 2.36"
    assert snap.glibcxx_where and Path(snap.glibcxx_where).is_file()
    listed = subprocess.run(["readelf", "-V", os.path.realpath(snap.glibcxx_where)], capture_output=True, text=True, check=True).stdout
    defined = {tuple(int(p) for p in v.split(".")) for v in re.findall(r"Name: GLIBCXX_(\d+\.\d+\.\d+)\b", listed)}
    assert snap.glibcxx == ".".join(map(str, max(defined)))


# -- A: two HIP runtimes in one process ------------------------------------------------------------------------
def _two_runtime_site(tmp_path: Path) -> Path:
    """A site directory whose two packages each load a HIP runtime stand-in (no ROCm here): a wheel's grafted
    ``libamdhip64-1a2b3c4d.so.7`` and a host-style ``/opt``-like ``libamdhip64.so.6``."""
    site = tmp_path / "site"
    _shared_object(site / "graftedpkg" / ".libs" / "libamdhip64-1a2b3c4d.so.7")
    _shared_object(tmp_path / "opt" / "rocm" / "lib" / "libamdhip64.so.6")
    (site / "graftedpkg" / "__init__.py").write_text(
        "import ctypes, os\nctypes.CDLL(os.path.join(os.path.dirname(__file__), '.libs', 'libamdhip64-1a2b3c4d.so.7'))\n")
    _shared_object(site / "hostpkg" / "_C.so")  # its extension, which finds the host's runtime on its own
    (site / "hostpkg" / "__init__.py").write_text(f"import ctypes\nctypes.CDLL({str(tmp_path / 'opt/rocm/lib/libamdhip64.so.6')!r})\n")
    (site / "broken").mkdir()
    (site / "broken" / "__init__.py").write_text("raise ImportError('libfmt.so.11: cannot open shared object file')\n")
    return site


def test_a_real_process_mapping_two_hip_runtimes_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _two_runtime_site(tmp_path)
    monkeypatch.setenv("PYTHONPATH", f"{site}:{os.environ.get('PYTHONPATH', '')}")
    probe = run_probe(["graftedpkg", "hostpkg", "broken"], sys.executable)
    assert probe.imported == ("graftedpkg", "hostpkg")
    assert probe.failed == ("broken: ImportError: libfmt.so.11: cannot open shared object file",)
    assert sorted(Path(p).name for p in probe.maps) == ["libamdhip64-1a2b3c4d.so.7", "libamdhip64.so.6"]
    alone = run_probe(["graftedpkg"], sys.executable)
    assert [Path(p).name for p in alone.maps] == ["libamdhip64-1a2b3c4d.so.7"]


def test_the_live_doctor_probes_the_installed_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on this machine: two installed ROCm distributions whose imports map two HIP runtimes."""
    site = _two_runtime_site(tmp_path / "x")
    packages = tmp_path / "site-packages"
    site.rename(packages)
    tree = hosts.HostTree(tmp_path)
    for name, package in (("rocm-grafted-demo", "graftedpkg"), ("rocm-host-demo", "hostpkg")):
        files = {str(p.relative_to(packages)): p.read_bytes() for p in (packages / package).rglob("*") if p.is_file()}
        tree.wheel(packages, name, "1.0", files=files, tag="py3-none-manylinux_2_28_x86_64")
    monkeypatch.syspath_prepend(str(packages))
    monkeypatch.setenv("PYTHONPATH", f"{packages}:{os.environ.get('PYTHONPATH', '')}")
    snap = read_snapshot("/", audit=False)
    # this machine may hold other ROCm distributions (a test run's venv can hold llama-cpp-python): the two here count
    assert snap.probe is not None and {"graftedpkg", "hostpkg"} <= set(snap.probe.imported), snap.probe
    c = checks(diagnose("/", audit=False))["hip-process"]
    assert c["status"] == "fail" and c["summary"].startswith("2 HIP runtimes mapped in one process after importing "), c
    assert "graftedpkg" in c["summary"] and "hostpkg" in c["summary"], c
    assert "(a grafted copy in wheel rocm-grafted-demo 1.0)" in c["summary"]
    assert f"{tmp_path}/x/opt/rocm/lib/libamdhip64.so.6 (host copy)" in c["summary"]
    assert checks(diagnose("/", audit=False, probe=False))["hip-process"]["status"] == "skip"


def test_two_runtimes_in_a_captured_process_fail_naming_wheel_and_host_copy(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path)
    site = host.site("3.12")
    host.wheel(site, "llama-cpp-python", "0.3.36", tag="cp312-cp312-manylinux_2_39_x86_64",
               files={"llama_cpp/__init__.py": b"", "llama_cpp.libs/libamdhip64-1a2b3c4d.so.7": b"\x7fELF"})
    shown = "/" + str((site / "llama_cpp.libs/libamdhip64-1a2b3c4d.so.7").relative_to(tmp_path))
    host.tool("maps", f"7f3a10000000-7f3a10200000 r--p 00000000 08:01 1234 {tmp_path}{shown}\n"
                      "7f3a20000000-7f3a20400000 r-xp 00000000 08:01 5678 /opt/rocm-6.4.1/lib/libamdhip64.so.6.4.60401\n"
                      "7f3a20400000-7f3a20500000 r--p 00400000 08:01 5678 /opt/rocm-6.4.1/lib/libamdhip64.so.6.4.60401\n"
                      "7f3a30000000-7f3a30100000 r-xp 00000000 08:01 9999 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    c = checks(diagnose(str(tmp_path), audit=False))["hip-process"]
    assert c["status"] == "fail" and c["summary"].startswith("2 HIP runtimes mapped in one process after importing the captured process")
    assert "libamdhip64-1a2b3c4d.so.7 (a grafted copy in wheel llama-cpp-python 0.3.36)" in c["summary"]
    assert "/opt/rocm-6.4.1/lib/libamdhip64.so.6.4.60401 (host copy)" in c["summary"]
    assert c["fix"].startswith("install every ROCm package from one Cairn release index")


def test_import_names_are_the_packages_holding_shared_objects(tmp_path: Path) -> None:
    host = hosts.rx7900xtx_desktop(tmp_path)
    site = host.site("3.12")
    host.wheel(site, "llama-cpp-python", "0.3.36", files={"llama_cpp/__init__.py": b"", "llama_cpp/lib/libllama.so": b"\x7fELF"})
    host.wheel(site, "rocm-sdk-core", "7.2.4", files={"_rocm_sdk_core/lib/libamdhip64.so.7": b"\x7fELF"})  # no __init__: not imported
    snap = read_snapshot(tmp_path, audit=False)
    assert import_names(snap.dists) == ["llama_cpp"]
    assert snap.probe is None  # a captured tree runs no process


# -- B: nearest build, overrides ----------------------------------------------------------------------------------
def test_gfx1032_is_sent_to_gfx1030_with_the_exact_override_unsupported(tmp_path: Path) -> None:
    hosts.single_gpu_desktop(tmp_path / "host", hosts.RX6600)
    pub = publish(tmp_path / "pub", "7.2.4", [cell("7.2.4", "gfx1030", kernel=WIDE), cell("7.2.4", "gfx1100", kernel=WIDE)])
    advice = diagnose(str(tmp_path / "host"), [str(pub)], audit=False)["advice"]
    assert advice["status"] == "none"
    assert advice["summary"] == ("gfx1032 has no validated image or wheel in 7.2.4; nearest: gfx1030 (same gfx10-3-generic "
                                 "ISA generation), unsupported: run its build with HSA_OVERRIDE_GFX_VERSION=10.3.0")
    nearest = advice["gpus"][0]["nearest"]
    assert nearest["override"] == "HSA_OVERRIDE_GFX_VERSION=10.3.0" and nearest["supported"] is False
    assert any("simple/gfx1030/" in line for line in nearest["install"])
    assert not any("gfx1100" in line for line in nearest["install"])


def test_gfx1103_is_sent_to_gfx1100_or_the_gfx11_generic_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts.single_gpu_desktop(tmp_path / "host", hosts.PHOENIX_780M)
    cells = [cell("7.2.4", t, kernel=WIDE) for t in ("gfx1151", "gfx1100", "gfx1030")]
    pub = publish(tmp_path / "pub", "7.2.4", cells)
    advice = diagnose(str(tmp_path / "host"), [str(pub)], audit=False)["advice"]
    assert advice["summary"].endswith("nearest: gfx1100 (same gfx11-generic ISA generation), unsupported: run its build with "
                                      "HSA_OVERRIDE_GFX_VERSION=11.0.0")  # the generation's base, not the closer-numbered gfx1151
    generic = replace(cells[1], gfx_target="gfx11-generic", index_url="simple/gfx11-generic/")
    pub2 = publish(tmp_path / "pub2", "7.2.4", [generic, cells[1]])
    advice = diagnose(str(tmp_path / "host"), [str(pub2)], audit=False)["advice"]
    assert advice["gpus"][0]["nearest"]["target"] == "gfx11-generic" and advice["gpus"][0]["nearest"]["override"] == ""
    assert "the gfx11-generic build, whose code runs on gfx1103 (not validated on it, unsupported)" in advice["summary"]
    COMMANDS.setdefault("doctor", ("cairn.doctor.command", "diagnose a ROCm host"))
    main(["doctor", "--root", str(tmp_path / "host"), "--matrix", str(pub), "--no-audit"])
    out = capsys.readouterr().out
    assert "  export HSA_OVERRIDE_GFX_VERSION=11.0.0   # unsupported: gfx1100's code on gfx1103" in out


def test_with_an_override_set_no_nonexistent_build_is_advised(tmp_path: Path) -> None:
    hosts.single_gpu_desktop(tmp_path / "host", hosts.RX6600, HSA_OVERRIDE_GFX_VERSION="10.3.0")
    pub = publish(tmp_path / "pub", "7.2.4", [cell("7.2.4", "gfx1030", kernel=WIDE)])
    doc = diagnose(str(tmp_path / "host"), [str(pub)], audit=False)
    override = checks(doc)["override"]
    assert "install the build for gfx1032" not in override["fix"]
    assert override["fix"] == ("there is no gfx1032 build in 7.2.4: HSA_OVERRIDE_GFX_VERSION=10.3.0 runs the gfx1030 build "
                               "(same gfx10-3-generic ISA generation) — unsupported, keep it only for that build")
    assert doc["advice"]["status"] == "none" and doc["advice"]["picks"] == []  # nothing claims a gfx1032 build
    hosts.HostTree(tmp_path / "host").environ(HSA_OVERRIDE_GFX_VERSION="11.0.0")  # the wrong generation
    override = checks(diagnose(str(tmp_path / "host"), [str(pub)], audit=False))["override"]
    assert override["status"] == "fail"
    assert override["fix"].endswith("set HSA_OVERRIDE_GFX_VERSION=10.3.0 instead — unsupported")


# -- B: iGPU beside a dGPU --------------------------------------------------------------------------------------
def test_igpu_beside_dgpu_names_each_index_and_the_line_that_hides_the_igpu(tmp_path: Path) -> None:
    hosts.desktop_with_igpu(tmp_path)
    doc = diagnose(str(tmp_path), audit=False)
    c = checks(doc)["visible-devices"]
    assert c["status"] == "fail"
    assert ("device 0: gfx1036 igpu (AMD Radeon Graphics, KFD node 1); device 1: gfx1201 dgpu (AMD Radeon RX 9070 XT, KFD node 2)"
            in c["summary"])
    assert c["fix"] == "export ROCR_VISIBLE_DEVICES=1 (or HIP_VISIBLE_DEVICES=1) so only the dGPU is used"
    assert [(g["index"], g["kind"], g["target"]) for g in doc["host"]["gpus"]] == [(0, "igpu", "gfx1036"), (1, "dgpu", "gfx1201")]


@pytest.mark.parametrize(("env", "status"), [({"ROCR_VISIBLE_DEVICES": "1"}, "ok"), ({"HIP_VISIBLE_DEVICES": "1"}, "ok"),
                                             ({"ROCR_VISIBLE_DEVICES": "0,1"}, "fail"), ({"HIP_VISIBLE_DEVICES": "0"}, "ok")])
def test_visible_devices_are_evaluated_as_rocr_then_hip(tmp_path: Path, env: dict[str, str], status: str) -> None:
    hosts.desktop_with_igpu(tmp_path, **env)
    assert checks(diagnose(str(tmp_path), audit=False))["visible-devices"]["status"] == status


def test_a_host_with_one_gpu_skips_the_device_order(tmp_path: Path) -> None:
    hosts.rx7900xtx_desktop(tmp_path)
    assert checks(diagnose(str(tmp_path), audit=False))["visible-devices"]["status"] == "skip"


# -- B: boot line and kernel minimum ----------------------------------------------------------------------------
def test_nomodeset_hides_the_gpu(tmp_path: Path) -> None:
    host = hosts.bare_host(tmp_path).pci_gpu_without_driver(hosts.RX7900XTX, 0x03)
    host.cmdline("BOOT_IMAGE=/vmlinuz-6.1.0-27-amd64 root=UUID=1234 ro quiet nomodeset")
    c = checks(diagnose(str(tmp_path), audit=False))["boot"]
    assert c["status"] == "fail"
    assert c["summary"] == "the kernel was booted with nomodeset: amdgpu does not drive the GPU, so ROCm sees none"
    assert c["fix"].startswith("remove nomodeset from GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub")
    host.cmdline("BOOT_IMAGE=/vmlinuz-6.1.0-27-amd64 root=UUID=1234 ro quiet")
    assert checks(diagnose(str(tmp_path), audit=False))["boot"]["status"] == "ok"


def test_strix_halo_below_its_declared_kernel_minimum_fails(tmp_path: Path) -> None:
    hosts.strix_halo_laptop(tmp_path, kernel="6.14.4-300.fc42.x86_64")
    c = checks(diagnose(str(tmp_path), audit=False))["kernel-minimum"]
    assert c["status"] == "fail"
    assert c["summary"] == "kernel 6.14.4-300.fc42.x86_64 is too old: gfx1151 (Strix Halo (Ryzen AI Max+ 395)) needs ≥ 6.18.4"
    assert c["fix"].startswith("boot a kernel ≥ 6.18.4")
    assert "gfx1151: kernel ≥ 6.18.4 (declared for gfx1151 in manifests/targets.toml)" in c["evidence"]
    hosts.HostTree(tmp_path).kernel("6.18.4-100.fc42.x86_64")
    assert checks(diagnose(str(tmp_path), audit=False))["kernel-minimum"]["status"] == "ok"


def test_a_family_may_declare_a_kernel_minimum_and_a_bad_one_is_located(tmp_path: Path) -> None:
    text = (Path(load_registry().path)).read_text()
    good = tmp_path / "targets.toml"
    good.write_text(text.replace('[family."gfx110X-dgpu"]\n', '[family."gfx110X-dgpu"]\nmin_kernel = "6.8"\n'))
    registry = load_registry.__wrapped__(good)
    assert registry.min_kernel("gfx1100") == ("6.8", "gfx110X-dgpu") and registry.min_kernel("gfx1151") == ("6.18.4", "gfx1151")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('min_kernel = "6.18.4"', 'min_kernel = "six"'))
    with pytest.raises(ManifestError, match=r"bad\.toml:\d+:\d+: min_kernel 'six' is not a kernel release"):
        load_registry.__wrapped__(bad)


def test_json_carries_the_new_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts.desktop_with_igpu(tmp_path).runtimes("2.41", "3.4.33").cmdline("ro quiet")
    COMMANDS.setdefault("doctor", ("cairn.doctor.command", "diagnose a ROCm host"))
    main(["doctor", "--root", str(tmp_path), "--json", "--no-audit"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["host"]["glibc"]["version"] == "2.41" and doc["host"]["libstdcxx"]["glibcxx"] == "3.4.33"
    assert doc["host"]["cmdline"] == ["ro", "quiet"] and doc["host"]["hip_runtimes_in_process"] is None
    ids = {c["id"] for c in doc["checks"]}
    assert {"glibc", "hip-process", "boot", "kernel-minimum", "visible-devices"} <= ids


def test_missing_device_code_on_a_target_with_no_build_points_at_the_nearest(tmp_path: Path) -> None:
    from support.fatbin_writer import bundle_for, section, write_elf

    need_tool("objcopy", "binutils")
    host = hosts.single_gpu_desktop(tmp_path / "host", hosts.RX6600)
    lib = write_elf(tmp_path / "libk.so", section([bundle_for(["gfx1030"])])).read_bytes()  # gfx1030 code only
    host.wheel(host.site("3.12"), "cairn-smoke", "0.1.0+rocm.7.2.4", files={"cairn_smoke/libk.so": lib})
    pub = publish(tmp_path / "pub", "7.2.4", [cell("7.2.4", "gfx1030", kernel=WIDE)])
    c = checks(diagnose(str(tmp_path / "host"), [str(pub)]))["device-code"]
    assert c["status"] == "fail" and c["summary"] == "cairn-smoke has no gfx1032 code (1 of 1 libraries)"
    assert c["fix"].startswith("there is no build for gfx1032 in the matrix: the advice names the nearest (unsupported)")
    assert "install the build for gfx1032" not in c["fix"]
