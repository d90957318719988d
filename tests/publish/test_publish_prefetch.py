"""``cairn publish`` reads and hashes the bundle's files while it starts up (``cairn.publish.prefetch``): what it
read ahead is checked against ``bundle.json`` like anything else, it never reads outside ``files/``, and it stops
at its budget."""

from __future__ import annotations

import json

import pytest

from cairn.errors import CheckFailed
from cairn.matrix.bundle import load_bundle
from cairn.publish import prefetch as prefetch_module
from cairn.publish.blobs import read_blobs
from cairn.publish.prefetch import Prefetch
from cairn.publish.sample import write_sample_bundle


def test_what_was_read_ahead_is_what_read_blobs_gives(tmp_path):
    root = write_sample_bundle(tmp_path / "b", version="7.0.0", families=("gfx90a",))
    bundle = load_bundle(root)
    ahead = read_blobs(bundle, Prefetch(root))
    plain = read_blobs(bundle)
    assert [(b.obj.key, b.obj.read(), b.obj.sha256) for b in ahead] == [(b.obj.key, b.obj.read(), b.obj.sha256) for b in plain]
    # either way a blob is its checked file, never its bytes: what was read ahead is not kept
    assert all(b.obj.path == bundle.file(b.artifact) and not b.obj.data for b in [*ahead, *plain])


def test_a_file_modified_before_it_was_read_ahead_is_refused(tmp_path):
    root = write_sample_bundle(tmp_path / "b", version="7.0.1", families=("gfx90a",))
    wheel = next((root / "files").rglob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(CheckFailed, match="the bundle was modified"):
        read_blobs(load_bundle(root), Prefetch(root))


def test_only_plain_paths_under_files_are_read_ahead(tmp_path):
    root = tmp_path / "b"
    (root / "files" / "ok").mkdir(parents=True)
    (root / "files" / "ok" / "x.whl").write_bytes(b"wheel")
    (tmp_path / "secret").write_bytes(b"not the bundle's")
    artifacts = [{"path": "../secret", "kind": "file"}, {"path": "/etc/hostname", "kind": "file"},
                 {"path": "ok/x.whl", "kind": "wheel"}, {"path": "ok/x.whl.metadata", "kind": "metadata"}, {"path": 3}]
    (root / "bundle.json").write_text(json.dumps({"artifacts": artifacts}))
    ahead = Prefetch(root)
    assert ahead.take("ok/x.whl") == (b"wheel", "ba59926159d2aa256eb8739b8da7e2b574b960e1202c6d624cbe981cef996c91")
    assert ahead.take("../secret") is None and ahead.take("/etc/hostname") is None


def test_reading_ahead_stops_at_its_budget_and_leaves_big_files(tmp_path, monkeypatch):
    root = write_sample_bundle(tmp_path / "b", version="7.0.2", families=("gfx90a", "gfx1030"))
    monkeypatch.setattr(prefetch_module, "THREADS", 1)
    bundle = load_bundle(root)
    wanted = [a for a in bundle.artifacts if a.kind != "metadata"]
    sizes = [(root / "files" / a.path).stat().st_size for a in wanted]
    monkeypatch.setattr(prefetch_module, "BUDGET", sizes[0] + sizes[1])  # room for the first two files, then none
    ahead = Prefetch(root)
    assert [ahead.take(a.path) is not None for a in wanted] == [True, True] + [False] * (len(wanted) - 2)

    monkeypatch.setattr(prefetch_module, "LARGEST", min(sizes) - 1)  # every file is too big to read ahead
    ahead = Prefetch(root)
    assert [ahead.take(a.path) for a in wanted] == [None] * len(wanted)
    assert len(read_blobs(bundle, Prefetch(root))) == len(wanted)  # the rest is read as before


def test_an_unreadable_bundle_json_reads_nothing_ahead(tmp_path):
    (tmp_path / "bundle.json").write_text("{not json")
    assert Prefetch(tmp_path).take("anything") is None
