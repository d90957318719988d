"""``--dev-keys`` never signs with, nor writes over, another key set: with ``$CAIRN_KEYS`` naming the release keys
(whole, or lacking its ``root.json``), a dev publish signs with ``<store>/keys/dev`` and leaves that directory
byte-identical. Each case runs ``cairn publish`` as a user would, on a real sample bundle and real keys.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from cairn.publish.sample import write_sample_bundle
from support import cairn
from support.cli import one_line


def _snapshot(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``directory``: its sha256 and mode (a rewrite with the same bytes still changes keys)."""
    return {str(p.relative_to(directory)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def release_keys(tmp_path: Path) -> Path:
    keys = tmp_path / "release-keys"
    proc = cairn("keys", "init", "--dir", str(keys), "--root-out", str(keys / "root.json"))
    assert proc.returncode == 0, proc.stderr
    return keys


@pytest.mark.parametrize("lacks_root", [False, True], ids=["whole", "without-root.json"])
def test_dev_keys_leave_cairn_keys_byte_identical(tmp_path: Path, release_keys: Path, lacks_root: bool) -> None:
    if lacks_root:
        (release_keys / "root.json").unlink()
    before = _snapshot(release_keys)
    stamp = {p: p.stat().st_mtime_ns for p in release_keys.iterdir()}
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    store, repo = tmp_path / "store", tmp_path / "repo"
    proc = cairn("publish", str(bundle), "--dev-keys", "--to", repo.as_uri(), "--store", str(store), "--json", extra_env={"CAIRN_KEYS": str(release_keys)})
    assert proc.returncode == 0, proc.stderr
    assert "DEVELOPMENT signing keys in " + str(store / "keys" / "dev") in proc.stderr
    assert _snapshot(release_keys) == before and {p: p.stat().st_mtime_ns for p in release_keys.iterdir()} == stamp

    # what it signed is the dev keys' work: the dev root verifies it, the release root does not
    dev_root = store / "keys" / "dev" / "root.json"
    published_root = json.loads((repo / "metadata" / "1.root.json").read_text())
    assert published_root == json.loads(dev_root.read_text())
    release_public = json.loads((release_keys / "public.json").read_text())
    assert not {k["keyid"] for k in release_public.values()} & set(published_root["signed"]["keys"])
    assert cairn("verify", str(repo), "--root", str(dev_root)).returncode == 0
    if not lacks_root:
        refused = cairn("verify", str(repo), "--root", str(release_keys / "root.json"))
        assert refused.returncode != 0 and "Traceback" not in refused.stderr


def test_dev_keys_never_overwrite_part_of_a_key_set(tmp_path: Path, release_keys: Path) -> None:
    """The store's own dev directory holding keys without a root.json (copied there by hand, say) is refused in
    one line, not replaced by fresh keys."""
    dev = tmp_path / "store" / "keys" / "dev"
    dev.parent.mkdir(parents=True)
    os.rename(release_keys, dev)
    (dev / "root.json").unlink()
    before = _snapshot(dev)
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    line = one_line(cairn("publish", str(bundle), "--dev-keys", "--to", (tmp_path / "repo").as_uri(), "--store", str(tmp_path / "store")), code=2)
    assert f"{dev}: holds part of a key set" in line and "but no root.json" in line and "never overwrite" in line, line
    assert _snapshot(dev) == before and not (tmp_path / "repo").exists()


def test_dev_keys_never_overwrite_a_lone_root(tmp_path: Path, release_keys: Path) -> None:
    """A dev directory holding only a root.json (its keys moved elsewhere) keeps it: refused, not replaced (here by
    the key check publish makes before its first write, which finds no key set there)."""
    dev = tmp_path / "store" / "keys" / "dev"
    dev.mkdir(parents=True)
    (dev / "root.json").write_bytes((release_keys / "root.json").read_bytes())
    before = _snapshot(dev)
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    line = one_line(cairn("publish", str(bundle), "--dev-keys", "--to", (tmp_path / "repo").as_uri(), "--store", str(tmp_path / "store")), code=2)
    assert f"{dev}: holds part of a key set (root.json) but no public.json" in line or f"no key set in {dev}" in line, line
    assert _snapshot(dev) == before and not (tmp_path / "repo").exists()


def test_dev_keys_with_keys_is_refused(tmp_path: Path, release_keys: Path) -> None:
    before = _snapshot(release_keys)
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    line = one_line(cairn("publish", str(bundle), "--dev-keys", "--keys", str(release_keys), "--to", (tmp_path / "repo").as_uri(), "--store", str(tmp_path / "store")))
    assert "--dev-keys and --keys" in line and "two key sets" in line, line
    assert _snapshot(release_keys) == before and not (tmp_path / "repo").exists()
