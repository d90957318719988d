"""The audit on real artifacts (Debian's ROCm 5.x libraries, a ROCm 7 wheel from PyPI), checked by other tools.

Independent means: ``readelf -S`` for section geometry and wrapper counts, ``objcopy`` + Debian's
``clang-offload-bundler-15 --list`` for plain bundles, the ``zstd`` CLI to inflate CCOB payloads. The one hard
fact (librocrand's target list) was read once with clang-offload-bundler and is cross-checked here again.
"""

from __future__ import annotations

import hashlib
import mmap
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cairn.audit import audit_file, audit_paths
from cairn.cli import main
from support import need_tool
from support.audit_fixtures import PLUGIN_VERSIONS, debian_library, debian_package, plugin_wheel

pytestmark = pytest.mark.network

ROCRAND_TARGETS = {"gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-", "gfx90a:xnack-", "gfx90a:xnack+", "gfx1030"}
BUNDLER = "clang-offload-bundler-15"


def readelf_sections(path: Path) -> dict[str, tuple[int, int]]:
    """``name -> (file offset, size)`` as binutils' readelf reports them."""
    out = subprocess.run(["readelf", "-SW", str(path)], check=True, capture_output=True, text=True).stdout
    found = {}
    for match in re.finditer(r"\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", out):
        found[match[1]] = (int(match[2], 16), int(match[3], 16))
    return found


def bundler_list(blob: Path) -> set[str]:
    bundler = need_tool(BUNDLER, "clang-tools-15")
    out = subprocess.run([bundler, "--list", "--type=o", f"--input={blob}"], check=True, capture_output=True, text=True)
    return set(out.stdout.split())


def test_librocrand_targets_match_clang_offload_bundler(tmp_path: Path) -> None:
    library = debian_library("librocrand1")
    dumped = tmp_path / "fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", str(library), str(dumped)], check=True)
    listed = bundler_list(dumped)
    audit = audit_file(library)
    assert audit.formats == ("plain",)
    assert {e.id for e in audit.bundles[0].entries} == listed
    assert set(audit.targets) == ROCRAND_TARGETS == {i.split("--", 1)[1] for i in listed if i.startswith("hipv4-")}
    assert audit.mismatches == ()
    report = audit_paths([library])
    assert report.coverage("gfx90a:sramecc+:xnack+").covered
    assert report.coverage("gfx906").covered  # xnack- code runs on a device queried without a setting
    assert not report.coverage("gfx906:xnack+").covered
    assert not report.coverage("gfx1100").covered


def test_librocsparse_walks_all_111_bundles_to_the_section_end(tmp_path: Path) -> None:
    library = debian_library("librocsparse0")
    sections = readelf_sections(library)
    section_offset, section_size = sections[".hip_fatbin"]
    wrappers = sections[".hipFatBinSegment"][1] // 24
    audit = audit_file(library)
    assert len(audit.bundles) == wrappers == audit.wrappers == 111
    assert audit.bundles[0].file_offset == section_offset
    last = audit.bundles[-1]
    assert section_size - 4096 < last.offset + last.size <= section_size
    assert set(audit.complete_targets) == set(audit.targets) == ROCRAND_TARGETS
    with open(library, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        # the walk skipped nothing but zero padding: between bundles and after the last one
        ends = [b.file_offset + b.size for b in audit.bundles]
        starts = [b.file_offset for b in audit.bundles[1:]] + [section_offset + section_size]
        assert all(not mapped[end:start].strip(b"\0") for end, start in zip(ends, starts, strict=True))
        # an independent parser agrees on bundles in the middle and at the end, sliced at our offsets
        for bundle in (audit.bundles[55], last):
            piece = tmp_path / f"bundle{bundle.index}"
            piece.write_bytes(mapped[bundle.file_offset : bundle.file_offset + bundle.size])
            assert bundler_list(piece) == {e.id for e in bundle.entries}


def test_libamdhip64_holds_the_magic_as_data_but_no_device_code() -> None:
    library = debian_library("libamdhip64-5")
    assert b"__CLANG_OFFLOAD_BUNDLE__" in library.read_bytes()
    assert ".hip_fatbin" not in readelf_sections(library)
    audit = audit_file(library)
    assert (audit.kind, audit.bundles, audit.targets) == ("none", (), ())


def test_deb_is_audited_without_unpacking_by_hand() -> None:
    report = audit_paths([debian_package("librocrand1")])
    (binary,) = report.binaries
    assert binary.path.endswith("!usr/lib/x86_64-linux-gnu/librocrand.so.1.1")
    assert set(binary.targets) == ROCRAND_TARGETS


def _inflate_with_zstd_cli(blob: bytes, work: Path) -> bytes:
    """Inflate a CCOB v3 payload with the zstd CLI; header fields read by fixed offsets (v3: data at 32)."""
    total, usize = struct.unpack_from("<QQ", blob, 8)
    (work / "payload.zst").write_bytes(blob[32:total])
    subprocess.run(["zstd", "-d", "-q", "-f", str(work / "payload.zst"), "-o", str(work / "bundle")], check=True)
    inflated = (work / "bundle").read_bytes()
    assert len(inflated) == usize
    assert hashlib.md5(inflated).digest()[:8] == blob[24:32]
    return inflated


@pytest.mark.parametrize("version", PLUGIN_VERSIONS)
def test_rocm7_wheel_ccob_v3_bundles_match_zstd_and_the_bundler(tmp_path: Path, version: str) -> None:
    need_tool("zstd")
    wheel = plugin_wheel(version)
    report = audit_paths([wheel])
    unpacked = tmp_path / "wheel"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    with_fatbin = sorted(p for p in unpacked.rglob("*.so") if ".hip_fatbin" in readelf_sections(p))
    assert [b.path.split("!", 1)[1] for b in report.binaries] == [str(p.relative_to(unpacked)) for p in with_fatbin]
    assert with_fatbin, "the pinned wheel carries device code"
    for binary, library in zip(report.binaries, with_fatbin, strict=True):
        assert binary.formats == ("ccob-v3+zstd",)
        assert len(binary.bundles) == readelf_sections(library)[".hipFatBinSegment"][1] // 24
        data = library.read_bytes()
        for bundle in binary.bundles:
            inflated = _inflate_with_zstd_cli(data[bundle.file_offset : bundle.file_offset + bundle.size], tmp_path)
            (tmp_path / "plain").write_bytes(inflated)
            assert bundler_list(tmp_path / "plain") == {e.id for e in bundle.entries}
            assert bundle.uncompressed_size == len(inflated)
        assert binary.mismatches == ()
    assert report.coverage("gfx1151").covered


def test_generic_targets_in_a_real_wheel_cover_their_members() -> None:
    """0.9.1 ships gfx11-generic and gfx9-4-generic, exact gfx1030 but no gfx10-3-generic (bundler-checked above)."""
    report = audit_paths([plugin_wheel("0.9.1")])
    assert report.coverage("gfx1151").via == ("gfx11-generic",)
    assert report.coverage("gfx942:sramecc+:xnack-").via == ("gfx9-4-generic",)
    assert report.coverage("gfx1030").via == ("exact",)
    gfx1031 = report.coverage("gfx1031")
    assert not gfx1031.covered
    assert len(gfx1031.gaps) == len(report.device_binaries)


def test_cli_on_real_files_exit_codes(capsys) -> None:
    library = str(debian_library("librocrand1"))
    assert main(["audit", library, "--target", "gfx1030", "--target", "gfx90a:xnack+"]) == 0
    assert main(["audit", library, "--family", "gfx110X-all"]) == 1
    out = capsys.readouterr().out
    assert "gfx1100" in out and "no" in out


def test_librocsparse_audits_in_bounded_memory() -> None:
    """1.3 GB of library, yet the process never holds it: mapped pages are dropped bundle by bundle."""
    library = debian_library("librocsparse0")
    script = (
        "import resource, sys\n"
        "from cairn.audit import audit_file\n"
        "audit = audit_file(sys.argv[1])\n"
        "print(len(audit.bundles), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(library)], capture_output=True, text=True, check=True)
    bundles, peak_kb = map(int, out.stdout.split())
    assert bundles == 111
    # the point is that the 1.25 GB file is never read into memory as a whole: the peak stays under half of it.
    # Mapped file pages count in RSS until dropped, so the peak depends on the page cache: measured 36 MB
    # alone on an idle machine, 169-495 MB right after other tests filled the cache.
    assert peak_kb < library.stat().st_size / 2 / 1024, f"peak RSS {peak_kb} KB for a {library.stat().st_size >> 20} MB library"
