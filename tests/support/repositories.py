"""Signed repositories and registry images the tests publish for real (fresh keys, ``cairn.publish``, the registry
API), for the tests that read them back: the doctor, the target indexes, cosign."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cairn.matrix.bundle import load_bundle
from cairn.sign.cosign import Registry


def signed_sample_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository cairn publish wrote for gfx90a (``tmp_path/repo``), its root pinned through $CAIRN_TUF_ROOT."""
    from tuf.api.serialization.json import JSONSerializer

    from cairn.matrix.bundle import load_bundle
    from cairn.publish.publisher import publish as publish_repo
    from cairn.publish.sample import write_sample_bundle
    from cairn.remote.backend import FileBackend
    from cairn.sign.keys import init_keys, make_root

    keys = init_keys(tmp_path / "keys")
    root = make_root(keys)
    publish_repo(load_bundle(write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))), FileBackend(tmp_path / "repo"), keys, root)
    (tmp_path / "root.json").write_bytes(root.to_bytes(JSONSerializer(compact=False)))
    monkeypatch.setenv("CAIRN_TUF_ROOT", str(tmp_path / "root.json"))
    monkeypatch.setenv("CAIRN_TUF_CACHE", str(tmp_path / "tuf-cache"))
    return tmp_path / "repo"


def publish_with_fresh_keys(bundle: Path, tmp: Path) -> dict[str, Path]:
    """``bundle`` signed with fresh keys and published to ``tmp/repo`` as ``cairn publish`` does."""
    from tuf.api.serialization.json import JSONSerializer

    from cairn.publish.publisher import publish
    from cairn.remote.backend import FileBackend
    from cairn.sign.keys import init_keys, load_keys, make_root
    from cairn.sign.tuf import load_root

    keyset = init_keys(tmp / "keys")
    (keyset.directory / "root.json").write_bytes(make_root(keyset).to_bytes(JSONSerializer(compact=False)))
    publish(load_bundle(bundle), FileBackend(tmp / "repo"), load_keys(keyset.directory),
            load_root(keyset.directory / "root.json"))
    return {"repo": tmp / "repo", "root": keyset.directory / "root.json", "tmp": tmp}


def push_image(address: str, repo: str, tag: str, content: bytes) -> str:
    """A minimal real OCI image (one layer) pushed through the registry API; returns its manifest digest."""
    reg = Registry(address)
    layer = reg.put_blob(repo, content)
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [layer]}}).encode()
    config_digest = reg.put_blob(repo, config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config), "digest": config_digest},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "size": len(content), "digest": layer}]}).encode()
    reg.put_manifest(repo, tag, manifest)
    return "sha256:" + hashlib.sha256(manifest).hexdigest()

