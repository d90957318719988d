"""``cairn split`` on Debian experimental's fat librocblas 7.2.4 (65 CCOB v3 zstd bundles, 14 targets), proven
by tools that are not Cairn's: binutils' ``readelf`` (section and program headers of the compacted file), LLVM 22's
``clang-offload-bundler`` from the build image (lists every rewritten bundle, checks its MD5 hash, unbundles
the gfx1100 code object byte-identical to the original's), and ``dlopen`` of the split library in a clean
venv inside that image (ROCm 7.2 needs glibc 2.43, which the Debian 12 host does not have).

The image is the project's toolchain image, built by Cairn from its lock (the ``toolchain_image`` fixture) and
pulled through the private registry of the shared services; a missing Docker Engine or image skips on a developer machine and fails under CI=true.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from cairn.audit import audit_file
from cairn.audit.split import SplitReport, split_file
from support.audit_fixtures import pool_tree, unavailable

pytestmark = [pytest.mark.network, pytest.mark.slow]

LIBDIR = "usr/lib/x86_64-linux-gnu"
ROCBLAS = f"{LIBDIR}/librocblas.so.5.2"
HOST = "host-x86_64-unknown-linux-gnu-"
GFX1100 = "hipv4-amdgcn-amd-amdhsa--gfx1100"


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[Path, Path, SplitReport]:
    """Cut as the release cuts it: to the family gfx110X-dgpu (its libraries wheel), then that copy to gfx1100
    (``rocm-sdk-device-gfx1100``) — so every check below holds for the split of a split."""
    source = pool_tree("librocblas5") / ROCBLAS
    family, out = tmp_path_factory.mktemp("family"), tmp_path_factory.mktemp("split")
    split_file(source, family, "gfx1100,gfx1101,gfx1102")
    report = split_file(family / "librocblas.so.5.2", out, "gfx1100")
    os.symlink("librocblas.so.5.2", out / "librocblas.so.5")
    return source, out / "librocblas.so.5.2", report


def headers(path: Path) -> str:
    return subprocess.run(["readelf", "-SlW", str(path)], check=True, capture_output=True, text=True).stdout


def deflated(path: Path, work: Path) -> int:
    """Bytes ``path`` takes in a wheel: one zip member, deflate at zipfile's default level (wheel's)."""
    archive = work / (path.name + ".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(path, path.name)
    size = archive.stat().st_size
    archive.unlink()
    return size


def test_only_gfx1100_is_left_in_every_bundle(split) -> None:
    source, dest, report = split
    before, after = audit_file(source), audit_file(dest)
    assert len(before.bundles) == len(after.bundles) == after.wrappers == 65
    assert len(before.targets) == 14 and "gfx1100" in before.complete_targets
    assert after.targets == after.complete_targets == ("gfx1100",)
    assert {b.format + "+" + str(b.compression) for b in after.bundles} == {"ccob-v3+zstd"}
    assert all([e.id for e in b.entries] == [HOST, GFX1100] for b in after.bundles)
    # compacted: the first bundle stays where it was, the others follow it back to back, each 4096-aligned
    assert after.bundles[0].file_offset == before.bundles[0].file_offset
    assert all(b.offset == (a.offset + a.size + 4095) // 4096 * 4096 for a, b in zip(after.bundles, after.bundles[1:], strict=False))
    assert report.host_only_bundles == ()
    assert report.device_bytes_after < report.device_bytes_before / 2  # one of the family's three targets


def test_the_file_is_compacted_and_every_other_section_keeps_its_address_and_bytes(split) -> None:
    """Debian's GNU ld puts .eh_frame_hdr, .eh_frame and .gcc_except_table behind .hip_fatbin in one segment:
    they get a PT_LOAD of their own at their old addresses, and the file loses the removed bundles' bytes."""
    source, dest, report = split
    assert report.layout == "compact", report.layout_note
    assert dest.stat().st_size < source.stat().st_size / 4  # 210 MB with 14 targets; about 40 MB with one
    old, new = _sections(source), _sections(dest)
    assert set(old) == set(new)
    with open(source, "rb") as a, open(dest, "rb") as b:
        for name, (addr, offset, size) in old.items():
            if name == ".hip_fatbin":
                continue
            assert new[name][0] == addr and new[name][2] == size, name
            if name in (".rela.dyn", ".bss", ".tbss"):  # the wrappers' relocation addends name the packed bundles
                continue
            a.seek(offset)
            b.seek(new[name][1])
            assert a.read(size) == b.read(size), f"{name} differs"
    assert "LOAD" in headers(dest) and headers(dest).count("LOAD") == headers(source).count("LOAD") + 1


def _sections(path: Path) -> dict[str, tuple[int, int, int]]:
    run = subprocess.run(["readelf", "-SW", str(path)], check=True, capture_output=True, text=True)
    assert run.stderr == "", run.stderr
    return {m[1]: (int(m[2], 16), int(m[3], 16), int(m[4], 16))
            for m in re.finditer(r"\]\s+(\S+)\s+\S+\s+([0-9a-f]{16}) ([0-9a-f]+) ([0-9a-f]+)", run.stdout)}


def test_the_wheel_compressed_size_drops(split, tmp_path: Path) -> None:
    source, dest, _ = split
    before, after = deflated(source, tmp_path), deflated(dest, tmp_path)
    print(f"zip deflate: {before} -> {after} bytes")
    assert after < before / 5


def _docker(toolchain_image: str) -> tuple[str, dict[str, str], str]:
    from cairn.services.engine import engine_host

    docker = shutil.which("docker")
    host = engine_host()
    if not (docker and host):
        unavailable("no Docker Engine and registry (start them: cairn services start)")
    image = os.environ.get("CAIRN_TOOLCHAIN_IMAGE", toolchain_image)
    return docker, {**os.environ, "DOCKER_HOST": host}, image  # type: ignore[return-value]


_SCRIPT = r"""
set -u
cd /w/bundles
for b in new-*.bin; do
  n=${b#new-}; n=${n%.bin}
  clang-offload-bundler-22 --list --type=o --input=$b > /w/out/list-$n.txt 2>&1
  OFFLOAD_BUNDLER_VERBOSE=1 clang-offload-bundler-22 --unbundle --type=o --input=$b --targets=@TARGET@ \
    --output=/w/out/new-$n.co > /w/out/verbose-$n.txt 2>&1
  clang-offload-bundler-22 --unbundle --type=o --input=old-$n.bin --targets=@TARGET@ --output=/w/out/old-$n.co
done
python3 -m venv --without-pip /tmp/clean
LD_LIBRARY_PATH=/w/lib:/w/deps /tmp/clean/bin/python -c "
import ctypes
lib = ctypes.CDLL('/w/lib/librocblas.so.5')
size = ctypes.c_size_t()
assert lib.rocblas_get_version_string_size(ctypes.byref(size)) == 0
text = ctypes.create_string_buffer(size.value)
assert lib.rocblas_get_version_string(text, size) == 0
print('dlopen ok, rocblas', text.value.decode())
" > /w/out/dlopen.txt 2>&1
""".replace("@TARGET@", GFX1100)


@pytest.fixture(scope="module")
def in_image(split, tmp_path_factory, toolchain_image: str) -> Path:
    """Run LLVM 22's bundler on every rewritten (and original) bundle and dlopen the split library, in one
    container; returns the directory of its outputs."""
    source, dest, _ = split
    docker, env, image = _docker(toolchain_image)
    work = tmp_path_factory.mktemp("image")
    (work / "bundles").mkdir()
    (work / "out").mkdir()
    old, new = audit_file(source).bundles, audit_file(dest).bundles
    with open(source, "rb") as a, open(dest, "rb") as b:
        for before, after in zip(old, new, strict=True):
            # exactly one bundle per file: the bundler decompresses everything after the header
            a.seek(before.file_offset)
            (work / "bundles" / f"old-{before.index}.bin").write_bytes(a.read(before.size))
            b.seek(after.file_offset)
            (work / "bundles" / f"new-{after.index}.bin").write_bytes(b.read(after.size))
    deps = pool_tree("libroctx64-4") / LIBDIR
    try:
        subprocess.run([docker, "run", "--rm", "--network", "none", "-v", f"{work}:/w", "-v", f"{dest.parent}:/w/lib:ro",
                        "-v", f"{deps}:/w/deps:ro", image, "sh", "-c", _SCRIPT],
                       env=env, check=True, capture_output=True, text=True, timeout=1800)
    except subprocess.CalledProcessError as exc:
        if "manifest unknown" in exc.stderr or "not found" in exc.stderr:
            unavailable(f"toolchain image {image} is not in the registry: {exc.stderr.strip()[-200:]}")
        raise
    return work / "out"


def test_llvm22_bundler_lists_exactly_host_and_gfx1100_in_every_rewritten_bundle(in_image: Path) -> None:
    listed = sorted(in_image.glob("list-*.txt"))
    assert len(listed) == 65
    for path in listed:
        assert sorted(path.read_text().split()) == [GFX1100, HOST], path.name


def test_llvm22_bundler_checks_the_hash_and_unbundles_the_original_code_object(in_image: Path) -> None:
    for n in range(65):
        verbose = (in_image / f"verbose-{n}.txt").read_text()
        assert "Decompression method: zstd" in verbose and "Hashes match: Yes" in verbose, verbose
        new, old = (in_image / f"new-{n}.co").read_bytes(), (in_image / f"old-{n}.co").read_bytes()
        assert new == old and new[:4] == b"\x7fELF", f"bundle {n}"


def test_the_split_library_dlopens_in_a_clean_venv_of_the_build_image(in_image: Path) -> None:
    text = (in_image / "dlopen.txt").read_text()
    assert re.fullmatch(r"dlopen ok, rocblas 5\.2\.\d+\.\S*\n", text), text


def test_the_package_tree_keeps_gfx1100_and_target_neutral_tensile_files(tmp_path: Path) -> None:
    from cairn.audit import audit_paths
    from cairn.audit.split_tree import split_tree

    tree = pool_tree("librocblas5")
    report = split_tree(tree, tmp_path / "out", "gfx1100")
    library = Path(f"{LIBDIR}/rocblas/5/library")
    before = {p.name for p in (tree / library).iterdir()}
    after = {p.name for p in (tmp_path / "out" / library).iterdir()}
    named = {name for name in before if "gfx" in name}
    assert after == (before - named) | {name for name in named if re.search(r"[-_]gfx1100\.(dat|co|hsaco)$", name)}
    assert len(after & named) == 96 and len(report.dropped) == len(named) - 96
    assert audit_paths([tmp_path / "out"]).coverage("gfx1100").covered
    assert audit_paths([tmp_path / "out"]).targets_everywhere == ("gfx1100",)
    assert report.bytes_after < report.bytes_before / 3
