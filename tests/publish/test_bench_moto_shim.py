"""The storage shim of ``bench/moto_server.py`` (``start_moto(discard_above=…)``), which the release-shaped run of
``bench/publish_memory_bench.py`` publishes 21 GB through: it must answer what the publisher reads back exactly
as moto with the bytes would — a small object's bytes, a big one's size, ETag and sha256 metadata in a HEAD and
a LIST, a multipart object's ETag — refuse a body that does not match its digest, as S3 does, and refuse a GET
of a discarded body instead of answering with wrong bytes (the bench would then measure something else)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

from cairn.errors import CairnError
from cairn.remote import backend as remote
from support import ROOT
from support.requirements import need_module
from support.s3 import aws_env

pytestmark = pytest.mark.s3

BUCKET = "bench-shim"
ABOVE = 1 << 20  # bodies from 1 MiB are discarded
_spec = importlib.util.spec_from_file_location("bench_moto_server", ROOT / "bench" / "moto_server.py")
assert _spec is not None and _spec.loader is not None
shim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shim)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    need_module("moto.server")
    boto3 = need_module("boto3")
    proc, url = shim.start_moto(discard_above=ABOVE)
    try:
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test",
                     aws_secret_access_key="test").create_bucket(Bucket=BUCKET)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in aws_env(endpoint, {}).items():
        monkeypatch.setenv(name, value)
    return remote.s3_backend(BUCKET, "p")


def _file(tmp_path: Any, name: str, size: int) -> tuple[Any, bytes]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path, data


def test_a_small_object_keeps_its_bytes(bucket):
    data = os.urandom(ABOVE - 1)
    assert bucket.put("small.bin", data, content_type="application/octet-stream", immutable=True)
    assert bucket.get("small.bin") == data


def test_a_big_object_answers_with_its_real_size_etag_and_sha256_and_is_never_read_back(bucket, endpoint, tmp_path):
    boto3 = need_module("boto3")
    path, data = _file(tmp_path, "big.bin", 3 << 20)
    sha = hashlib.sha256(data).hexdigest()
    before = shim.shim_stats(endpoint)
    assert bucket.put_file("big.bin", path, content_type="application/octet-stream", immutable=True, sha256=sha)
    assert bucket.copy("big.bin", "copy.bin", content_type="application/octet-stream", immutable=True, sha256=sha)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    for key in ("p/big.bin", "p/copy.bin"):
        head = client.head_object(Bucket=BUCKET, Key=key)
        assert (head["ContentLength"], head["ETag"], head["Metadata"]["sha256"]) == (len(data), f'"{hashlib.md5(data).hexdigest()}"', sha)
    assert bucket.list()["big.bin"].size == len(data) and bucket.head_sha256("big.bin") == sha
    # a re-run's conditional PUT is refused by moto after the shim read the body: an idempotent skip, as on S3
    assert not bucket.put_file("big.bin", path, content_type="application/octet-stream", immutable=True, sha256=sha)
    with pytest.raises(CairnError, match="501 NotImplemented: bench storage shim"):
        bucket.get("big.bin")
    after = shim.shim_stats(endpoint)
    assert after["discarded_bytes"] - before["discarded_bytes"] == 2 * len(data)
    assert after["refused_gets"] - before["refused_gets"] == 1


def test_a_multipart_object_gets_the_etag_s3_gives_it(bucket, endpoint, tmp_path, monkeypatch):
    boto3 = need_module("boto3")
    monkeypatch.setattr(remote, "MULTIPART_THRESHOLD", 8 << 20)
    monkeypatch.setattr(remote, "PART_SIZE", 5 << 20)
    path, data = _file(tmp_path, "multi.bin", 12 << 20)  # parts of 5, 5 and 2 MiB: the last below the threshold too
    assert bucket.put_file("multi.bin", path, content_type="application/octet-stream", immutable=True,
                           sha256=hashlib.sha256(data).hexdigest())
    parts = [data[i:i + (5 << 20)] for i in range(0, len(data), 5 << 20)]
    etag = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    head = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test").head_object(Bucket=BUCKET, Key="p/multi.bin")
    assert (head["ContentLength"], head["ETag"]) == (len(data), f'"{etag}"')


def test_a_body_that_does_not_match_its_digest_is_refused(bucket, tmp_path):
    path, _ = _file(tmp_path, "bad.bin", 2 << 20)
    with pytest.raises(CairnError, match="BadDigest"):
        bucket.put_file("bad.bin", path, content_type="application/octet-stream", immutable=True, sha256="0" * 64)
    assert "bad.bin" not in bucket.list()
