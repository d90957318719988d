"""The directory backend answers what the shared cache asks exactly as the S3 one does (``cairn.remote.backend``):
an immutable key is written once — a second write of other bytes is refused, of the same bytes is a no-op, and of
many machines writing one key at once exactly one wins; a bounded download stops past its bound leaving nothing.
A directory several machines share is also a place an attacker can write: a symbolic link planted there is never
followed out of it, for reading, writing or deleting, and a FIFO is never waited on.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from pathlib import Path

import pytest

from cairn.errors import CairnError
from cairn.remote.backend import FileBackend, ObjectTooLarge, RefusedOverwrite, open_backend
from support.s3 import point_at
from support.servers import moto_s3

BUCKET = "cairn-parity"


@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request, tmp_path, monkeypatch):
    """A fresh repository: a directory (file:// URL), or a prefix of a moto bucket."""
    if request.param == "directory":
        (tmp_path / "repo").mkdir()
        yield open_backend((tmp_path / "repo").as_uri())
        return
    with moto_s3(BUCKET) as server:
        point_at(monkeypatch, server["endpoint"], CAIRN_S3_RETRY_SECONDS="5")
        yield open_backend(f"s3://{BUCKET}/parity-{uuid.uuid4().hex[:8]}")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_immutable_key_is_written_once(backend, tmp_path) -> None:
    assert backend.put("ac/k.json", b"first", content_type="application/json", immutable=True)
    assert not backend.put("ac/k.json", b"first", content_type="application/json", immutable=True)  # a re-run
    with pytest.raises(RefusedOverwrite):
        backend.put("ac/k.json", b"second", content_type="application/json", immutable=True)
    assert backend.get("ac/k.json") == b"first"
    source = tmp_path / "archive"
    source.write_bytes(b"tree bytes")
    assert backend.put_file("trees/t.tar.zst", source, content_type="application/zstd", immutable=True, sha256=_sha(b"tree bytes"))
    assert not backend.put_file("trees/t.tar.zst", source, content_type="application/zstd", immutable=True, sha256=_sha(b"tree bytes"))
    source.unlink()  # the cache's scratch file goes: the object stays
    other = tmp_path / "other"
    other.write_bytes(b"other bytes")
    with pytest.raises(RefusedOverwrite):
        backend.put_file("trees/t.tar.zst", other, content_type="application/zstd", immutable=True, sha256=_sha(b"other bytes"))
    assert backend.get("trees/t.tar.zst") == b"tree bytes"
    assert backend.exists("trees/t.tar.zst") and not backend.exists("trees/absent") and backend.get("trees/absent") is None
    backend.delete("trees/t.tar.zst")
    backend.delete("trees/t.tar.zst")  # gone already: no error, as S3
    assert not backend.exists("trees/t.tar.zst")


def test_of_machines_writing_one_key_at_once_exactly_one_wins(backend) -> None:
    """What keeps one record per action key: the write that finds the key taken is refused, never replaces it."""
    start, results = threading.Barrier(6), {}

    def write(n: int) -> None:
        start.wait()
        try:
            results[n] = backend.put("ac/race.json", f"record {n}".encode(), content_type="application/json", immutable=True)
        except RefusedOverwrite:
            results[n] = "refused"

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [n for n, result in results.items() if result is True]
    assert len(winners) == 1 and sorted(results.values(), key=str).count("refused") == 5, results
    assert backend.get("ac/race.json") == f"record {winners[0]}".encode()


def test_a_bounded_download_stops_past_its_bound_and_leaves_nothing(backend, tmp_path) -> None:
    backend.put("trees/big", b"x" * 5000, content_type="application/zstd", immutable=True)
    dest = tmp_path / "dest"
    assert backend.get_file("trees/big", dest, max_bytes=5000) and dest.read_bytes() == b"x" * 5000
    with pytest.raises(ObjectTooLarge, match="not read further"):
        backend.get_file("trees/big", dest, max_bytes=4999)
    assert dest.stat().st_size == 0
    dest.write_bytes(b"stale")
    assert not backend.get_file("trees/absent", dest) and dest.stat().st_size == 0


# -- what only a directory can hold ------------------------------------------------------------------------------
@pytest.fixture
def shared(tmp_path) -> tuple[FileBackend, Path]:
    """A cache directory, and a directory outside it holding a file an attacker would like read, written or deleted."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("not the cache's\n")
    backend = open_backend((tmp_path / "repo").as_uri())
    assert isinstance(backend, FileBackend)
    return backend, tmp_path / "outside"


def test_a_directory_link_planted_in_the_cache_is_never_followed(shared) -> None:
    backend, outside = shared
    os.symlink(outside, backend.root / "blobs")
    assert backend.get("blobs/secret") is None and not backend.exists("blobs/secret")
    with pytest.raises(CairnError, match="is a symbolic link or a file, not a directory"):
        backend.put("blobs/new.zst", b"data", content_type="application/zstd", immutable=True)
    backend.delete("blobs/secret")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]  # nothing written there, nothing deleted


def test_a_record_that_is_a_link_or_a_fifo_is_refused_in_one_line_never_followed(shared) -> None:
    backend, outside = shared
    (backend.root / "ac").mkdir()
    os.symlink(outside / "secret", backend.root / "ac" / "k.json")
    with pytest.raises(CairnError, match="symbolic link — refusing to follow it"):
        backend.get("ac/k.json")
    backend.delete("ac/k.json")  # the link goes, never what it names
    assert not os.path.lexists(backend.root / "ac" / "k.json") and (outside / "secret").read_text() == "not the cache's\n"
    os.mkfifo(backend.root / "ac" / "fifo.json")
    with pytest.raises(CairnError, match="is not a regular file"):
        backend.get("ac/fifo.json")  # would block forever if opened as a file is


def test_a_key_cannot_name_a_place_outside_the_directory(shared) -> None:
    backend, _outside = shared
    for key in ("../outside/secret", "/etc/passwd", "ac//k"):
        with pytest.raises(CairnError, match="refusing object key"):
            backend.get(key)
