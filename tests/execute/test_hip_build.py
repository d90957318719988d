"""Cairn's own HIP smoke library: built for several targets, byte-identical on rebuild, gated by the audit."""

from __future__ import annotations

import ctypes
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cairn.audit import audit_file
from cairn.audit.check import check_coverage
from cairn.errors import CheckFailed, InputError
from cairn.execute.hip import compile_hip, hipcc_version
from cairn.paths import recipes_dir
from support import need, requires
from support.fatbin_writer import bundle_for, section, write_elf

DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")
TARGETS = ("gfx90a", "gfx1030")
SMOKE = recipes_dir() / "hip" / "smoke"
KERNEL_UNITS = 3  # saxpy, gemm, reduce; runtime.hip has no kernels and so no bundle

needs_hipcc = requires(shutil.which("hipcc") and DEVICE_LIBS.is_dir(), "hipcc and rocm-device-libs (apt-get install hipcc rocm-device-libs)")


def _build(root: Path) -> Path:
    """Copy the recipe somewhere new and build it there, as the executor does from the store."""
    tree = root / "src"
    shutil.copytree(SMOKE, tree)
    out = root / "out" / "libcairn_smoke.so"
    log = io.StringIO()
    compile_hip(sorted(tree.glob("*.hip")), TARGETS, out, device_lib_path=DEVICE_LIBS, log=log, include_dirs=(tree,))
    assert "--offload-arch=gfx1030 --offload-arch=gfx90a" in log.getvalue()
    return out


@pytest.fixture(scope="module")
def smoke_libs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first = _build(tmp_path_factory.mktemp("a"))
    second = _build(tmp_path_factory.mktemp("b") / "somewhere" / "deeper")
    return first, second


@pytest.mark.hipcc
@pytest.mark.slow
@needs_hipcc
def test_rebuild_from_another_directory_is_byte_identical(smoke_libs: tuple[Path, Path]) -> None:
    first, second = smoke_libs
    assert first.read_bytes() == second.read_bytes()
    assert str(first.parent.parent).encode() not in first.read_bytes()


@pytest.mark.hipcc
@pytest.mark.slow
@needs_hipcc
def test_every_translation_unit_carries_every_target(smoke_libs: tuple[Path, Path], tmp_path: Path) -> None:
    library = smoke_libs[0]
    audit = audit_file(library)
    assert len(audit.bundles) == KERNEL_UNITS == audit.wrappers
    assert all(set(b.targets) == set(TARGETS) for b in audit.bundles)
    # Debian's bundler agrees on the first bundle
    dumped = tmp_path / "fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", str(library), str(dumped)], check=True)
    listed = subprocess.run(["clang-offload-bundler-15", "--list", "--type=o", f"--input={dumped}"], capture_output=True, text=True, check=True)
    assert {line.split("--", 1)[1] for line in listed.stdout.split() if line.startswith("hipv4-")} == set(TARGETS)
    check_coverage(library, TARGETS)


@pytest.mark.hipcc
@pytest.mark.slow
@needs_hipcc
def test_coverage_gate_rejects_missing_and_extra_targets(smoke_libs: tuple[Path, Path]) -> None:
    library = smoke_libs[0]
    with pytest.raises(CheckFailed, match="gfx1100 is not covered") as missing:
        check_coverage(library, (*TARGETS, "gfx1100"))
    assert missing.value.exit_code == 1
    with pytest.raises(CheckFailed, match="outside the requested set: gfx90a"):
        check_coverage(library, ("gfx1030",))


@pytest.mark.hipcc
@pytest.mark.slow
@needs_hipcc
def test_ctypes_abi_reference_paths_and_clean_no_gpu_error(smoke_libs: tuple[Path, Path]) -> None:
    lib = ctypes.CDLL(str(smoke_libs[0]))
    lib.cairn_error_string.restype = ctypes.c_char_p
    floats = ctypes.c_float * 6
    x, y = floats(1, 2, 3, 4, 5, 6), floats(*([1.0] * 6))
    lib.cairn_saxpy_cpu(6, ctypes.c_float(2.0), x, y)
    assert list(y) == [3.0, 5.0, 7.0, 9.0, 11.0, 13.0]
    a, b, c = (ctypes.c_float * 6)(1, 2, 3, 4, 5, 6), (ctypes.c_float * 6)(7, 8, 9, 10, 11, 12), (ctypes.c_float * 4)()
    lib.cairn_gemm_cpu(2, 2, 3, a, b, c)  # [[1,2,3],[4,5,6]] @ [[7,8],[9,10],[11,12]]
    assert list(c) == [58.0, 64.0, 139.0, 154.0]
    total = ctypes.c_double()
    lib.cairn_reduce_sum_cpu(6, x, ctypes.byref(total))
    assert total.value == 21.0
    need(not os.path.exists("/dev/kfd"), "a host without an AMD GPU (the no-device path cannot be observed with one)")
    assert lib.cairn_device_count() == 0
    for code in (lib.cairn_saxpy_gpu(6, ctypes.c_float(2.0), x, y), lib.cairn_gemm_gpu(2, 2, 3, a, b, c),
                 lib.cairn_reduce_sum_gpu(6, x, ctypes.byref(total))):
        assert code != 0
        assert b"no HIP device" in lib.cairn_error_string(code)
    assert lib.cairn_saxpy_gpu(-1, ctypes.c_float(1.0), x, y) != 0


@pytest.mark.hipcc
@needs_hipcc
def test_hipcc_version_names_hip_and_clang() -> None:
    version = hipcc_version()
    assert version.startswith("hip ") and "; clang " in version
    assert "nvcc" not in version.lower()


def test_bad_targets_and_device_libs_are_input_errors(tmp_path: Path) -> None:
    source = tmp_path / "k.hip"
    source.write_text("")
    with pytest.raises(InputError, match="unknown gfx target 'gfx9999'"):
        compile_hip([source], ("gfx9999",), tmp_path / "x.so", device_lib_path=DEVICE_LIBS, log=io.StringIO())
    with pytest.raises(InputError, match=r"no ockl\.bc"):
        compile_hip([source], ("gfx90a",), tmp_path / "x.so", device_lib_path=tmp_path, log=io.StringIO())
    with pytest.raises(InputError, match="no HIP sources"):
        compile_hip([], ("gfx90a",), tmp_path / "x.so", device_lib_path=DEVICE_LIBS, log=io.StringIO())


def test_gate_names_the_bundle_that_lacks_a_target(tmp_path: Path) -> None:
    """The gate on a library written by the test writer: no hipcc needed."""
    lib = write_elf(tmp_path / "lib.so", section([bundle_for(["gfx90a", "gfx1030"]), bundle_for(["gfx90a"])]), wrappers=2)
    with pytest.raises(CheckFailed, match=r"gfx1030 is not covered: .*bundles #1@0x3000"):
        check_coverage(lib, ("gfx90a", "gfx1030"))
    plain = write_elf(tmp_path / "plain.so", None)
    with pytest.raises(CheckFailed, match="no HIP device code"):
        check_coverage(plain, ("gfx90a",))
