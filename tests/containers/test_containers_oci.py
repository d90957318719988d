"""Layer normalization: order, times, owners and volatile files never change a DiffID; it is idempotent."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from cairn.formats.oci import Layout, gzip_file, normalize_layer


def _tar(path: Path, entries: list[tuple[str, bytes | None]], mtime: int, uid: int = 0, uname: str = "") -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.uname = mtime, uid, uname
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))


def test_order_times_names_and_volatile_files_do_not_matter(tmp_path: Path) -> None:
    epoch = 1700000000
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    _tar(a, [("opt", None), ("opt/x", b"x"), ("opt/y", b"y"), ("var/log/apt.log", b"1")], mtime=epoch + 50)
    _tar(b, [("./opt/y", b"y"), ("./opt", None), ("./opt/x", b"x"), ("var/log/other.log", b"2")],
         mtime=epoch + 999, uname="builder")
    assert normalize_layer(a, tmp_path / "na", epoch) == normalize_layer(b, tmp_path / "nb", epoch)
    with tarfile.open(tmp_path / "na") as tar:
        assert tar.getnames() == ["opt", "opt/x", "opt/y"]
        assert {m.mtime for m in tar.getmembers()} == {epoch}


def test_normalizing_twice_is_the_identity_and_gzip_is_fixed(tmp_path: Path) -> None:
    src = tmp_path / "src.tar"
    _tar(src, [("b", b"2" * 5000), ("a", b"1")], mtime=1)
    first = normalize_layer(src, tmp_path / "n1", 1700000000)
    assert normalize_layer(tmp_path / "n1", tmp_path / "n2", 1700000000) == first
    assert gzip_file(tmp_path / "n1", tmp_path / "g1") == gzip_file(tmp_path / "n2", tmp_path / "g2")
    assert (tmp_path / "g1").read_bytes()[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def test_layout_digest_depends_only_on_content(tmp_path: Path) -> None:
    src = tmp_path / "src.tar"
    _tar(src, [("f", b"data")], mtime=5)
    digests = []
    for name in ("one", "two"):
        layout = Layout(tmp_path / name)
        (tmp_path / f"s-{name}").mkdir()
        layer = layout.add_layer_tar(src, 1700000000, tmp_path / f"s-{name}")
        digests.append(layout.write_image({"rootfs": {"diff_ids": [layer.diff_id]}}, [layer], {"k": "v"}, ["t"])[0])
    assert digests[0] == digests[1]


def test_a_layer_seen_before_is_compressed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sibling images (every target of a family) install the same files at other times: normalized, they
    are one layer, taken from the store's layer cache instead of being compressed again."""
    from cairn.formats import oci
    cache = tmp_path / "layers"
    layers = []
    for n, mtime in enumerate((1800000000, 1900000000)):  # installed later than the epoch: clamped to it
        src = tmp_path / f"src{n}.tar"
        _tar(src, [("f", b"data" * 1000)], mtime=mtime)
        (tmp_path / f"s{n}").mkdir()
        layers.append(Layout(tmp_path / f"l{n}").add_layer_tar(src, 1700000000, tmp_path / f"s{n}", cache))
        monkeypatch.setattr(oci, "gzip_file", lambda *a: pytest.fail("compressed a layer the cache holds"))
    assert layers[0] == layers[1]
    blob = (tmp_path / "l1" / "blobs" / "sha256" / layers[1].digest.split(":")[1]).read_bytes()
    assert hashlib.sha256(blob).hexdigest() == layers[1].digest.split(":")[1]
    (cache / f"{layers[0].diff_id.split(':')[1]}.json").write_text("{not json")  # damaged: compressed again
    monkeypatch.undo()
    (tmp_path / "s2").mkdir()
    assert Layout(tmp_path / "l2").add_layer_tar(tmp_path / "src0.tar", 1700000000, tmp_path / "s2", cache) == layers[0]


def test_diff_names_layer_and_file(tmp_path: Path) -> None:
    from cairn.containers.diff import diff_layouts, summary_line

    layouts = []
    for name, content in (("a", b"one"), ("b", b"two")):
        src = tmp_path / f"{name}.tar"
        _tar(src, [("opt", None), ("opt/same", b"s"), ("opt/changed", content)], mtime=5)
        layout = Layout(tmp_path / name)
        (tmp_path / f"s-{name}").mkdir()
        layer = layout.add_layer_tar(src, 1700000000, tmp_path / f"s-{name}")
        layout.write_image({"rootfs": {"diff_ids": [layer.diff_id]}}, [layer], {}, ["t"])
        layouts.append(tmp_path / name)
    report = diff_layouts(*layouts)
    assert not report["identical"]
    line = summary_line(report)
    assert line.startswith("layer 0") and "opt/changed differs in sha256" in line
