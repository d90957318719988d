"""Compacted splits (``cairn.audit.compact``): the removed bundles' bytes leave the file, every address stays.

Checked with readers other than Cairn's: binutils' ``readelf`` (headers, and its warnings), the dynamic
linker (``dlopen`` of the split library, then the wrapper pointers read through ``cairn_bundle(i)`` in the
loaded image), Debian's ``clang-offload-bundler-15`` on a hipcc-built library, patchelf afterwards (the wheel
writer sets RPATHs with it), and a small bundle reader here (plain and CCOB, written from
hip-fatbin-format.md) for the code objects kept. Libraries come from GNU ld and lld (with and without RELR
relocations) linking ``.hip_fatbin`` as hipcc does, and from Debian 12's hipcc itself.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
import zstandard

from cairn.audit import audit_file
from cairn.audit.split import split_file
from support import need_tool, requires
from support.fatbin_writer import bundle_for, ccob, write_linked_elf

LLD = Path("/usr/lib/llvm-15/bin")
LINKERS = ["bfd", "bfd+relr", pytest.param("lld", marks=requires((LLD / "ld.lld").exists(), "ld.lld (apt-get install lld-15)"))]


def bundles_of_three() -> list[bytes]:
    """Three translation units: plain with four targets, CCOB v3 zstd with three, plain with two."""
    return [bundle_for(["gfx1030", "gfx1100", "gfx90a", "gfx942"]), ccob(bundle_for(["gfx1100", "gfx1201", "gfx942"])),
            bundle_for(["gfx1100", "gfx906"])]


def linked(path: Path, linker: str, **kw) -> Path:
    return write_linked_elf(path, bundles_of_three(), linker=str(LLD) if linker == "lld" else "bfd",
                            relr=linker.endswith("+relr"), **kw)


# -- an independent reader ------------------------------------------------------------------------------
def code_objects(region: bytes) -> dict[str, bytes]:
    """Entry ID → code object of the bundle at the start of ``region``."""
    if region[:4] == b"CCOB":
        version, method = struct.unpack_from("<HH", region, 4)
        header, total = {1: (20, None), 2: (24, struct.unpack_from("<I", region, 8)[0]),
                         3: (32, struct.unpack_from("<Q", region, 8)[0])}[version]
        payload = region[header:total]
        region = zlib.decompress(payload) if method == 0 else zstandard.ZstdDecompressor().decompressobj().decompress(payload)
    assert region[:24] == b"__CLANG_OFFLOAD_BUNDLE__"
    (count,) = struct.unpack_from("<Q", region, 24)
    at, found = 32, {}
    for _ in range(count):
        offset, size, id_len = struct.unpack_from("<QQQ", region, at)
        found[region[at + 24 : at + 24 + id_len].decode()] = region[offset : offset + size]
        at += 24 + id_len
    return found


def sections(path: Path) -> dict[str, tuple[int, int, int]]:
    """Name → (address, file offset, size), as readelf reads them; readelf must say nothing on stderr."""
    run = subprocess.run(["readelf", "-SlW", str(path)], check=True, capture_output=True, text=True)
    assert run.stderr == "", run.stderr
    found = {}
    for m in re.finditer(r"\]\s+(\S+)\s+\S+\s+([0-9a-f]{16}) ([0-9a-f]+) ([0-9a-f]+)", run.stdout):
        found[m[1]] = (int(m[2], 16), int(m[3], 16), int(m[4], 16))
    return found


# what holds pointers into .hip_fatbin (checked through the loaded wrappers and the symbol table instead)
REWRITTEN = {".rela.dyn", ".symtab", ".hipFatBinSegment"}


def assert_compacted(source: Path, dest: Path, target: str) -> None:
    """What every compacted split must leave true."""
    before, after = audit_file(source), audit_file(dest)
    assert after.targets == (target,) and len(after.bundles) == len(before.bundles) == after.wrappers
    old, new = sections(source), sections(dest)
    assert set(old) == set(new)
    src, out = source.read_bytes(), dest.read_bytes()
    for name, (addr, offset, size) in old.items():
        if name in (".hip_fatbin", "NULL"):
            continue
        assert new[name][0] == addr and new[name][2] == size, f"{name} moved in memory"
        if name in REWRITTEN or name.endswith("bss"):
            continue
        assert out[new[name][1] : new[name][1] + size] == src[offset : offset + size], f"{name} changed"
    # no hole: the bundles sit back to back at 4096-aligned offsets and the section ends with the last one
    fat_addr, _, fat_size = new[".hip_fatbin"]
    assert fat_addr == old[".hip_fatbin"][0] and fat_size < old[".hip_fatbin"][2]
    assert after.bundles[0].offset == 0
    for a, b in zip(after.bundles, after.bundles[1:], strict=False):
        assert b.offset == (a.offset + a.size + 4095) // 4096 * 4096
    assert fat_size == after.bundles[-1].offset + after.bundles[-1].size
    removed = sum(b.size for b in before.bundles) - sum(b.size for b in after.bundles)
    assert len(out) < len(src) and len(src) - len(out) >= removed // 4096 * 4096 - 4096
    # __hip_fatbin symbols, where the link kept them, name the bundles' new places and sizes
    symbols = subprocess.run(["readelf", "-sW", str(dest)], check=True, capture_output=True, text=True).stdout
    placed = {int(m[1], 16) - fat_addr: int(m[2]) for m in re.finditer(r"([0-9a-f]{16})\s+(\d+) OBJECT .* __hip_fatbin_\d+$", symbols, re.M)}
    assert placed in ({}, {b.offset: b.size for b in after.bundles})
    # the kept code objects are the originals, byte for byte
    for b_old, b_new in zip(before.bundles, after.bundles, strict=True):
        kept = code_objects(out[b_new.file_offset : b_new.file_offset + b_new.size])
        original = code_objects(src[b_old.file_offset : b_old.file_offset + b_old.size])
        assert kept and all(original[i] == blob for i, blob in kept.items())
        assert [i for i in kept if not i.startswith("host-")] == [i for i in original if i.endswith("--" + target)]


@pytest.mark.parametrize("linker", LINKERS)
def test_a_linked_library_is_compacted_and_loads_with_its_wrappers_on_the_kept_bundles(tmp_path: Path, linker: str) -> None:
    source = linked(tmp_path / "lib.so", linker)
    report = split_file(source, tmp_path / "out.so", "gfx1100")
    assert report.layout == "compact" and report.layout_note is None
    assert report.file_size == (tmp_path / "out.so").stat().st_size < report.file_size_before
    assert_compacted(source, tmp_path / "out.so", "gfx1100")
    # loaded: each wrapper's pointer (relocated by ld.so) reads its bundle, as __hipRegisterFatBinary will
    library = ctypes.CDLL(str(tmp_path / "out.so"))
    library.cairn_bundle.restype = ctypes.c_void_p
    data = (tmp_path / "out.so").read_bytes()
    for n, bundle in enumerate(audit_file(tmp_path / "out.so").bundles):
        in_memory = ctypes.string_at(library.cairn_bundle(n), bundle.size)
        assert in_memory == data[bundle.file_offset : bundle.file_offset + bundle.size], f"wrapper {n}"
    assert library.cairn_fn() == 42


@pytest.mark.parametrize("linker", LINKERS)
def test_a_split_of_a_compacted_split_is_compacted_again(tmp_path: Path, linker: str) -> None:
    """The release cuts twice: the family's wheel from Debian's library, then one target's from that."""
    source = linked(tmp_path / "lib.so", linker)
    family = split_file(source, tmp_path / "family.so", "gfx1100,gfx942")
    one = split_file(tmp_path / "family.so", tmp_path / "one.so", "gfx1100")
    assert family.layout == one.layout == "compact"
    assert one.file_size < family.file_size < family.file_size_before
    assert_compacted(tmp_path / "family.so", tmp_path / "one.so", "gfx1100")
    library = ctypes.CDLL(str(tmp_path / "one.so"))
    library.cairn_bundle.restype = ctypes.c_void_p
    assert ctypes.string_at(library.cairn_bundle(1), 4) == b"CCOB"


def test_a_compacted_program_runs_and_reads_its_bundles(tmp_path: Path) -> None:
    """An executable (a HIP test program): the kernel maps it and hands ld.so its program headers."""
    source = write_linked_elf(tmp_path / "prog", bundles_of_three(), executable=True)
    report = split_file(source, tmp_path / "out", "gfx1100")
    assert report.layout == "compact", report.layout_note
    run = subprocess.run([str(tmp_path / "out")], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split(b"\n")[:3] == [b"__CLANG_OFFLOAD_BUNDLE__", b"CCOB\x03", b"__CLANG_OFFLOAD_BUNDLE__"]


def test_a_pointer_into_a_bundle_keeps_the_in_place_layout_and_says_why(tmp_path: Path) -> None:
    """A reference into ``.hip_fatbin`` that is not a bundle's start cannot be moved with its bundle: the split
    falls back to zero-filling in place, and the report names the reference."""
    source = linked(tmp_path / "lib.so", "bfd", stray=16)
    report = split_file(source, tmp_path / "out.so", "gfx1100")
    assert report.layout == "in-place"
    assert re.fullmatch(r"relocation at 0x[0-9a-f]+ points into \.hip_fatbin at \+0x10, not at a bundle", report.layout_note or "")
    assert report.file_size == report.file_size_before
    assert audit_file(tmp_path / "out.so").targets == ("gfx1100",)
    ctypes.CDLL(str(tmp_path / "out.so"))


# -- a library built by Debian 12's hipcc -----------------------------------------------------------------------
KERNELS = {
    "add.hip": '#include <hip/hip_runtime.h>\n__global__ void add(float *a, float b) { a[threadIdx.x] += b; }\n'
               'extern "C" int launch_add(float *a) { hipLaunchKernelGGL(add, dim3(1), dim3(64), 0, 0, a, 1.0f); return 0; }\n'
               'extern "C" int cairn_answer(void) { return 42; }\n',
    "mul.hip": '#include <hip/hip_runtime.h>\n__global__ void mul(float *a, float b) { a[threadIdx.x] *= b; }\n'
               'extern "C" int launch_mul(float *a) { hipLaunchKernelGGL(mul, dim3(1), dim3(64), 0, 0, a, 2.0f); return 0; }\n',
}
DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")


@pytest.fixture(scope="module")
def hipcc_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two translation units for gfx1030, gfx90a and gfx906 (ROCm 5.2's device libraries stop before gfx1100)."""
    hipcc = need_tool("hipcc")
    work = tmp_path_factory.mktemp("hipcc")
    for name, text in KERNELS.items():
        (work / name).write_text(text)
    out = work / "libk.so"
    subprocess.run([hipcc, "-fPIC", "-shared", f"--rocm-device-lib-path={DEVICE_LIBS}", "--offload-arch=gfx1030",
                    "--offload-arch=gfx90a", "--offload-arch=gfx906", "-o", str(out), *(str(work / n) for n in KERNELS)],
                   check=True, env={**os.environ, "HIP_PLATFORM": "amd"}, capture_output=True, timeout=600)
    return out


@pytest.mark.hipcc
def test_a_hipcc_library_is_compacted_loads_and_unbundles_as_before(hipcc_lib: Path, tmp_path: Path) -> None:
    report = split_file(hipcc_lib, tmp_path / "libk.so", "gfx1030")
    dest = tmp_path / "libk.so"
    assert report.layout == "compact", report.layout_note
    assert_compacted(hipcc_lib, dest, "gfx1030")
    # Debian's runtime library is linked in: dlopen runs the constructors that register each fat binary
    assert ctypes.CDLL(str(dest)).cairn_answer() == 42
    # Debian's bundler unbundles each kept bundle to the same code object as from the original
    bundler = shutil.which("clang-offload-bundler-15")
    if bundler:
        for old, new in zip(audit_file(hipcc_lib).bundles, audit_file(dest).bundles, strict=True):
            results = []
            for path, bundle in ((hipcc_lib, old), (dest, new)):
                part = tmp_path / f"{path.stem}-{bundle.index}.bin"
                part.write_bytes(path.read_bytes()[bundle.file_offset : bundle.file_offset + bundle.size])
                subprocess.run([bundler, "--unbundle", "--type=o", f"--input={part}", f"--output={part}.co",
                                "--targets=hipv4-amdgcn-amd-amdhsa--gfx1030"], check=True, capture_output=True)
                results.append(Path(f"{part}.co").read_bytes())
            assert results[0] == results[1] and results[0][:4] == b"\x7fELF"
    # and patchelf, which the wheel writer runs on every library, still gets a loadable file out of it
    patchelf = shutil.which("patchelf")
    if patchelf:
        patched = tmp_path / "patched" / "libk.so"  # a new file: the loaded one must not change under this process
        patched.parent.mkdir()
        shutil.copy(dest, patched)
        subprocess.run([patchelf, "--set-rpath", "$ORIGIN/" + "x" * 300, str(patched)], check=True)
        assert ctypes.CDLL(str(patched)).cairn_answer() == 42
        assert audit_file(patched).targets == ("gfx1030",)
