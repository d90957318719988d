"""Keys over time: ``cairn keys rotate-root`` makes a root python-tuf's client follows from the old one, and
``cairn refresh`` renews a timestamp the client otherwise refuses once it has expired.

The client is python-tuf's own ``ngclient.Updater`` (with Cairn's fetcher only to read ``file://``), bootstrapped
from the root the key set had *before* the rotation. Time passes in two ways, without sleeping: a client whose
clock is frozen a day and an hour ahead (its ``TrustedMetadataSet`` reads the time once, at construction), and
metadata written with an expiry already past (``refresh(now=…)`` in the past), read by ``cairn verify`` at the real time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import types
from pathlib import Path

import pytest
from tuf.api import exceptions as tuf_errors
from tuf.api.metadata import Metadata, Root
from tuf.api.serialization.json import JSONSerializer
from tuf.ngclient import Updater
from tuf.ngclient._internal import trusted_metadata_set

from cairn.cli import main
from cairn.errors import CairnError, CheckFailed
from cairn.matrix.bundle import load_bundle
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.keys import init_keys, load_keys, make_root, rotate_root
from cairn.sign.refresh import refresh
from cairn.sign.verify import AnyFetcher
from support import cairn

UTC = dt.UTC


def _published(base: Path) -> tuple[Path, Path, bytes]:
    """A key set (``root.json`` version 1 in it) and a repository published with it; and the v1 root's bytes."""
    keys = init_keys(base / "keys")
    root = make_root(keys)
    root_bytes = root.to_bytes(JSONSerializer(compact=False))
    (base / "keys" / "root.json").write_bytes(root_bytes)
    publish(load_bundle(write_sample_bundle(base / "bundle", families=("gfx90a",))), FileBackend(base / "repo"), keys, root)
    return base / "keys", base / "repo", root_bytes


@pytest.fixture(scope="module")
def rotated(tmp_path_factory) -> tuple[Path, Path, bytes]:
    """The repository after ``cairn keys rotate-root --repo``: key set at root version 2, repository serving it."""
    base = tmp_path_factory.mktemp("rotated")
    keys, repo, old_root = _published(base)
    assert main(["keys", "rotate-root", "--dir", str(keys), "--repo", str(repo)]) == 0
    return keys, repo, old_root


def _client(repo: Path, root: bytes, cache: Path) -> Updater:
    (cache / "targets").mkdir(parents=True, exist_ok=True)
    base = repo.as_uri() + "/"
    updater = Updater(str(cache), base + "metadata/", str(cache / "targets"), base, fetcher=AnyFetcher(), bootstrap=root)
    updater.refresh()
    return updater


def _signed(path: Path) -> dict:
    return json.loads(path.read_bytes())["signed"]


def _frozen_at(monkeypatch: pytest.MonkeyPatch, when: dt.datetime) -> None:
    """The TUF client's clock (its only reading of the time) set to ``when``."""
    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return when.astimezone(tz) if tz else when.replace(tzinfo=None)

    monkeypatch.setattr(trusted_metadata_set, "datetime", types.SimpleNamespace(datetime=Frozen, timezone=dt.timezone))


def test_the_client_bootstrapped_from_the_old_root_follows_the_rotation_and_verifies(rotated, tmp_path) -> None:
    keys, repo, old_root = rotated
    assert _signed(repo / "metadata" / "2.root.json")["version"] == 2
    assert (repo / "metadata" / "root.json").read_bytes() == (keys / "root.json").read_bytes()
    client = _client(repo, old_root, tmp_path / "client")
    trusted = _signed(tmp_path / "client" / "root.json")
    assert trusted["version"] == 2
    old_ids = set(json.loads(old_root)["signed"]["roles"]["root"]["keyids"])
    assert not old_ids & set(trusted["roles"]["root"]["keyids"])  # the root keys were replaced …
    public = json.loads((keys / "public.json").read_bytes())
    assert set(trusted["roles"]["root"]["keyids"]) == {public[f"root-{n}"]["keyid"] for n in (1, 2, 3)}
    assert trusted["roles"]["timestamp"] == json.loads(old_root)["signed"]["roles"]["timestamp"]  # … the online one kept
    info = client.get_targetinfo("keys/provenance.json")
    assert info is not None
    data = Path(client.download_target(info)).read_bytes()
    assert hashlib.sha256(data).hexdigest() == info.hashes["sha256"]
    # the old private root keys were kept aside, not lost; the history of roots is in the key set
    assert sorted(p.name for p in (keys / "retired").iterdir()) == ["root-1.v1.pem", "root-2.v1.pem", "root-3.v1.pem"]
    assert sorted(p.name for p in (keys / "roots").iterdir()) == ["1.root.json", "2.root.json"]
    # and cairn verify, pinned to the old root, passes and says how long the metadata has left
    (tmp_path / "old.json").write_bytes(old_root)
    proc = cairn("verify", str(repo), "--root", str(tmp_path / "old.json"), "--cache", str(tmp_path / "verify"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("metadata valid for 23 h ")


@pytest.mark.parametrize("signed_by", ["new keys only", "old keys only"])
def test_a_new_root_lacking_either_set_of_signatures_is_refused_by_the_client(rotated, tmp_path, signed_by) -> None:
    """What makes the rotation follow-able is both sets of signatures (TUF 5.3.4 and 5.3.5): either alone is refused."""
    _keys, repo, old_root = rotated
    copy = tmp_path / "repo"
    shutil.copytree(repo, copy)
    new = Metadata[Root].from_bytes((copy / "metadata" / "2.root.json").read_bytes())
    old_ids = set(json.loads(old_root)["signed"]["roles"]["root"]["keyids"])
    keep = {k: s for k, s in new.signatures.items() if (k in old_ids) == (signed_by == "old keys only")}
    assert 0 < len(keep) < len(new.signatures)
    new.signatures.clear()
    new.signatures.update(keep)
    (copy / "metadata" / "2.root.json").write_bytes(new.to_bytes(JSONSerializer(compact=False)))
    with pytest.raises(tuf_errors.UnsignedMetadataError):
        _client(copy, old_root, tmp_path / "client")


def test_past_expiry_the_client_refuses_the_repository_until_cairn_refresh(rotated, tmp_path, monkeypatch) -> None:
    keys, repo, old_root = rotated
    copy = tmp_path / "repo"
    shutil.copytree(repo, copy)
    expires = dt.datetime.strptime(_signed(copy / "metadata" / "timestamp.json")["expires"], "%Y-%m-%dT%H:%M:%SZ")
    later = expires.replace(tzinfo=UTC) + dt.timedelta(hours=1)  # an hour past the timestamp's expiry
    _frozen_at(monkeypatch, later)
    with pytest.raises(tuf_errors.ExpiredMetadataError, match="timestamp"):
        _client(copy, old_root, tmp_path / "late")
    before = _signed(copy / "metadata" / "timestamp.json")["version"]
    result = refresh(str(copy), keys, now=later)  # the scheduled job, run at that time
    assert result.timestamp_version == before + 1 and result.roots_uploaded == ()
    client = _client(copy, old_root, tmp_path / "late")  # the same client, with its trusted state, accepts it again
    assert _signed(tmp_path / "late" / "timestamp.json")["version"] == before + 1
    assert _signed(tmp_path / "late" / "root.json")["version"] == 2
    assert client.get_targetinfo("keys/cosign.pub") is not None


def test_cairn_verify_refuses_an_expired_timestamp_and_accepts_it_after_cairn_refresh(rotated, tmp_path) -> None:
    """Real time, real commands: the timestamp written with an expiry already past (a refresh that ran two days ago)."""
    keys, repo, old_root = rotated
    copy = tmp_path / "repo"
    shutil.copytree(repo, copy)
    refresh(str(copy), keys, now=dt.datetime.now(UTC).replace(microsecond=0) - dt.timedelta(days=2))
    (tmp_path / "old.json").write_bytes(old_root)
    verify = ("verify", str(copy), "--root", str(tmp_path / "old.json"), "--cache", str(tmp_path / "client"))
    refused = cairn(*verify, timeout=120)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "metadata/timestamp.json" in refused.stderr and "expired" in refused.stderr.lower()
    done = cairn("refresh", str(copy), "--keys", str(keys), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "metadata valid for 23 h" in done.stdout
    accepted = cairn(*verify, timeout=120)
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.splitlines()[1].startswith("metadata valid for 23 h ")


def test_refresh_uploads_the_roots_a_repository_lacks(tmp_path) -> None:
    """Rotated twice without touching the repository: refresh serves versions 2 and 3, so the client walks 1 → 3."""
    keys, repo, old_root = _published(tmp_path)
    rotate_root(keys)
    rotate_root(keys)
    result = refresh(str(repo), keys)
    assert result.roots_uploaded == (2, 3)
    _client(repo, old_root, tmp_path / "client")
    assert _signed(tmp_path / "client" / "root.json")["version"] == 3


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("attack", ["unsigned target", "replayed timestamp", "foreign timestamp"])
def test_refresh_signs_over_nothing_it_cannot_verify(rotated, tmp_path, attack) -> None:
    """A bucket writer without keys cannot get refresh to sign: a target planted in the targets file, an older
    timestamp put back (a rollback), a timestamp signed by another key — each stops it in one line, naming the
    file, with nothing written."""
    keys, repo, _ = rotated
    copy = tmp_path / "repo"
    shutil.copytree(repo, copy)
    refresh(str(copy), keys)  # so there is an older timestamp to replay
    metadata = copy / "metadata"
    snapshot_version = _signed(metadata / "timestamp.json")["meta"]["snapshot.json"]["version"]
    targets_version = _signed(metadata / f"{snapshot_version}.snapshot.json")["meta"]["targets.json"]["version"]
    if attack == "unsigned target":
        name = f"metadata/{targets_version}.targets.json"
        data = json.loads((copy / name).read_bytes())
        data["signed"]["targets"]["evil.whl"] = {"length": 4, "hashes": {"sha256": "0" * 64}}
        (copy / name).write_text(json.dumps(data, indent=1))
    elif attack == "replayed timestamp":
        name = f"metadata/{snapshot_version}.snapshot.json"  # the newer snapshot the replayed timestamp hides
        old = Metadata.from_bytes((metadata / "timestamp.json").read_bytes())
        old.signed.version -= 1
        old.signed.snapshot_meta.version -= 1
        old.signatures.clear()
        old.sign(load_keys(keys).signer("online"))
        (metadata / "timestamp.json").write_bytes(old.to_bytes(JSONSerializer(compact=False)))
    else:
        name = "metadata/timestamp.json"
        other = init_keys(tmp_path / "other")
        forged = Metadata.from_bytes((metadata / "timestamp.json").read_bytes())
        forged.signatures.clear()
        forged.sign(other.signer("online"))
        (metadata / "timestamp.json").write_bytes(forged.to_bytes(JSONSerializer(compact=False)))
    before = _snapshot(copy)
    with pytest.raises(CheckFailed) as caught:
        refresh(str(copy), keys)
    message = str(caught.value)
    assert message.startswith(name) and "\n" not in message, message
    assert _snapshot(copy) == before
    proc = cairn("refresh", str(copy), "--keys", str(keys), timeout=120)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and name in proc.stderr, proc.stderr
    assert _snapshot(copy) == before


def test_rotate_root_without_the_old_threshold_is_one_line_and_changes_nothing(tmp_path) -> None:
    keys = init_keys(tmp_path / "keys")
    (tmp_path / "keys" / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
    (tmp_path / "keys" / "root-1.pem").unlink()
    (tmp_path / "keys" / "root-2.pem").unlink()  # one root key of three left: the threshold is two
    before = _snapshot(tmp_path / "keys")
    with pytest.raises(CairnError, match=r"1 of the root keys .* threshold is 2"):
        rotate_root(tmp_path / "keys")
    assert _snapshot(tmp_path / "keys") == before


@pytest.mark.s3
def test_on_s3_rotate_root_and_refresh_serve_what_the_old_roots_client_follows(tmp_path) -> None:
    """The same over a moto S3 server: publish, rotate-root --repo s3://…, an expired timestamp refused by
    python-tuf's client reading the bucket over HTTP, then cairn refresh s3://… and the client accepts."""
    import os

    from support import need_module
    from support.servers import moto_s3

    need_module("moto.server")
    bucket = "cairn-keys-over-time"
    keys = init_keys(tmp_path / "keys")
    old_root = make_root(keys).to_bytes(JSONSerializer(compact=False))
    (tmp_path / "keys" / "root.json").write_bytes(old_root)
    with moto_s3(bucket) as s3:
        environ = {**os.environ, "CAIRN_S3_ENDPOINT": s3["endpoint"], "AWS_ACCESS_KEY_ID": "test",
                   "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                   "CAIRN_TUF_CACHE": str(tmp_path / "tuf-cache")}

        bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
        url = f"s3://{bucket}/repo"
        assert cairn("publish", str(bundle), "--to", url, "--keys", str(tmp_path / "keys"), env=environ).returncode == 0
        rotated = cairn("keys", "rotate-root", "--dir", str(tmp_path / "keys"), "--repo", url, env=environ)
        assert rotated.returncode == 0 and "uploaded root version(s) 2" in rotated.stdout, rotated.stderr
        # a timestamp written two days ago: expired now
        with pytest.MonkeyPatch.context() as patch:
            for name in ("CAIRN_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
                patch.setenv(name, environ[name])
            refresh(url, tmp_path / "keys", now=dt.datetime.now(UTC).replace(microsecond=0) - dt.timedelta(days=2))
        base = f"{s3['endpoint']}/{bucket}/repo/"
        cache = tmp_path / "client"
        (cache / "dl").mkdir(parents=True)

        def client() -> Updater:
            updater = Updater(str(cache), base + "metadata/", str(cache / "dl"), base, bootstrap=old_root)
            updater.refresh()
            return updater

        with pytest.raises(tuf_errors.ExpiredMetadataError):
            client()
        renewed = cairn("refresh", url, "--keys", str(tmp_path / "keys"), env=environ)
        assert renewed.returncode == 0 and "metadata valid for 23 h" in renewed.stdout, renewed.stderr
        assert client().get_targetinfo("keys/provenance.json") is not None
        assert _signed(cache / "root.json")["version"] == 2
