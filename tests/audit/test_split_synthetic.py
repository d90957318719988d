"""``cairn split`` on fat binaries written by tests/support/fatbin_writer.py: every bundle format, generic targets,
xnack variants, host-only bundles, bad input, and install trees with Tensile / MIOpen data files.

What a split must leave true is checked with other readers than the one under test: binutils' ``readelf``
for the section and program headers, byte comparison outside the rewritten bundles, and a small bundle
parser here (written from hip-fatbin-format.md) that inflates CCOB payloads with zlib/zstandard itself and
recomputes their MD5 prefix.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
import zstandard

from cairn.audit import audit_file, audit_paths
from cairn.audit.split import split_file
from cairn.audit.split_tree import named_targets, split_tree
from cairn.cli import main
from cairn.model.targets import TargetId, load_registry
from support.fatbin_writer import (
    HOST_ID,
    bundle_for,
    ccob,
    code_object,
    device_id,
    plain_bundle,
    section,
    write_elf,
)

FORMATS = ["plain"] + [f"ccob-v{v}+{m}" for v in (1, 2, 3) for m in ("zlib", "zstd")]


def encode(bundle: bytes, fmt: str) -> bytes:
    if fmt == "plain":
        return bundle
    version, method = fmt.removeprefix("ccob-v").split("+")
    return ccob(bundle, version=int(version), method=method)


@pytest.fixture
def lib(tmp_path: Path):
    counter = iter(range(1000))

    def make(bundles: list[bytes]) -> Path:
        return write_elf(tmp_path / f"lib{next(counter)}.so", section(bundles), wrappers=len(bundles))

    return make


# -- an independent reader ------------------------------------------------------------------------------
def inflate(region: bytes) -> tuple[bytes, dict]:
    """The plain bundle in ``region`` and, for CCOB, its header fields — checked against the payload."""
    if region.startswith(b"__CLANG_OFFLOAD_BUNDLE__"):
        return region, {}
    assert region[:4] == b"CCOB"
    version, method = struct.unpack_from("<HH", region, 4)
    if version == 1:
        (usize,), header, total = struct.unpack_from("<I", region, 8), 20, None
    elif version == 2:
        total, usize = struct.unpack_from("<II", region, 8)
        header = 24
    else:
        total, usize = struct.unpack_from("<QQ", region, 8)
        header = 32
    digest = region[header - 8 : header]
    stream = region[header:total] if total else region[header:]
    if method == 0:
        inflater = zlib.decompressobj()
        data = inflater.decompress(stream)
        used = len(stream) - len(inflater.unused_data)
    else:
        data = zstandard.ZstdDecompressor().decompressobj().decompress(stream)
        used = len(stream)
    assert len(data) == usize
    assert digest == hashlib.md5(data).digest()[:8]  # the hash field: first 8 bytes of MD5 of the plain bundle
    return data, {"version": version, "method": method, "total": total, "end": total or header + used}


def entries(plain: bytes) -> list[tuple[str, int, int]]:
    """``(id, offset, size)`` of every entry of a plain bundle."""
    (count,) = struct.unpack_from("<Q", plain, 24)
    pos, out = 32, []
    for _ in range(count):
        offset, size, id_len = struct.unpack_from("<QQQ", plain, pos)
        out.append((plain[pos + 24 : pos + 24 + id_len].decode(), offset, size))
        pos += 24 + id_len
    return out


def headers(path: Path) -> str:
    """Section and program headers as binutils reads them."""
    return subprocess.run(["readelf", "-SlW", str(path)], check=True, capture_output=True, text=True).stdout


def assert_same_outside_bundles(before: Path, after: Path) -> None:
    a, b = before.read_bytes(), after.read_bytes()
    assert len(a) == len(b)
    spans = [(x.file_offset, x.file_offset + x.size) for x in audit_file(before).bundles]
    cursor = 0
    for start, end in spans:
        assert a[cursor:start] == b[cursor:start]
        cursor = end
    assert a[cursor:] == b[cursor:]


# -- single files -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_split_keeps_only_the_target_in_every_bundle_and_in_place_moves_nothing(lib, tmp_path: Path, fmt: str) -> None:
    """The in-place layout (``compacted=False``, and the fallback when a file cannot be compacted)."""
    source = lib([encode(bundle_for(["gfx1030", "gfx1100", "gfx942"]), fmt),
                  encode(bundle_for(["gfx1100", "gfx90a:xnack-"]), fmt)])
    before = audit_file(source)
    report = split_file(source, tmp_path / "out.so", "gfx1100", compacted=False)
    assert report.layout == "in-place" and report.layout_note == "not asked for (compacted=False)"
    dest = tmp_path / "out.so"
    after = audit_file(dest)

    assert after.targets == after.complete_targets == ("gfx1100",)
    assert report.targets_before == ("gfx1030", "gfx1100", "gfx90a:xnack-", "gfx942")
    assert report.targets_after == ("gfx1100",)
    assert [(b.offset, b.file_offset, b.format, b.compression) for b in after.bundles] == \
        [(b.offset, b.file_offset, b.format, b.compression) for b in before.bundles]
    assert dest.stat().st_size == source.stat().st_size
    assert headers(dest) == headers(source)
    assert_same_outside_bundles(source, dest)

    data = dest.read_bytes()
    for old, new in zip(before.bundles, after.bundles, strict=True):
        region = data[new.file_offset : new.file_offset + old.size]
        plain, fields = inflate(region)
        end = fields.get("end", max(o + s for _, o, s in entries(plain)))
        assert not region[end:].strip(b"\0"), "the rest of the original bundle is zero padding"
        if fields:
            assert (fields["version"], fields["method"]) == (int(fmt[6]), 0 if fmt.endswith("zlib") else 1)
            assert fields["total"] in (None, end)
        listed = entries(plain)
        assert [i for i, _, _ in listed] == [HOST_ID, device_id("gfx1100")]
        assert all(offset % 4096 == 0 for _, offset, _ in listed)
        _, offset, size = listed[1]
        assert plain[offset : offset + size] == code_object("gfx1100")
    assert report.device_bytes_after < report.device_bytes_before


def test_generic_entries_are_kept_for_their_members(lib, tmp_path: Path) -> None:
    source = lib([ccob(bundle_for(["gfx1030", "gfx11-generic"])), bundle_for(["gfx1151", "gfx11-generic", "gfx942"])])
    report = split_file(source, tmp_path / "out.so", "gfx1151")
    after = audit_file(tmp_path / "out.so")
    assert [b.targets for b in after.bundles] == [("gfx11-generic",), ("gfx11-generic", "gfx1151")]
    assert report.bundles[0].dropped == (device_id("gfx1030"),)
    coverage = audit_paths([tmp_path / "out.so"]).coverage("gfx1151")
    assert coverage.covered and coverage.via == ("exact", "gfx11-generic")


@pytest.mark.parametrize(("target", "kept"), [
    ("gfx90a:xnack-", ("gfx90a:xnack-",)),
    ("gfx90a:xnack+", ("gfx90a:xnack+",)),
    ("gfx90a", ("gfx90a:xnack+", "gfx90a:xnack-")),  # a bare query keeps both: the device may run either mode
    ("gfx90a:sramecc+:xnack+", ("gfx90a:xnack+",)),
])
def test_xnack_variants_follow_the_target_id(lib, tmp_path: Path, target: str, kept: tuple[str, ...]) -> None:
    source = lib([ccob(bundle_for(["gfx90a:xnack+", "gfx90a:xnack-", "gfx942"]), version=2)])
    split_file(source, tmp_path / "out.so", target)
    assert audit_file(tmp_path / "out.so").targets == kept


def test_a_bundle_without_code_for_the_target_keeps_its_host_entry(lib, tmp_path: Path, capsys) -> None:
    source = lib([bundle_for(["gfx1100", "gfx1030"]), ccob(bundle_for(["gfx1030"])), bundle_for(["gfx1030"])])
    assert not audit_paths([source]).coverage("gfx1100").covered  # it never ran there: the split changes nothing
    assert main(["split", str(source), "--target", "gfx1100", "--out", str(tmp_path / "out.so")]) == 0
    assert "bundles #1, #2 had no code for gfx1100 and keep only their host entry" in capsys.readouterr().out
    after = audit_file(tmp_path / "out.so")
    assert [[e.id for e in b.entries] for b in after.bundles] == [[HOST_ID, device_id("gfx1100")], [HOST_ID], [HOST_ID]]
    assert len(after.bundles) == after.wrappers == 3
    gaps = audit_paths([tmp_path / "out.so"]).coverage("gfx1100").gaps
    assert [b.index for b in gaps[0].bundles] == [1, 2]


def test_untouched_bundles_stay_byte_identical_and_output_is_deterministic(lib, tmp_path: Path) -> None:
    source = lib([ccob(bundle_for(["gfx1100"])), ccob(bundle_for(["gfx1100", "gfx1201"])), bundle_for(["gfx1100"])])
    split_file(source, tmp_path / "a.so", "gfx1100")
    split_file(source, tmp_path / "b.so", "gfx1100")
    a, original = (tmp_path / "a.so").read_bytes(), source.read_bytes()
    assert a == (tmp_path / "b.so").read_bytes()
    bundles, moved = audit_file(source).bundles, audit_file(tmp_path / "a.so").bundles
    for n in (0, 2):
        old, new = bundles[n], moved[n]
        assert a[new.file_offset : new.file_offset + new.size] == original[old.file_offset : old.file_offset + old.size]
    assert a[moved[1].file_offset : moved[1].file_offset + moved[1].size] != \
        original[bundles[1].file_offset : bundles[1].file_offset + bundles[1].size]


def test_spirv_and_mismatched_entries_are_chosen_by_id_like_the_runtime(lib, tmp_path: Path) -> None:
    spirv = ("hipv4-spirv64-amd-amdhsa--amdgcnspirv", b"\x03\x02\x23\x07" + bytes(60))
    liar = (device_id("gfx1100"), code_object("gfx1100", mach=0x36))  # ELF says gfx1030
    source = lib([plain_bundle([liar, spirv, (device_id("gfx1030"), code_object("gfx1030"))])])
    split_file(source, tmp_path / "out.so", "gfx1100")
    after = audit_file(tmp_path / "out.so")
    assert [e.id for e in after.bundles[0].entries] == [HOST_ID, liar[0], spirv[0]]
    assert after.mismatches  # still reported: the split does not launder a lying entry


# -- bad input: one line, exit 2, nothing written -------------------------------------------------------------
def _fails(argv: list[str], capsys, *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for needle in needles:
        assert needle in err
    return err


def test_bad_input_is_one_line_and_writes_nothing(lib, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    good = lib([bundle_for(["gfx1100", "gfx1030"])])
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    _fails(["split", str(text), "--target", "gfx1100", "--out", str(out)], capsys, "notes.txt: not an ELF file")
    _fails(["split", str(good), "--target", "gfx1199", "--out", str(out)], capsys, "--target: unknown gfx target 'gfx1199'")
    _fails(["split", str(good), "--target", "gfx1100", "--out", str(good)], capsys, "is the input file")
    plain = write_elf(tmp_path / "plain.so", None)
    _fails(["split", str(plain), "--target", "gfx1100", "--out", str(out)], capsys, "has no .hip_fatbin device code")
    kpack = write_elf(tmp_path / "kpack.so", section([bundle_for(["gfx1100"])]), wrapper_magic=b"HIPK")
    _fails(["split", str(kpack), "--target", "gfx1100", "--out", str(out)], capsys, "kpack-split binary")
    broken = bytearray(section([ccob(bundle_for(["gfx1100", "gfx1030"]))]))
    broken[40] ^= 0xFF  # inside the zstd stream
    corrupt = write_elf(tmp_path / "corrupt.so", bytes(broken))
    _fails(["split", str(corrupt), "--target", "gfx1100", "--out", str(out)], capsys, "corrupt.so: bundle 0")
    assert list(out.iterdir()) == []
    assert not [p for p in tmp_path.rglob(".*cairn-split*")]


def test_json_report(lib, tmp_path: Path, capsys) -> None:
    source = lib([ccob(bundle_for(["gfx1100", "gfx1030"]))])
    assert main(["split", str(source), "--target", "gfx1100", "--out", str(tmp_path / "o.so"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["targets_before"] == ["gfx1030", "gfx1100"] and doc["targets_after"] == ["gfx1100"]
    assert doc["file_size_before"] == source.stat().st_size and doc["file_size"] == (tmp_path / "o.so").stat().st_size
    # objcopy's .hip_fatbin is in no segment: what follows it moves by its own alignment, so even bytes count
    assert doc["layout"] == "compact" and doc["layout_note"] is None and doc["file_size"] < doc["file_size_before"]
    assert doc["bundles"][0]["dropped"] == [device_id("gfx1030")]
    assert doc["bundles"][0]["size_after"] < doc["bundles"][0]["size_before"] == doc["device_bytes_before"]


# -- data file names and trees --------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "named"), [
    ("TensileLibrary_lazy_gfx1100.dat", ["gfx1100"]),
    ("TensileLibrary_Type_HH_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx1102.hsaco", ["gfx1102"]),
    ("TensileLibrary_Type_ZZ_Contraction_l_AlikC_Bjlk_Cijk_Dijk_fallback_gfx90a-xnack+.hsaco", ["gfx90a:xnack+"]),
    ("TensileLibrary_Type_I8I_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_CU104_gfx90a.dat", ["gfx90a"]),
    ("TensileLibrary_Type_CC_Contraction_l_Ailk_Bjlk_Cijk_Dijk_gfx90a.co", ["gfx90a"]),
    ("extop_gfx11-generic.co", ["gfx11-generic"]),
    ("gfx1030_36.kdb", ["gfx1030"]),
    ("gfx90a6e.HIP.fdb.txt", ["gfx90a"]),  # MIOpen: processor, then the CU count in hex
    ("gfx942.tn.model", ["gfx942"]),
    ("gfx803_64.ukdb", ["gfx803"]),  # a processor Cairn does not ship for
    ("gfx1337.kdb", ["gfx1337"]),  # one the registry does not know at all
    ("TensileManifest.txt", None),
    ("librocblas.so.5.2", None),
    ("gfxinfo.dat", None),
])
def test_data_file_names(name: str, named: list[str] | None) -> None:
    found = named_targets(name, load_registry())
    assert (None if found is None else [str(t) for t in found]) == named


def test_split_tree_splits_libraries_and_drops_other_targets_data(tmp_path: Path, capsys) -> None:
    tree = tmp_path / "tree"
    lib_dir = tree / "usr/lib/x86_64-linux-gnu"
    library = lib_dir / "rocblas/5/library"
    miopen = tree / "usr/share/miopen/db"
    for folder in (library, miopen):
        folder.mkdir(parents=True)
    write_elf(lib_dir / "librocblas.so.5.2", section([ccob(bundle_for(["gfx1030", "gfx1100", "gfx90a:xnack+"]))]))
    os.symlink("librocblas.so.5.2", lib_dir / "librocblas.so.5")
    write_elf(lib_dir / "libhost.so", None)
    names = ["TensileLibrary_lazy_gfx1100.dat", "TensileLibrary_lazy_gfx1030.dat", "Kernels.so-000-gfx1100.hsaco",
             "TensileLibrary_Type_SS_fallback_gfx90a-xnack+.hsaco", "TensileLibrary_gfx11-generic.co", "TensileManifest.txt"]
    for name in names:
        (library / name).write_bytes(name.encode() * 100)
    os.symlink("TensileLibrary_lazy_gfx1030.dat", library / "TensileLibrary_gfx1030.dat")
    for name in ("gfx1100_48.kdb", "gfx90a6e.HIP.fdb.txt", "gfx1030_36.kdb"):
        (miopen / name).write_bytes(b"db" * 100)

    assert main(["split", str(tree), "--target", "gfx1100", "--out", str(tmp_path / "out")]) == 0
    shown = capsys.readouterr().out
    assert "data files: 5 of other targets dropped, 4 kept" in shown
    assert f"{tmp_path / 'out'}/usr/lib/x86_64-linux-gnu/librocblas.so.5.2 (from " in shown  # the final path
    out = tmp_path / "out"
    found = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir())
    assert found == sorted([
        "usr/lib/x86_64-linux-gnu/librocblas.so.5", "usr/lib/x86_64-linux-gnu/librocblas.so.5.2",
        "usr/lib/x86_64-linux-gnu/libhost.so",
        "usr/lib/x86_64-linux-gnu/rocblas/5/library/TensileLibrary_lazy_gfx1100.dat",
        "usr/lib/x86_64-linux-gnu/rocblas/5/library/Kernels.so-000-gfx1100.hsaco",
        "usr/lib/x86_64-linux-gnu/rocblas/5/library/TensileLibrary_gfx11-generic.co",
        "usr/lib/x86_64-linux-gnu/rocblas/5/library/TensileManifest.txt",
        "usr/share/miopen/db/gfx1100_48.kdb",
    ])
    assert os.readlink(out / "usr/lib/x86_64-linux-gnu/librocblas.so.5") == "librocblas.so.5.2"
    assert audit_file(out / "usr/lib/x86_64-linux-gnu/librocblas.so.5").targets == ("gfx1100",)
    assert (out / "usr/share/miopen/db/gfx1100_48.kdb").read_bytes() == b"db" * 100
    assert not list(tmp_path.glob(".*cairn-split*"))

    report = split_tree(tree, tmp_path / "out1151", "gfx1151")
    kept = {Path(p).name for p in (tmp_path / "out1151").rglob("*")}
    assert "TensileLibrary_gfx11-generic.co" in kept and "TensileLibrary_lazy_gfx1100.dat" not in kept
    assert report.libraries[0].host_only_bundles == (0,)  # no gfx1151 or gfx11-generic code in that library

    _fails(["split", str(tree), "--target", "gfx1100", "--out", str(out)], capsys, "already exists")
    _fails(["split", str(tree), "--target", "gfx1100", "--out", str(tree / "x")], capsys, "inside the tree")


def test_feature_of_data_file_names_matches_target_ids() -> None:
    registry = load_registry()
    (named,) = named_targets("TensileLibrary_x_gfx90a-xnack-.hsaco", registry)
    assert named == TargetId.parse("gfx90a:xnack-")
    assert registry.can_run(named, TargetId.parse("gfx90a")) and not registry.can_run(named, TargetId.parse("gfx90a:xnack+"))


def hard_bundle(words: int) -> bytes:
    """A CCOB bundle (gfx1100 with ``words`` words of text, gfx1030) compressed at zstd 19, harder than the
    split's recompression (LLVM's default 3): cutting gfx1030 out leaves a bundle larger than the original."""
    import random

    rng = random.Random(7)
    vocabulary = [bytes(rng.choice(b"abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(400)]
    text = b" ".join(rng.choice(vocabulary) for _ in range(words))
    plain = plain_bundle([(device_id("gfx1100"), code_object("gfx1100") + text), (device_id("gfx1030"), code_object("gfx1030"))])
    payload = zstandard.ZstdCompressor(level=19).compress(plain)
    return b"CCOB" + struct.pack("<HHQQ", 3, 1, 32 + len(payload), len(plain)) + hashlib.md5(plain).digest()[:8] + payload


def test_a_bundle_that_would_grow_is_refused_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    """The original was compressed harder (zstd 19) than the split recompresses (LLVM's default 3): when the
    smaller bundle still does not fit in the original's bytes, the file is refused rather than shifted."""
    source = write_elf(tmp_path / "hard.so", section([hard_bundle(words=100_000)]))
    _fails(["split", str(source), "--target", "gfx1100", "--out", str(tmp_path / "out.so")], capsys,
           "hard.so: bundle 0 at +0x0: the rewritten bundle", "does not fit", "keep this file fat")
    assert not (tmp_path / "out.so").exists()
    assert not list(tmp_path.glob(".*cairn-split*"))


def test_a_bundle_may_grow_into_the_zero_padding_behind_it(tmp_path: Path) -> None:
    """Bundles start 4096-aligned: a recompressed bundle a few bytes larger than the one it replaces takes the
    padding before the next one (what cutting a family's split again to one target needs), and the copy is
    still read back whole."""
    source = write_elf(tmp_path / "hard.so", section([hard_bundle(words=2_000), ccob(bundle_for(["gfx1100"]))]), wrappers=2)
    report = split_file(source, tmp_path / "out.so", "gfx1100", compacted=False)
    grown = report.bundles[0]
    assert grown.size_after > grown.size_before  # level 3 after level 19: larger, and still in its slot
    after = audit_file(tmp_path / "out.so")
    assert after.targets == after.complete_targets == ("gfx1100",) and len(after.bundles) == 2
    assert [b.file_offset for b in after.bundles] == [b.file_offset for b in audit_file(source).bundles]


def test_a_family_split_keeps_every_member_and_nothing_else(lib, tmp_path: Path) -> None:
    """``--target gfx1100,gfx1101`` (a family's targets): an entry stays when it runs on any of them."""
    source = lib([ccob(bundle_for(["gfx1030", "gfx1100", "gfx1101", "gfx942"])), bundle_for(["gfx11-generic", "gfx90a"])])
    report = split_file(source, tmp_path / "out.so", "gfx1100,gfx1101")
    after = audit_file(tmp_path / "out.so")
    assert report.target == "gfx1100,gfx1101"
    assert [b.targets for b in after.bundles] == [("gfx1100", "gfx1101"), ("gfx11-generic",)]
    assert set(report.targets_after) == {"gfx1100", "gfx1101", "gfx11-generic"}


def test_a_family_split_of_a_tree_keeps_each_members_data_files(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    library = tree / "lib/rocblas/library"
    library.mkdir(parents=True)
    for name in ("TensileLibrary_gfx1100.dat", "TensileLibrary_gfx1101.dat", "TensileLibrary_gfx942.dat"):
        (library / name).write_bytes(b"x")
    report = split_tree(tree, tmp_path / "out", "gfx1100,gfx1101")
    assert sorted(p.name for p in (tmp_path / "out/lib/rocblas/library").iterdir()) == \
        ["TensileLibrary_gfx1100.dat", "TensileLibrary_gfx1101.dat"]
    assert report.dropped == ("lib/rocblas/library/TensileLibrary_gfx942.dat",)


def test_an_empty_target_set_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    _fails(["split", str(tmp_path), "--target", ",", "--out", str(tmp_path / "o")], capsys, "names no gfx target")


def test_a_family_libraries_wheel_is_cut_to_the_family_and_names_what_it_lacks(tmp_path: Path) -> None:
    """``rocm-sdk-libraries-<family>``: fat binaries split to the family, other targets' kernel files left out,
    static archives never shipped, and a target a library was built without recorded as partial — the
    library's name, and a kernel-file folder with no file for it."""
    import io
    import zipfile

    from cairn.formats import elf
    from cairn.wheels import sdk

    tree = tmp_path / "tree"
    lib_dir = tree / "lib"
    kernels = lib_dir / "rocblas" / "5" / "library"
    kernels.mkdir(parents=True)
    write_elf(lib_dir / "libblas.so.5", section([ccob(bundle_for(["gfx1100", "gfx1101", "gfx942"]))]))
    write_elf(lib_dir / "libccl.so.1", section([ccob(bundle_for(["gfx1100", "gfx942"]))]))  # built without gfx1101
    (lib_dir / "libck_ops.a").write_bytes(b"!<arch>\n" + b"x" * 100)
    (tree / "bin").mkdir()
    write_elf(tree / "bin" / "ccltool", None)  # an expansion's tool (rcclras links librccl)
    (lib_dir / "fft" / "1.0").mkdir(parents=True)
    write_elf(lib_dir / "fft" / "1.0" / "fft_helper", None)  # a helper in a subdirectory (rocfft_rtc_helper)
    for name in ("TensileLibrary_gfx1100.dat", "TensileLibrary_gfx942.dat"):  # no gfx1101 kernel files
        (kernels / name).write_bytes(name.encode())
    owned = sdk.expansion_paths([tree])
    assert sdk.classify("lib/libck_ops.a", owned) is None
    inputs = {"sdk_version": "7.2.4", "source_date_epoch": 1700000000, "release": "test", "channel": "dev"}
    out = tmp_path / "out"
    out.mkdir()
    log = io.StringIO()
    wheel = sdk.build_sdk_wheel(out, sdk.LIBRARIES, tree, inputs, log, expansion_owned=owned, family="gfx110X-dgpu",
                                targets=("gfx1100", "gfx1101"))

    audit = json.loads((out / "report.json").read_text())["audit"]
    assert audit["partial"] == {"gfx1101": ["lib/libccl.so.1", "lib/rocblas/5/library/"]}
    assert audit["coverage"]["gfx1100"]["covered"] and not audit["coverage"]["gfx1101"]["covered"]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "_rocm_sdk_libraries/lib/rocblas/5/library/TensileLibrary_gfx1100.dat" in names
        assert not [n for n in names if n.endswith(("gfx942.dat", ".a"))]
        blas = tmp_path / "libblas.so.5"
        blas.write_bytes(zf.read("_rocm_sdk_libraries/lib/libblas.so.5"))
        for member, want in (("bin/ccltool", "$ORIGIN:$ORIGIN/../lib:$ORIGIN/../../_rocm_sdk_core/lib"),
                             ("lib/fft/1.0/fft_helper", "$ORIGIN:$ORIGIN/../..:$ORIGIN/../../../../_rocm_sdk_core/lib")):
            (tmp_path / "elf").write_bytes(zf.read(f"_rocm_sdk_libraries/{member}"))
            assert elf.inspect(tmp_path / "elf").runpath == want, member  # finds the family's libraries, then core's
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert set(audit_file(blas).targets) == {"gfx1100", "gfx1101"}  # the gfx942 code is gone
    assert "— partial" in metadata and "gfx1101: no code in libccl.so.1, rocblas kernel files" in metadata


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "plain"])
@pytest.mark.parametrize("audited", ["crc32", "json"])
def test_a_bundle_changed_between_the_audit_and_the_rewrite_is_refused(lib, tmp_path: Path, fmt: str,
                                                                      audited: str) -> None:
    """The split reuses the audit that chose what to keep: if the file's bundle changed after it, the rewrite
    must not keep bytes nobody audited. A fresh audit knows the stored bytes' CRC-32; one read back from JSON
    does not, and the inflated MD5 prefix is checked again instead."""
    from cairn.audit.bundle import CorruptBundle
    from cairn.audit.model import audit_from_json
    from cairn.audit.split import parse_devices, split_audited

    registry = load_registry()
    path = lib([encode(bundle_for(["gfx1100", "gfx90a"]), fmt)])
    audit = audit_file(path)
    if audited == "json":
        audit = audit_from_json(json.loads(json.dumps(audit.to_json())))
    bundle = audit.bundles[0]
    assert (bundle.crc32 is not None) == (audited == "crc32")
    # a byte of the gfx90a code object, re-compressed into a stream of the same size where the format allows
    plain, _ = inflate(path.read_bytes()[bundle.file_offset : bundle.file_offset + bundle.size])
    changed = bytearray(plain)
    changed[-1] ^= 0xFF
    region = encode(bytes(changed), fmt)
    data = bytearray(path.read_bytes())
    data[bundle.file_offset : bundle.file_offset + len(region)] = region
    path.write_bytes(bytes(data))
    # from JSON, the change is found when inflating: as a different MD5, or a stream that no longer ends in place
    expected = "the stored bundle changed since it was audited" if audited == "crc32" else r"bundle 0 at \+0x0: "
    with pytest.raises(CorruptBundle, match=expected):
        split_audited(path, tmp_path / "out.so", parse_devices("gfx1100", registry), audit, registry)
    assert not (tmp_path / "out.so").exists()
