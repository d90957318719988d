"""The audit on fat binaries written by tests/support/fatbin_writer.py: every format, coverage rules, bad input."""

from __future__ import annotations

import io
import json
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard

from cairn.audit import CorruptBundle, NotElf, audit_file, audit_paths
from cairn.cli import main
from cairn.errors import InputError
from support.fatbin_writer import bundle_for, ccob, code_object, device_id, plain_bundle, section, write_elf

FORMATS = [(v, m) for v in (1, 2, 3) for m in ("zlib", "zstd")]


@pytest.fixture
def lib(tmp_path: Path):
    """Build a shared object around the given bundles; returns its path."""
    counter = iter(range(1000))

    def make(bundles: list[bytes], **kwargs) -> Path:
        return write_elf(tmp_path / f"lib{next(counter)}.so", section(bundles) if bundles else None, **kwargs)

    return make


@pytest.mark.parametrize(("version", "method"), FORMATS)
def test_every_ccob_version_and_method_is_read(lib, version: int, method: str) -> None:
    path = lib([ccob(bundle_for(["gfx1100", "gfx90a:xnack-", "gfx942"]), version=version, method=method)])
    audit = audit_file(path)
    assert audit.kind == "fatbin"
    assert audit.formats == (f"ccob-v{version}+{method}",)
    assert audit.targets == ("gfx1100", "gfx90a:xnack-", "gfx942")
    assert audit.mismatches == ()
    entry = next(e for e in audit.bundles[0].entries if e.target == "gfx90a:xnack-")
    assert entry.code_object is not None
    assert (entry.code_object.processor, entry.code_object.xnack, entry.code_object.sramecc) == ("gfx90a", "off", "any")


@pytest.mark.parametrize(("version", "method"), FORMATS)
def test_mixed_sections_are_walked_past_compressed_bundles(lib, version: int, method: str) -> None:
    bundles = [bundle_for(["gfx1030"]), ccob(bundle_for(["gfx1030", "gfx1100"]), version=version, method=method), bundle_for(["gfx1030", "gfx1100"])]
    audit = audit_file(lib(bundles, wrappers=3))
    assert [b.format for b in audit.bundles] == ["plain", f"ccob-v{version}", "plain"]
    assert [b.offset % 4096 for b in audit.bundles] == [0, 0, 0]
    assert audit.targets == ("gfx1030", "gfx1100")
    assert audit.complete_targets == ("gfx1030",)
    assert audit.notes == ()


def test_a_single_bundle_without_the_target_breaks_coverage(lib) -> None:
    path = lib([bundle_for(["gfx1100", "gfx1151"]), bundle_for(["gfx1100"]), bundle_for(["gfx1100", "gfx1151"])], wrappers=3)
    report = audit_paths([path])
    assert report.coverage("gfx1100").covered
    cov = report.coverage("gfx1151")
    assert not cov.covered
    assert [(g.path, [b.index for b in g.bundles]) for g in cov.gaps] == [(str(path), [1])]
    assert cov.gaps[0].bundles[0].offset == report.binaries[0].bundles[1].offset
    assert "bundles #1@0x" in cov.message()
    assert report.targets_everywhere == ("gfx1100",)
    assert report.targets_somewhere == ("gfx1151",)


def test_generic_and_spirv_entries_cover_their_members(lib) -> None:
    spirv = plain_bundle([("hipv4-spirv64-amd-amdhsa--amdgcnspirv", b"\x03\x02\x23\x07" + bytes(60))])
    report = audit_paths([lib([bundle_for(["gfx11-generic", "gfx90a"]), ccob(bundle_for(["gfx11-generic", "gfx90a"]))]), lib([spirv])])
    gfx1151 = report.coverage("gfx1151")
    assert gfx1151.covered
    assert gfx1151.via == ("gfx11-generic", "spirv")
    assert report.coverage("gfx90a:xnack+").via == ("exact", "spirv")


def test_pinned_features_must_match_the_device(lib) -> None:
    report = audit_paths([lib([bundle_for(["gfx90a:xnack-"])])])
    assert report.coverage("gfx90a").covered  # a bare query accepts either setting
    assert report.coverage("gfx90a:xnack-").covered
    assert not report.coverage("gfx90a:xnack+").covered
    assert not report.coverage("gfx908").covered


def test_family_coverage_lists_each_member(lib) -> None:
    report = audit_paths([lib([bundle_for(["gfx1100", "gfx1101", "gfx1102"])])])
    result = {c.target: c.covered for c in report.family_coverage("gfx110X-all")}
    assert result == {"gfx1100": True, "gfx1101": True, "gfx1102": True, "gfx1103": False}


def test_elf_header_that_contradicts_the_entry_id_is_reported_and_not_counted(lib) -> None:
    liar = plain_bundle([(device_id("gfx1151"), code_object("gfx1100")), (device_id("gfx90a:xnack-"), code_object("gfx90a", xnack=0x300))])
    audit = audit_file(lib([liar]))
    assert len(audit.mismatches) == 2
    assert "ELF header is for gfx1100" in audit.mismatches[0] and "gfx1151" in audit.mismatches[0]
    assert "xnack" in audit.mismatches[1]
    assert audit.targets == ()


def test_magic_as_plain_data_outside_the_section_is_not_device_code(lib) -> None:
    path = lib([], data_string="__CLANG_OFFLOAD_BUNDLE__ CCOB hipv4-amdgcn-amd-amdhsa--gfx1100")
    assert b"__CLANG_OFFLOAD_BUNDLE__" in path.read_bytes()
    audit = audit_file(path)
    assert (audit.kind, audit.bundles, audit.targets) == ("none", (), ())


@pytest.mark.parametrize(
    ("options", "reason"),
    [({"wrapper_magic": b"HIPK"}, "HIPK"), ({"kpack_ref": True}, ".rocm_kpack_ref")],
)
def test_kpack_binaries_say_where_the_code_is(lib, options: dict, reason: str) -> None:
    path = lib([bytes(4096)], **options)
    report = audit_paths([path])
    (audit,) = report.binaries
    assert audit.kind == "kpack"
    assert "external kpack" in audit.notes[0] and reason in audit.notes[0]
    cov = report.coverage("gfx1100")
    assert not cov.covered and cov.gaps[0].reason == "kpack"


def _corrupt(good: bytes, at: int, value: bytes) -> bytes:
    return good[:at] + value + good[at + len(value):]


_PLAIN = bundle_for(["gfx1100"])
_V3 = ccob(bundle_for(["gfx1100"]))


@pytest.mark.parametrize(
    ("bundle", "message"),
    [
        (_PLAIN[:40], "entry count 2 does not fit in 40 bytes"),
        (_PLAIN[:4096 + 100], "ends past the bundle"),
        (_corrupt(_PLAIN, 24, struct.pack("<Q", 10**9)), "entry count 1000000000"),
        (_corrupt(_PLAIN, 32 + 24 + 29 + 8, struct.pack("<Q", 10**6)), "ends past the bundle"),
        (_corrupt(_PLAIN, 32 + 16, struct.pack("<Q", 10**6)), "ID length"),
        (_corrupt(_V3, 4, struct.pack("<H", 9)), "CCOB version 9"),
        (_corrupt(_V3, 6, struct.pack("<H", 5)), "compression method 5"),
        (_corrupt(_V3, 8, struct.pack("<Q", 10**9)), "total size"),
        (_corrupt(_V3, 16, struct.pack("<Q", 10**6)), "header says 1000000"),
        (ccob(_PLAIN, hash_value=b"\x01" * 8), "hash mismatch"),
        (_corrupt(_V3, 40, b"\xff\xff\xff\xff"), "zstd"),
        (ccob(b"not a bundle at all, just text padding to 32 bytes"), "not a __CLANG_OFFLOAD_BUNDLE__"),
        (b"\x13\x37" + bytes(100), "no bundle magic"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_corrupt_bundles_are_clear_errors_naming_file_and_offset(lib, bundle: bytes, message: str) -> None:
    path = lib([bundle_for(["gfx1100"]), bundle])
    with pytest.raises(CorruptBundle) as caught:
        audit_file(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: bundle 1 at file offset 0x")
    assert message in text


def test_non_elf_input_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "x.so").write_bytes(b"hello" * 100)
    with pytest.raises(NotElf, match="not an ELF file"):
        audit_file(tmp_path / "x.so")
    with pytest.raises(InputError, match="no such file"):
        audit_paths([tmp_path / "missing"])


# -- containers -----------------------------------------------------------------------------------------
def _two_libs(lib) -> tuple[Path, Path]:
    return lib([bundle_for(["gfx1100", "gfx942"])]), lib([ccob(bundle_for(["gfx1100"]), version=2)])


def test_wheel_members_are_audited(lib, tmp_path: Path) -> None:
    a, b = _two_libs(lib)
    wheel = tmp_path / "pkg-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(a, "pkg/_a.so")
        archive.write(b, "pkg/_b.so")
        archive.writestr("pkg/__init__.py", "")
    report = audit_paths([wheel])
    assert [x.path for x in report.binaries] == [f"{wheel}!pkg/_a.so", f"{wheel}!pkg/_b.so"]
    assert report.targets_everywhere == ("gfx1100",)
    assert not report.coverage("gfx942").covered


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:xz", "zst"])
def test_tarballs_are_streamed(lib, tmp_path: Path, mode: str) -> None:
    a, b = _two_libs(lib)
    tarball = tmp_path / "tree.tar"
    with tarfile.open(tarball, "w" if mode == "zst" else mode) as archive:
        archive.add(a, "usr/lib/liba.so")
        archive.add(b, "usr/lib/libb.so")
    if mode == "zst":
        tarball.write_bytes(zstandard.ZstdCompressor().compress(tarball.read_bytes()))
    report = audit_paths([tarball])
    assert [x.path for x in report.binaries] == [f"{tarball}!usr/lib/liba.so", f"{tarball}!usr/lib/libb.so"]
    assert report.elf_files == 2


def test_directory_tree_skips_symlinks_and_non_elf(lib, tmp_path: Path) -> None:
    a, _b = _two_libs(lib)
    tree = tmp_path / "tree"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "liba.so.1.0").write_bytes(a.read_bytes())
    (tree / "lib" / "liba.so.1").symlink_to("liba.so.1.0")
    (tree / "lib" / "README").write_text("__CLANG_OFFLOAD_BUNDLE__")
    report = audit_paths([tree])
    assert [x.path for x in report.binaries] == [str(tree / "lib" / "liba.so.1.0")]


def _oci_blob(root: Path, data: bytes) -> dict:
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _layer(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_oci_layout_applies_layers_and_whiteouts(lib, tmp_path: Path) -> None:
    a, b = _two_libs(lib)
    root = tmp_path / "image"
    root.mkdir()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    layers = [
        _oci_blob(root, _layer({"opt/rocm/lib/liba.so": a.read_bytes(), "opt/rocm/lib/libold.so": a.read_bytes()})),
        _oci_blob(root, _layer({"opt/rocm/lib/liba.so": b.read_bytes(), "opt/rocm/lib/.wh.libold.so": b""})),
    ]
    manifest = _oci_blob(root, json.dumps({"schemaVersion": 2, "config": {}, "layers": layers}).encode())
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    report = audit_paths([root])
    (only,) = report.binaries
    assert only.path.endswith(":/opt/rocm/lib/liba.so")
    assert only.formats == ("ccob-v2+zstd",)  # the later layer's file


# -- command line ---------------------------------------------------------------------------------------
def test_cli_exit_codes_and_json(lib, capsys) -> None:
    path = lib([bundle_for(["gfx1100"]), bundle_for(["gfx1100", "gfx1151"])], wrappers=2)
    assert main(["audit", str(path), "--target", "gfx1100"]) == 0
    assert "gfx1100" in capsys.readouterr().out
    assert main(["audit", str(path), "--target", "gfx1151", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["covered"] is False
    assert doc["coverage"][0]["gaps"] == [{"path": str(path), "reason": "missing", "bundles": [{"index": 0, "offset": 0}]}]
    assert doc["binaries"][0]["complete_targets"] == ["gfx1100"]
    assert main(["audit", str(path), "--target", "gfx9999"]) == 2
    assert "unknown gfx target 'gfx9999'" in capsys.readouterr().err
    assert main(["audit", str(path), "--family", "gfx110X-all"]) == 1


def test_cli_corrupt_input_is_one_line_exit_2(lib, capsys) -> None:
    path = lib([_PLAIN[:40]])
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "file offset 0x" in err


def test_oci_layout_with_missing_or_malformed_blob_is_an_input_error(tmp_path: Path) -> None:
    root = tmp_path / "image"
    root.mkdir()
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (root / "index.json").write_text(json.dumps({"manifests": [{"digest": "sha256:" + "ab" * 32}]}))
    with pytest.raises(InputError, match="is missing from the image layout"):
        audit_paths([root])
    (root / "index.json").write_text(json.dumps({"manifests": [{"digest": "sha256:../../../etc/passwd"}]}))
    with pytest.raises(InputError, match="malformed blob digest"):
        audit_paths([root])
