"""The fast paths of publishing: an unchanged re-publish answered from the publish record without writing
anything, a half-done run that is never mistaken for a published one, and big wheels as conditional
multipart uploads with parallel parts."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.publish import fastpath
from cairn.publish.sample import write_sample_bundle
from support import cairn
from support.s3 import env

BUCKET = "cairn-releases"  # the bucket of this module's ``s3`` fixture (support.s3)
pytestmark = pytest.mark.s3


def state(client, prefix: str) -> dict[str, tuple[str, object]]:
    """Every object under ``prefix`` with its ETag and modification time: any write changes it."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = (obj["ETag"], obj["LastModified"])
    return out


def test_unchanged_republish_writes_nothing_and_a_half_done_run_is_never_skipped(s3, keys, tmp_path):
    environ = env(s3, tmp_path)
    bundle = write_sample_bundle(tmp_path / "bundle", version="8.0.0", families=("gfx90a",))
    publish = ["publish", str(bundle), "--to", f"s3://{BUCKET}/fast", "--keys", str(keys), "--json"]
    first = json.loads(cairn(publish, env=environ, check=True).stdout)
    assert first["signed"] and not first.get("already_published")
    before = state(s3["client"], "fast")

    again = json.loads(cairn(publish, env=environ, check=True).stdout)
    assert again["already_published"] and again["uploaded"] == 0 and not again["signed"]
    assert again["promoted"] == first["promoted"] and again["timestamp_version"] == first["timestamp_version"]
    assert state(s3["client"], "fast") == before

    # a run that died after its first write leaves the record "in progress": the next run publishes for real,
    # puts the record back and the repository verifies
    s3["client"].put_object(Bucket=BUCKET, Key=f"fast/{fastpath.RECORD_KEY}", Body=fastpath.IN_PROGRESS)
    repaired = json.loads(cairn(publish, env=environ, check=True).stdout)
    assert not repaired.get("already_published") and repaired["uploaded"] >= 1
    cairn(["verify", f"{s3['endpoint']}/{BUCKET}/fast", "--root", str(keys / "root.json")], env=environ, check=True)
    assert json.loads(cairn(publish, env=environ, check=True).stdout)["already_published"]

    # another channel is another publish
    other = json.loads(cairn([*publish, "--channel", "nightly"], env=environ, check=True).stdout)
    assert not other.get("already_published") and other["signed"]
    assert json.loads(cairn([*publish, "--channel", "nightly"], env=environ, check=True).stdout)["already_published"]
    # and re-publishing to dev is no longer "already published": nightly was the last publish
    assert not json.loads(cairn(publish, env=environ, check=True).stdout).get("already_published")


def test_promote_after_publish_disables_the_fast_path(s3, keys, tmp_path):
    environ = env(s3, tmp_path)
    bundle = write_sample_bundle(tmp_path / "bundle", version="8.1.0", families=("gfx90a",))
    to = ["--to", f"s3://{BUCKET}/promoted", "--keys", str(keys), "--json"]
    cairn(["publish", str(bundle), *to], env=environ, check=True)
    cairn(["promote", "--version", "8.1.0", "--channel", "nightly", *to], env=environ, check=True)
    assert not json.loads(cairn(["publish", str(bundle), *to], env=environ, check=True).stdout).get("already_published")


def test_big_wheels_go_up_in_conditional_multipart_uploads(s3, keys, tmp_path):
    environ = {**env(s3, tmp_path), "CAIRN_MULTIPART_THRESHOLD": str(5 << 20), "CAIRN_MULTIPART_PART": str(5 << 20)}
    bundle = write_sample_bundle(tmp_path / "big", version="8.2.0", families=("gfx90a",), wheels_per_family=1, payload_bytes=12 << 20)
    to = ["--to", f"s3://{BUCKET}/multipart", "--keys", str(keys)]
    cairn(["publish", str(bundle), *to], env=environ, check=True)
    wheel = "multipart/packages/gfx90a/cairn_smoke-8.2.0-py3-none-linux_x86_64.whl"
    assert s3["client"].head_object(Bucket=BUCKET, Key=wheel)["ETag"].endswith('-3"')  # three parts
    cairn(["verify", f"{s3['endpoint']}/{BUCKET}/multipart", "--root", str(keys / "root.json")], env=environ, check=True)
    other = write_sample_bundle(tmp_path / "other", version="8.2.0", families=("gfx90a",), wheels_per_family=1,
                                payload_bytes=12 << 20, seed="rebuilt")
    refused = cairn(["publish", str(other), *to], env=environ)
    assert refused.returncode == 1 and "already exists with different bytes" in refused.stderr


def test_fast_path_needs_no_signing_library():
    code = ("import sys; import cairn.publish.command; "
            "print(sorted(m for m in ('tuf', 'securesystemslib', 'cryptography', 'boto3', 'botocore') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_sigv4_headers_match_botocore(monkeypatch):
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    path = "/bucket/pre fix/channels/published.json"
    mine = fastpath.sigv4_get_headers("127.0.0.1:5000", path, "eu-west-1", "AKID", "SECRET", "TOKEN", now)
    request = AWSRequest(method="GET", url="http://127.0.0.1:5000" + path.replace(" ", "%20"))
    request.headers["x-amz-content-sha256"] = fastpath.EMPTY_SHA256
    request.context["timestamp"] = now.strftime("%Y%m%dT%H%M%SZ")
    signer = S3SigV4Auth(Credentials("AKID", "SECRET", "TOKEN"), "s3", "eu-west-1")
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now.replace(tzinfo=None))
    signer.add_auth(request)
    assert mine["authorization"] == request.headers["Authorization"]


def test_copied_constants_match_their_sources():
    from cairn.matrix.model import CHANNELS
    from cairn.publish import command
    from cairn.sign.keys import default_keys_dir
    from cairn.sign.tuf import REFRESH_BEFORE

    assert fastpath.REFRESH_BEFORE == REFRESH_BEFORE
    assert tuple(CHANNELS) == command.CHANNELS
    args = type("Args", (), {"dev_keys": False, "keys": None, "store": Path(".cairn")})()
    assert command._keys_dir(args) == default_keys_dir()
