"""S3 publishing that fails closed, against a real (moto) S3 server: a publish to a bucket's root never makes the
whole bucket world-readable unless asked for by name; keys made from ``--version``/``--as`` never climb out of
``staging/``; a killed publish's multipart uploads are aborted by the next run; and a bucket that refuses
path-style requests is reached in its own region, virtual-hosted style."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from cairn.publish.sample import write_sample_bundle
from support import ROOT, cairn, need_module
from support.s3 import env, point_at
from support.servers import moto_s3

boto3 = need_module("boto3")
moto_server = need_module("moto.server")

BUCKET = "cairn-harden"
RETRY = {"CAIRN_S3_RETRY_SECONDS": "5"}  # a refused request is not retried for long
pytestmark = pytest.mark.s3


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr + proc.stdout
    return lines[0]


def _bucket(s3, name: str) -> str:
    s3["client"].create_bucket(Bucket=name)
    return name


def _keys_in(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3["client"].list_objects_v2(Bucket=bucket).get("Contents", [])]


def _policy(s3, bucket: str) -> dict | None:  # type: ignore[type-arg]
    try:
        return json.loads(s3["client"].get_bucket_policy(Bucket=bucket)["Policy"])
    except s3["client"].exceptions.ClientError:
        return None


# -- no bucket-wide public read without --public-bucket ------------------------------------------------------
@pytest.mark.parametrize("command", ["publish", "promote"])
def test_a_publish_to_the_bucket_root_is_refused_without_public_bucket(s3, keys, tmp_path, command) -> None:
    bucket = _bucket(s3, f"bare-{command}")
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.2.3")
    args = [str(bundle)] if command == "publish" else ["--version", "5.2.3"]
    line = one_line(cairn([command, *args, "--to", f"s3://{bucket}", "--keys", str(keys)], env=env(s3, tmp_path, **RETRY)))
    assert line.startswith(f"cairn {command}: s3://{bucket}: no prefix, so a public-read grant would make every object"), line
    assert "--public-bucket" in line and "nothing was published" in line
    assert _keys_in(s3, bucket) == [] and _policy(s3, bucket) is None


def test_public_bucket_grants_the_whole_bucket_and_no_public_read_grants_nothing(s3, keys, tmp_path) -> None:
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.2.3")
    whole = _bucket(s3, "bare-granted")
    cairn_ok = cairn(["publish", str(bundle), "--to", f"s3://{whole}", "--keys", str(keys), "--public-bucket", "--json"], env=env(s3, tmp_path, **RETRY))
    assert cairn_ok.returncode == 0, cairn_ok.stderr
    read = {s["Sid"]: s for s in (_policy(s3, whole) or {})["Statement"]}["CairnPublicRead"]
    assert read["Resource"] in ("arn:aws:s3:::bare-granted/*", ["arn:aws:s3:::bare-granted/*"])

    private = _bucket(s3, "bare-private")
    quiet = cairn(["publish", str(bundle), "--to", f"s3://{private}", "--keys", str(keys), "--no-public-read", "--json"], env=env(s3, tmp_path, **RETRY))
    assert quiet.returncode == 0, quiet.stderr
    assert _policy(s3, private) is None and "metadata/timestamp.json" in _keys_in(s3, private)


# -- keys made from --version / --as -----------------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "named"), [
    (["--version", "../../other/5.2.3"], "--version '../../other/5.2.3' contains a path separator"),
    (["--version", ".."], "--version '..' is '..'"),
    (["--version", ""], "--version '' is empty"),
    (["--version", "5.2.3", "--as", "/abs"], "--as '/abs' contains a path separator"),
    (["--version", "5.2.3", "--as", "a//b"], "--as 'a//b' contains a path separator"),
], ids=["climbs", "dotdot", "empty", "as-absolute", "as-empty-part"])
def test_promote_refuses_a_version_that_is_not_one_name(s3, keys, tmp_path, flags, named) -> None:
    bucket = _bucket(s3, f"versions-{abs(hash(tuple(flags))) % 10**8}")
    line = one_line(cairn(["promote", *flags, "--to", f"s3://{bucket}/main", "--keys", str(keys)], env=env(s3, tmp_path, **RETRY)))
    assert line.startswith(f"cairn promote: {named} — a release version is one plain name"), line
    assert _keys_in(s3, bucket) == [] and _policy(s3, bucket) is None


@pytest.mark.parametrize("key", ["staging/../../x", "/abs", "a//b", "a/./b", "a/\nb"])
def test_the_s3_backend_refuses_a_key_that_is_not_plain_names(s3, monkeypatch, key) -> None:
    """Whatever code makes a key, the one S3 wrapper refuses one that is not plain names before any request."""
    from cairn.errors import CairnError
    from cairn.remote.backend import s3_backend

    point_at(monkeypatch, s3["endpoint"])
    backend = s3_backend(BUCKET, "main")
    sent: list[str] = []
    backend.client.observers.append(lambda method, target, headers: sent.append(target))
    for call in (lambda: backend.get(key), lambda: backend.put(key, b"x", content_type="text/plain", immutable=True),
                 lambda: backend.delete(key)):
        with pytest.raises(CairnError, match=r"^refusing S3 key .* under s3://cairn-harden/main: it "):
            call()
    assert sent == [] and _keys_in(s3, BUCKET) == []


# -- a killed publish's multipart uploads ------------------------------------------------------------------------
def _uploads(s3, bucket: str) -> set[str]:
    return {u["Key"] for u in s3["client"].list_multipart_uploads(Bucket=bucket).get("Uploads", [])}


def _leave_upload(s3, bucket: str, key: str) -> None:
    """What a publish killed mid-upload leaves: a multipart upload begun, one part sent, never completed."""
    upload = s3["client"].create_multipart_upload(Bucket=bucket, Key=key)
    s3["client"].upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * (5 << 20))


def test_the_next_publish_aborts_a_killed_runs_multipart_uploads_under_its_prefix(s3, keys, tmp_path) -> None:
    bucket = _bucket(s3, "killed-multipart")
    for key in ("main/packages/gfx90a/big.whl", "main/files/sdk.tar"):
        _leave_upload(s3, bucket, key)
    _leave_upload(s3, bucket, "other/files/theirs.tar")  # another repository's: never touched
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.2.3")
    proc = cairn(["publish", str(bundle), "--to", f"s3://{bucket}/main", "--keys", str(keys)], env={**env(s3, tmp_path, **RETRY), "CAIRN_MULTIPART_STALE_SECONDS": "0"})
    assert proc.returncode == 0, proc.stderr
    assert "aborted 2 stale multipart upload(s) under s3://killed-multipart/main" in proc.stdout, proc.stdout
    assert _uploads(s3, bucket) == {"other/files/theirs.tar"}


def test_an_upload_younger_than_the_stale_age_is_left_to_its_run(s3, monkeypatch) -> None:
    """The age test, against what the server says. moto 5.2 reports every upload as begun 2010-11-10T20:48:33Z
    (a fixed value in its response template), so here "younger" means an age limit reaching back before 2010."""
    from datetime import UTC, datetime

    from cairn.remote.backend import s3_backend

    point_at(monkeypatch, s3["endpoint"])
    bucket = _bucket(s3, "live-multipart")
    _leave_upload(s3, bucket, "main/files/old.tar")
    since_moto_says = (datetime.now(UTC) - datetime(2010, 11, 10, 20, 48, 33, tzinfo=UTC)).total_seconds()
    backend = s3_backend(bucket, "main")
    assert backend.abort_stale_uploads(older_than=since_moto_says + 3600) == []
    assert _uploads(s3, bucket) == {"main/files/old.tar"}
    assert backend.abort_stale_uploads(older_than=since_moto_says - 3600) == ["files/old.tar"]
    assert _uploads(s3, bucket) == set()


def test_the_documented_lifecycle_rule_is_one_s3_accepts() -> None:
    """docs/publishing.md's AbortIncompleteMultipartUpload rule, as written there, is a lifecycle configuration
    a real S3 API (moto's) takes and gives back."""
    text = (ROOT / "docs" / "publishing.md").read_text()
    block = text.split("```json lifecycle\n", 1)[1].split("```", 1)[0]
    config = json.loads(block)
    with moto_s3("cairn-lifecycle") as server:
        server["client"].put_bucket_lifecycle_configuration(Bucket="cairn-lifecycle", LifecycleConfiguration=config)
        rules = server["client"].get_bucket_lifecycle_configuration(Bucket="cairn-lifecycle")["Rules"]
    assert rules[0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1} and rules[0]["Status"] == "Enabled"


# -- real S3 addressing: virtual-hosted where path style is refused, the bucket's own region -----------------------
def _environ_for(s3, endpoint: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**env(s3, tmp_path, **RETRY), "CAIRN_S3_ENDPOINT": endpoint, **extra}


def test_a_server_that_refuses_path_style_is_reached_virtual_hosted(s3, keys, tmp_path) -> None:
    """moto takes a Host of ``s3.localhost:PORT`` as a virtual host for a bucket named "s3", so a path-style request
    there never reaches ``cairn-vh`` (NoSuchBucket): as a server refusing path style would. The client finds the
    bucket at ``cairn-vh.s3.localhost`` (connected on 127.0.0.1, RFC 6761), and publish and verify work end to end."""
    bucket = _bucket(s3, "cairn-vh")
    endpoint = f"http://s3.localhost:{s3['port']}"
    environ = _environ_for(s3, endpoint, tmp_path)
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.2.3")
    proc = cairn(["publish", str(bundle), "--to", f"s3://{bucket}/main", "--keys", str(keys), "--json"], env=environ)
    assert proc.returncode == 0, proc.stderr
    stored = _keys_in(s3, bucket)
    assert "main/metadata/timestamp.json" in stored and "main/packages/gfx90a/cairn_smoke-5.2.3-py3-none-linux_x86_64.whl" in stored
    assert "s3" not in {b["Name"] for b in s3["client"].list_buckets()["Buckets"]}
    verified = cairn(["verify", f"s3://{bucket}/main", "--root", str(keys / "root.json")], env=environ)
    assert verified.returncode == 0, verified.stderr + verified.stdout


def test_addressing_virtual_sends_the_bucket_in_the_host(s3, monkeypatch) -> None:
    """``CAIRN_S3_ADDRESSING=virtual``: every request names the bucket in its Host and not in its path, and moto's
    virtual-host mode serves writes, a multipart upload, a LIST and reads that way."""
    from cairn.remote import backend as backend_module
    from cairn.remote.backend import s3_backend

    point_at(monkeypatch, f"http://localhost:{s3['port']}", CAIRN_S3_ADDRESSING="virtual")
    monkeypatch.setattr(backend_module, "MULTIPART_THRESHOLD", 6 << 20)
    monkeypatch.setattr(backend_module, "PART_SIZE", 5 << 20)
    bucket = _bucket(s3, "cairn-vhost")
    backend = s3_backend(bucket, "main")
    seen: list[tuple[str, str, str]] = []
    backend.client.observers.append(lambda method, target, headers: seen.append((method, target, headers["host"])))
    big = os.urandom(7 << 20)
    assert backend.put("a/b.txt", b"hello", content_type="text/plain", immutable=True)
    assert backend.put("big.bin", big, content_type="application/octet-stream", immutable=True, sha256=hashlib.sha256(big).hexdigest())
    assert set(backend.list()) == {"a/b.txt", "big.bin"} and backend.get("a/b.txt") == b"hello"
    assert s3["client"].get_object(Bucket=bucket, Key="main/big.bin")["Body"].read() == big
    assert seen and all(host == f"{bucket}.localhost:{s3['port']}" for _, _, host in seen)
    assert not any(target.startswith(f"/{bucket}") for _, target, _ in seen), seen[:3]
    assert backend.http_url() == f"http://{bucket}.localhost:{s3['port']}/main/"


def test_the_client_signs_for_the_region_the_bucket_is_in(s3, monkeypatch) -> None:
    """Discovery reads the bucket's region from ``x-amz-bucket-region`` (HEAD of the bucket) and signs for it from
    then on. moto does not refuse a signature for the wrong region as S3 does (400 AuthorizationHeaderMalformed,
    or a 301 to the region), so here discovery is asked for directly; the refusals that trigger it on S3 are
    not reproduced."""
    from cairn.remote.backend import s3_backend

    point_at(monkeypatch, s3["endpoint"])
    s3["client"].create_bucket(Bucket="cairn-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    backend = s3_backend("cairn-eu", "main")
    scopes: list[str] = []
    backend.client.observers.append(lambda method, target, headers: scopes.append(headers["authorization"]))
    assert backend.client.region_for("cairn-eu") == "us-east-1"
    assert backend.client.discover("cairn-eu") and backend.client.region_for("cairn-eu") == "eu-west-1"
    assert not backend.client.virtual_for("cairn-eu")  # path style works here: kept
    backend.put("x.txt", b"x", content_type="text/plain", immutable=True)
    assert "/eu-west-1/s3/aws4_request" in scopes[-1]
