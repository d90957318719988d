"""Layer scans: the static gate reads a layer once per digest, and a cached scan gives the gate's exact answer."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

import cairn.audit.layers as layers
from cairn.audit.imagefs import ImageFS
from cairn.gates.static import static_gate
from support.fatbin_writer import bundle_for, ccob, section, write_elf

TARGET = "gfx1100"


def _blob(root: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _layer(entries: list[tuple[str, bytes | str | None]]) -> bytes:
    """A gzip'd tar: bytes → regular file, "->x" → symlink to x, "=>x" → hard link to x, None → directory."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            elif isinstance(data, str):
                info.type = tarfile.SYMTYPE if data.startswith("->") else tarfile.LNKTYPE
                info.linkname = data[2:]
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _image(root: Path, layer_blobs: list[bytes]) -> Path:
    root.mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    config = _blob(root, json.dumps({"config": {"Env": ["LD_LIBRARY_PATH=/opt/app/lib"]}}).encode())
    manifest = _blob(root, json.dumps({"schemaVersion": 2, "config": config,
                                       "layers": [_blob(root, data) for data in layer_blobs]}).encode())
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    return root


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Two images on one base layer: A covers gfx1100 and resolves everything; B's library needs a missing soname."""
    work = tmp_path_factory.mktemp("layer-scans")
    plain = write_elf(work / "libplain.so", None)
    (work / "app.c").write_text("int app(void) { return 1; }\n")
    app = work / "libapp.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", app, work / "app.c", "-Wl,--no-as-needed", "-lm"], check=True)
    device = write_elf(work / "libdev.so", section([ccob(bundle_for([TARGET, "gfx942"]))]))
    other = write_elf(work / "libother.so", section([bundle_for(["gfx942"])]))
    dirs: list[tuple[str, bytes | str | None]] = [(d, None) for d in ("etc", "etc/ld.so.conf.d", "lib", "lib/x86_64-linux-gnu",
                                                                      "opt", "opt/rocm", "opt/rocm/lib")]
    base = _layer([*dirs, ("etc/ld.so.conf.d/rocm.conf", b"/opt/rocm/lib\n"),
                   ("lib/x86_64-linux-gnu/libm.so.6", plain.read_bytes()),
                   ("lib/x86_64-linux-gnu/libc.so.6", plain.read_bytes()), ("lib64", "->lib/x86_64-linux-gnu"),
                   ("opt/rocm/lib/libdev.so", device.read_bytes()), ("opt/rocm/lib/libold.so", other.read_bytes())])
    top_a = _layer([("opt/app", None), ("opt/app/lib", None), ("opt/rocm/lib/.wh.libold.so", b""), ("opt/app/lib/libapp.so", app.read_bytes()),
                    ("opt/app/lib/libapp-copy.so", "=>opt/app/lib/libapp.so")])
    broken = bytearray(app.read_bytes())
    at = broken.find(b"libm.so.6")
    broken[at:at + 9] = b"libz.so.9"  # a DT_NEEDED nothing provides
    top_b = _layer([("opt/app", None), ("opt/app/lib", None), ("opt/app/lib/libapp.so", bytes(broken))])
    return _image(work / "a", [base, top_a]), _image(work / "b", [base, top_b]), _image(work / "c", [base])


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The blobs actually read (by file name), in order."""
    reads: list[str] = []
    real = layers.scan_blob

    def counting(blob: Path, audit: layers.Auditor) -> layers.LayerScan:
        reads.append(blob.name)
        return real(blob, audit)

    monkeypatch.setattr(layers, "scan_blob", counting)
    return reads


def _layers_of(image: Path) -> list[str]:
    index = json.loads((image / "index.json").read_text())
    manifest = json.loads((image / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_bytes())
    return [layer["digest"][7:] for layer in manifest["layers"]]


def _ours(result: tuple[str, str, dict]) -> tuple[str, str, dict]:
    """The result without the layout path the audit shows (each image and copy has its own)."""
    status, reason, evidence = result
    return status, reason, json.loads(json.dumps(evidence).replace("/a@", "/X@").replace("/b@", "/X@"))


def test_a_shared_layer_is_read_once_and_the_gate_answers_as_without_the_cache(images, scanned, tmp_path: Path) -> None:
    a, b, _ = images
    cache = tmp_path / "layer-scans"
    uncached = [static_gate(image, TARGET, "7.2.4") for image in (a, b)]
    assert len(scanned) == 4  # no cache: every layer of both images
    scanned.clear()

    cached = [static_gate(image, TARGET, "7.2.4", cache=cache) for image in (a, b)]
    base, top_a = _layers_of(a)
    assert scanned == [base, top_a, _layers_of(b)[1]]  # B's base came from A's scan
    assert [_ours(r) for r in cached] == [_ours(r) for r in uncached]
    assert cached[0][0] == "passed", cached[0][1]
    assert cached[0][1].startswith(f"{TARGET}: covered by all 1 binaries")  # libold.so (gfx942 only) is whited out
    assert cached[1][0] == "failed"
    assert "no compatible code object in " in cached[1][1] and cached[1][1].endswith(
        ":/opt/rocm/lib/libold.so (bundles #0@0x0); /opt/app/lib/libapp.so needs libz.so.9: not found in the image")

    scanned.clear()
    again = [static_gate(image, TARGET, "7.2.4", cache=cache) for image in (a, b)]
    assert scanned == [] and again == cached


def test_the_filesystem_replayed_from_scans_keeps_links_whiteouts_and_texts(images, tmp_path: Path) -> None:
    a, _, _ = images
    index = json.loads((a / "index.json").read_text())
    manifest = json.loads((a / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_bytes())
    fresh = ImageFS.from_layout(a, manifest)
    cached = ImageFS.from_layout(a, manifest, tmp_path / "scans")
    replayed = ImageFS.from_layout(a, manifest, tmp_path / "scans")  # from the cache files
    for fs in (fresh, cached, replayed):
        assert "/opt/rocm/lib/libold.so" not in fs.nodes
        assert fs.resolve("/lib64/libm.so.6") == "/lib/x86_64-linux-gnu/libm.so.6"
        assert fs.nodes["/opt/app/lib/libapp-copy.so"].elf == fs.nodes["/opt/app/lib/libapp.so"].elf
        assert fs.nodes["/opt/app/lib/libapp.so"].elf.needed == ("libm.so.6", "libc.so.6")  # type: ignore[union-attr]
        assert fs.texts == {"/etc/ld.so.conf.d/rocm.conf": "/opt/rocm/lib\n"}
    assert replayed.nodes == fresh.nodes and replayed.texts == fresh.texts


def test_an_unreadable_cached_scan_is_made_again_and_never_used(images, scanned, tmp_path: Path) -> None:
    _, _, c = images
    cache = tmp_path / "layer-scans"
    first = static_gate(c, TARGET, "7.2.4", cache=cache)
    (kept,) = cache.glob("*.json.gz")
    kept.write_bytes(gzip.compress(b'{"schema": 1, "members": [["x", "file"'))  # cut short, as by a full disk
    scanned.clear()
    assert static_gate(c, TARGET, "7.2.4", cache=cache) == first
    assert len(scanned) == 1
    assert json.loads(gzip.decompress(kept.read_bytes()))["schema"] == layers.SCHEMA  # written again, whole


def test_a_scan_is_kept_per_version_of_the_code_that_made_it(images, scanned, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, c = images
    cache = tmp_path / "layer-scans"
    static_gate(c, TARGET, "7.2.4", cache=cache)
    before = layers.scanner_digest()[:16]
    monkeypatch.setattr(layers, "scanner_digest", lambda: "f" * 64)  # the audit's parser changed
    scanned.clear()
    static_gate(c, TARGET, "7.2.4", cache=cache)
    assert len(scanned) == 1
    assert sorted(p.name.split(".")[1] for p in cache.glob("*.json.gz")) == sorted([before, "f" * 16])


def test_gates_that_start_together_scan_a_shared_layer_once(images, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a target's runtime image is built, its gates start at the same moment and read the same layers: the
    first to reach a layer scans it, the others wait for that scan instead of making their own."""
    a, b, _ = images
    alone = [static_gate(image, TARGET, "7.2.4") for image in (a, b)]
    reads: list[str] = []
    real = layers.scan_blob

    def slow(blob: Path, audit: layers.Auditor) -> layers.LayerScan:
        reads.append(blob.name)
        time.sleep(0.5)  # a big layer: long enough for the other gate to reach the same one meanwhile
        return real(blob, audit)

    monkeypatch.setattr(layers, "scan_blob", slow)
    cache = tmp_path / "layer-scans"
    start = threading.Barrier(2)
    answers: dict[Path, tuple[str, str, dict]] = {}

    def gate(image: Path) -> None:
        start.wait()
        answers[image] = static_gate(image, TARGET, "7.2.4", cache=cache)

    threads = [threading.Thread(target=gate, args=(image,)) for image in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    base = _layers_of(a)[0]
    assert reads.count(base) == 1, reads
    assert sorted(reads) == sorted([base, _layers_of(a)[1], _layers_of(b)[1]])
    assert [_ours(answers[image]) for image in (a, b)] == [_ours(r) for r in alone]
