"""Tampering any byte of any published object makes ``cairn verify`` fail and name that object."""

from __future__ import annotations

import random

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CheckFailed
from cairn.matrix.bundle import load_bundle
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.keys import init_keys, make_root
from cairn.sign.verify import verify_repository


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    base = tmp_path_factory.mktemp("tamper")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    publish(load_bundle(write_sample_bundle(base / "bundle", families=("gfx90a",))), FileBackend(base / "repo"), keys, root)
    return base / "repo", root.to_bytes(JSONSerializer(compact=False))


def test_every_object_is_covered(repo, tmp_path):
    path, root = repo
    report = verify_repository(str(path), root, tmp_path / "cache")
    objects = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    metadata = {o for o in objects if o.startswith("metadata/")}
    assert set(objects) - metadata == set(report.checked)


def test_flipping_a_byte_anywhere_fails_naming_the_object(repo, tmp_path):
    path, root = repo
    rng = random.Random(6)
    objects = sorted(p for p in path.rglob("*") if p.is_file())
    assert len(objects) > 40
    for n, obj in enumerate(objects):
        original = obj.read_bytes()
        data = bytearray(original)
        at = rng.randrange(len(data))
        data[at] ^= 0x01 << rng.randrange(8)
        obj.write_bytes(bytes(data))
        try:
            with pytest.raises(CheckFailed) as info:
                verify_repository(str(path), root, tmp_path / f"cache{n}")
            rel = obj.relative_to(path).as_posix()
            message = str(info.value)
            # an artifact's names are hard links to one file (its plain and content-addressed names, and the
            # bundle's file): a byte flipped in place is flipped under each of them, and verify may name any
            names = [rel, *(p.relative_to(path).as_posix() for p in objects if p != obj and p.samefile(obj))]
            named = any(n in message for n in names) or (rel.startswith("metadata/") and rel.split("/")[-1].split(".")[-2] in message)
            assert named, f"tampering {rel} at byte {at}: {message}"
        finally:
            obj.write_bytes(original)
    verify_repository(str(path), root, tmp_path / "final")
