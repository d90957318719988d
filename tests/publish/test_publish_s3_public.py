"""An index served straight from S3, as pip, uv and a TUF client expect it (real moto server, real HTTP).

The bucket starts private, as S3 creates it: whatever anonymous clients can read here, ``cairn publish`` made
readable — a bucket policy granting read of the repository's prefix (and nothing outside it) and list (so a
missing project is a 404, which uv reads as "not on this index", not a 403, which it treats as fatal), each
object with the Content-Type and Cache-Control a client and a cache need. ``cairn verify`` reads the same
repository signed (``s3://``) and anonymously (``http://``), and both refuse a byte changed after signing.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

import pytest

from cairn.matrix.build import Published
from cairn.matrix.bundle import load_bundle
from cairn.names import hashed_name
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import S3Backend
from cairn.sign.keys import load_keys
from cairn.sign.tuf import load_root
from support import cairn, need_module
from support.s3 import env, no_credentials

BUCKET = "cairn-releases"  # the bucket of this module's ``s3`` fixture (support.s3)
pytestmark = pytest.mark.s3

VERSION = "8.1.0"
WHEEL = f"cairn_smoke-{VERSION}-py3-none-linux_x86_64.whl"
IMMUTABLE = "public, max-age=31536000, immutable"
HTML = "text/html; charset=utf-8"


def anonymous(url: str) -> tuple[int, Message, bytes]:
    """A GET with no credentials at all, as pip and uv send it."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.fixture(scope="module")
def published(s3, keys, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("public")
    client = s3["client"]
    client.put_object(Bucket=BUCKET, Key="private/secret.txt", Body=b"not the repository's")
    theirs = {"Sid": "TheirsToKeep", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
              "Resource": f"arn:aws:s3:::{BUCKET}/shared/*"}
    client.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": [theirs]}))
    bundle = write_sample_bundle(tmp / "bundle", version=VERSION, families=("gfx90a",))
    environ = env(s3, tmp)
    out = cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/public", "--keys", str(keys)], env=environ, check=True)
    return {"bundle": bundle, "base": f"{s3['endpoint']}/{BUCKET}/public/", "env": environ, "theirs": theirs, "out": out.stdout}


def test_every_kind_of_object_is_served_anonymously_with_its_type_and_cache_policy(published):
    base = published["base"]
    _, _, page = anonymous(base + "channels/dev/simple/gfx90a/cairn-smoke/")
    wheel = (published["bundle"] / "files" / "wheels" / "gfx90a" / WHEEL).read_bytes()
    _, _, timestamp = anonymous(base + "metadata/timestamp.json")
    snapshot_version = json.loads(timestamp)["signed"]["meta"]["snapshot.json"]["version"]
    _, _, snapshot = anonymous(base + f"metadata/{snapshot_version}.snapshot.json")
    targets_version = json.loads(snapshot)["signed"]["meta"]["targets.json"]["version"]

    expected = {
        "channels/dev/simple/gfx90a/": (HTML, "no-cache"),
        "channels/dev/simple/gfx90a/cairn-smoke/": (HTML, "no-cache"),
        "channels/dev/simple/gfx90a/cairn-smoke/index.json": ("application/vnd.pypi.simple.v1+json", "no-cache"),
        hashed_name("channels/dev/simple/gfx90a/cairn-smoke/index.html", hashlib.sha256(page).hexdigest()): (HTML, IMMUTABLE),
        "channels/dev/matrix.json": ("application/json", "no-cache"),
        f"packages/gfx90a/{WHEEL}": ("application/zip", IMMUTABLE),
        hashed_name(f"packages/gfx90a/{WHEEL}", hashlib.sha256(wheel).hexdigest()): ("application/zip", IMMUTABLE),
        f"packages/gfx90a/{WHEEL}.metadata": ("text/plain; charset=utf-8", IMMUTABLE),
        f"packages/gfx90a/{WHEEL}.intoto.jsonl": ("application/vnd.in-toto.bundle", IMMUTABLE),
        "channels/dev/simple/gfx90a/index.json": ("application/vnd.pypi.simple.v1+json", "no-cache"),
        "channels/published.json": ("application/json", "no-cache"),
        f"staging/{VERSION}/release.json": ("application/json", IMMUTABLE),
        f"staging/{VERSION}/gates.json": ("application/json", "no-cache"),
        f"staging/{VERSION}/simple/gfx90a/cairn-smoke/": (HTML, "no-cache"),
        f"images/{VERSION}/gfx90a-0.json": ("application/json", IMMUTABLE),
        "keys/provenance.json": ("application/json", "no-cache"),
        "metadata/timestamp.json": ("application/json", "no-cache"),
        "metadata/root.json": ("application/json", "no-cache"),
        f"metadata/{snapshot_version}.snapshot.json": ("application/json", IMMUTABLE),
        f"metadata/{targets_version}.targets.json": ("application/json", IMMUTABLE),
        "metadata/1.root.json": ("application/json", IMMUTABLE),
    }
    served = {}
    for key in expected:
        status, headers, _ = anonymous(base + key)
        served[key] = (status, headers.get("Content-Type"), headers.get("Cache-Control"))
    assert served == {key: (200, *want) for key, want in expected.items()}


def test_missing_project_is_404_and_nothing_outside_the_prefix_is_readable(published, s3):
    # moto 5.2 answers 404 for a missing key even without s3:ListBucket (AWS answers 403 then), so the 404
    # alone proves little here: the policy read back below holds the grant that gives it on AWS
    base = published["base"]
    assert anonymous(base + "channels/dev/simple/gfx90a/no-such-project/")[0] == 404
    assert anonymous(f"{s3['endpoint']}/{BUCKET}/private/secret.txt")[0] == 403
    policy = json.loads(s3["client"].get_bucket_policy(Bucket=BUCKET)["Policy"])
    grants = {(s["Action"], r) for s in policy["Statement"] if s.get("Principal") == "*"
              for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])}
    # read of the repository's prefix only; list of the bucket, which is what turns S3's 403 for a missing key into 404
    assert {("s3:GetObject", f"arn:aws:s3:::{BUCKET}/public/*"), ("s3:ListBucket", f"arn:aws:s3:::{BUCKET}")} <= grants
    assert published["theirs"] in policy["Statement"]  # a statement cairn did not write is left as it was
    assert f"bucket policy: anyone may read s3://{BUCKET}/public" in published["out"]  # and the publisher said what it granted


def test_pip_and_uv_install_from_the_channel_index_anonymously(published, tmp_path):
    # the index the channel's matrix names: under the HTTP form of --to, the default --public-url (no file://)
    _, _, body = anonymous(published["base"] + "channels/dev/matrix.json")
    matrix = json.loads(body)
    assert matrix["release"]["base_url"] == published["base"] and b"file://" not in body
    (index,) = {c["index_url"] for c in matrix["cells"]}
    assert index == published["base"] + "channels/dev/simple/gfx90a/"
    environ = no_credentials(published["env"])
    environ = {k: v for k, v in environ.items() if not k.startswith(("PIP_", "UV_"))} | {"UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    pip = [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--no-deps", "--index-url", index]
    uv = [need_module("uv").find_uv_bin(), "pip", "install", "--no-config", "--no-deps", "--python", sys.executable,
          "--index-url", index]
    for tool, command in (("pip", pip), ("uv", uv)):
        target = tmp_path / tool
        done = subprocess.run([*command, "--target", str(target), f"cairn-smoke=={VERSION}"], env=environ,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{tool}: {done.stderr}"
        if tool == "pip":  # --isolated: no configured index or find-links could have served it instead
            assert f"Looking in indexes: {index}\n" in done.stdout, done.stdout
        assert (target / f"cairn_smoke-{VERSION}.dist-info" / "METADATA").is_file(), tool
        missing = subprocess.run([*command, "--target", str(tmp_path / f"{tool}-missing"), "no-such-project"], env=environ,
                                 capture_output=True, text=True, timeout=180)
        assert missing.returncode != 0 and "403" not in missing.stderr, f"{tool}: {missing.stderr}"
        said = "No matching distribution found for no-such-project" if tool == "pip" else "no-such-project was not found in the package registry"
        assert said in missing.stderr, f"{tool}: {missing.stderr}"


def test_tuf_client_verifies_from_the_same_url_anonymously(published, keys, tmp_path):
    from tuf.ngclient import Updater

    base = published["base"]
    (tmp_path / "dl").mkdir()
    updater = Updater(str(tmp_path), base + "metadata/", str(tmp_path / "dl"), base, bootstrap=(keys / "root.json").read_bytes())
    updater.refresh()  # its own urllib3 fetcher: no credentials
    info = updater.get_targetinfo(f"packages/gfx90a/{WHEEL}")
    assert info is not None
    assert Path(updater.download_target(info)).read_bytes() == (published["bundle"] / "files" / "wheels" / "gfx90a" / WHEEL).read_bytes()
    assert updater.get_targetinfo("channels/dev/simple/gfx90a/cairn-smoke/index.html") is not None


def test_verify_s3_and_http_accept_the_release_and_refuse_a_tampered_byte(s3, keys, tmp_path):
    environ = env(s3, tmp_path)
    bundle = write_sample_bundle(tmp_path / "bundle", version=VERSION, families=("gfx90a",), seed="tamper")
    cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/tampered", "--keys", str(keys)], env=environ, check=True)
    root = ["--root", str(keys / "root.json")]
    signed = [f"s3://{BUCKET}/tampered", environ]
    plain = [f"{s3['endpoint']}/{BUCKET}/tampered", no_credentials(environ)]
    wheel = bundle / "files" / "wheels" / "gfx90a" / WHEEL
    for url, environment in (signed, plain):
        ok = cairn(["verify", url, *root], env=environment, check=True)
        assert ok.stdout.startswith(f"verified {url}/: timestamp v1, "), ok.stdout
        one = cairn(["verify", str(wheel), "--repo", url, *root], env=environment, check=True)  # a downloaded file, against either URL
        assert one.stdout.strip() == f"verified {wheel}: signed target packages/gfx90a/{WHEEL} with provenance"

    key = f"tampered/packages/gfx90a/{WHEEL}"
    data = bytearray(s3["client"].get_object(Bucket=BUCKET, Key=key)["Body"].read())
    data[len(data) // 2] ^= 1
    s3["client"].put_object(Bucket=BUCKET, Key=key, Body=bytes(data), ContentType="application/zip")
    for url, environment in (signed, plain):
        refused = cairn(["verify", url, *root], env=environment)
        assert refused.returncode == 1, refused.stderr
        assert f"packages/gfx90a/{WHEEL}: bytes do not match the signed sha256" in refused.stderr
        assert "Traceback" not in refused.stderr


def test_verify_of_a_bucket_prefix_without_a_repository_says_so(s3, keys, tmp_path):
    out = cairn(["verify", f"s3://{BUCKET}/nothing-here", "--root", str(keys / "root.json")], env=env(s3, tmp_path))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith(f"cairn verify: s3://{BUCKET}/nothing-here/: not a Cairn repository")


def test_a_full_republish_reads_the_policy_once_and_leaves_it_alone(published, s3, keys, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "test")
    before = s3["client"].get_bucket_policy(Bucket=BUCKET)["Policy"]
    backend = S3Backend(BUCKET, "public", s3["endpoint"])
    sent: list[tuple[str, str]] = []
    backend.client.observers.append(lambda method, path, _headers: sent.append((method, path)))
    # the public URL `cairn publish` named for it by default: the HTTP form of --to (docs/publishing.md)
    where = Published(f"{s3['endpoint']}/{BUCKET}/public/")
    report = publish(load_bundle(published["bundle"]), backend, load_keys(keys), load_root(keys / "root.json"), where=where)
    assert report.uploaded == 0
    assert [request for request in sent if "?policy" in request[1]] == [("GET", f"/{BUCKET}?policy=")]
    assert s3["client"].get_bucket_policy(Bucket=BUCKET)["Policy"] == before


def test_a_second_repository_in_the_bucket_keeps_the_first_readable(published, s3, keys, tmp_path):
    bundle = write_sample_bundle(tmp_path / "bundle", version="8.2.0", families=("gfx90a",))
    cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/second", "--keys", str(keys)], env=env(s3, tmp_path), check=True)
    for prefix in ("public", "second"):
        status, headers, _ = anonymous(f"{s3['endpoint']}/{BUCKET}/{prefix}/channels/dev/simple/gfx90a/cairn-smoke/")
        assert (status, headers.get("Content-Type")) == (200, HTML), prefix
    policy = json.loads(s3["client"].get_bucket_policy(Bucket=BUCKET)["Policy"])
    read = next(s for s in policy["Statement"] if s.get("Sid") == "CairnPublicRead")
    assert {f"arn:aws:s3:::{BUCKET}/{p}/*" for p in ("public", "second")} <= set(read["Resource"])
    assert published["theirs"] in policy["Statement"]


def test_block_public_access_stops_the_publish_before_anything_is_written(s3, keys, tmp_path):
    client = s3["client"]
    client.create_bucket(Bucket="cairn-blocked")
    client.put_public_access_block(Bucket="cairn-blocked", PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True})
    bundle = write_sample_bundle(tmp_path / "bundle", version=VERSION, families=("gfx90a",))
    out = cairn(["publish", str(bundle), "--to", "s3://cairn-blocked/main", "--keys", str(keys)], env=env(s3, tmp_path))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (
        "cairn publish: s3://cairn-blocked: S3 Block Public Access is on for this bucket (BlockPublicPolicy and "
        "RestrictPublicBuckets), so pip, uv and the TUF client could not read the index anonymously — turn it off for "
        "this bucket (aws s3api delete-public-access-block --bucket cairn-blocked); nothing was published")
    assert client.list_objects_v2(Bucket="cairn-blocked").get("KeyCount") == 0


def test_no_public_read_leaves_the_bucket_private_until_a_publish_without_it(s3, keys, tmp_path):
    client = s3["client"]
    client.create_bucket(Bucket="cairn-private")
    environ = env(s3, tmp_path)
    bundle = write_sample_bundle(tmp_path / "bundle", version=VERSION, families=("gfx90a",))
    to = ["--to", "s3://cairn-private/main", "--keys", str(keys)]
    page = f"{s3['endpoint']}/cairn-private/main/channels/dev/simple/gfx90a/cairn-smoke/"
    cairn(["publish", str(bundle), *to, "--no-public-read"], env=environ, check=True)
    assert anonymous(page)[0] == 403  # served by something else (a CDN): the bucket stays as it was
    with pytest.raises(client.exceptions.ClientError, match="NoSuchBucketPolicy"):
        client.get_bucket_policy(Bucket="cairn-private")
    ok = cairn(["verify", "s3://cairn-private/main", "--root", str(keys / "root.json")], env=environ, check=True)  # signed requests still read it
    assert ok.stdout.startswith("verified s3://cairn-private/main/")
    url = f"{s3['endpoint']}/cairn-private/main"
    refused = cairn(["verify", url, "--root", str(keys / "root.json")], env=no_credentials(environ))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"cairn verify: {url}/: metadata/timestamp.json answers 403 Forbidden — the repository "
                                      "is not readable without credentials; publish it without --no-public-read, or verify "
                                      "s3://BUCKET/PREFIX (signed requests)")
    again = json.loads(cairn(["publish", str(bundle), *to, "--json"], env=environ, check=True).stdout)  # not the fast path: it grants
    assert not again.get("already_published")
    assert anonymous(page)[0] == 200
