"""Publishing to a real (moto) S3 server: layout and headers, pip and an independent TUF client, idempotence,
refusal to re-publish different bytes, gated promotion, rollback rejection and a server restart mid-upload."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cairn.publish.sample import write_sample_bundle
from support import cairn, need_module
from support.s3 import env

boto3 = need_module("boto3")
moto_server = need_module("moto.server")

BUCKET = "cairn-releases"
pytestmark = pytest.mark.s3


def test_publish_to_s3_serves_pip_and_an_independent_tuf_client(s3, keys, tmp_path):
    from tuf.ngclient import Updater

    environ = env(s3, tmp_path)
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.2.3")
    out = cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/main", "--keys", str(keys), "--json"], env=environ, check=True)
    report = json.loads(out.stdout)
    assert len(report["promoted"]) == 3 and report["signed"]

    client = s3["client"]
    page = client.head_object(Bucket=BUCKET, Key="main/channels/dev/simple/gfx90a/cairn-smoke/")
    assert page["ContentType"] == "text/html; charset=utf-8" and page["CacheControl"] == "no-cache"
    as_json = client.head_object(Bucket=BUCKET, Key="main/channels/dev/simple/gfx90a/cairn-smoke/index.json")
    assert as_json["ContentType"] == "application/vnd.pypi.simple.v1+json"
    wheel_key = "main/packages/gfx90a/cairn_smoke-5.2.3-py3-none-linux_x86_64.whl"
    assert "immutable" in client.head_object(Bucket=BUCKET, Key=wheel_key)["CacheControl"]

    # an independent TUF client, bootstrapped only from the root, downloads and verifies the wheel over HTTP
    base = f"{s3['endpoint']}/{BUCKET}/main/"
    cache = tmp_path / "ngclient"
    (cache / "dl").mkdir(parents=True)
    updater = Updater(str(cache), base + "metadata/", str(cache / "dl"), base, bootstrap=(keys / "root.json").read_bytes())
    updater.refresh()
    info = updater.get_targetinfo("packages/gfx90a/cairn_smoke-5.2.3-py3-none-linux_x86_64.whl")
    assert info is not None
    path = updater.download_target(info)
    local = bundle / "files" / "wheels" / "gfx90a" / "cairn_smoke-5.2.3-py3-none-linux_x86_64.whl"
    assert Path(path).read_bytes() == local.read_bytes()
    assert updater.get_targetinfo("channels/dev/matrix.json") is not None

    # real pip resolves the wheel from the channel's family index (hash-checked by pip itself)
    dl = tmp_path / "pip"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check", "-d", str(dl),
                    "--index-url", base + "channels/dev/simple/gfx90a/", "cairn-smoke==5.2.3"], check=True, timeout=120)
    assert (dl / local.name).read_bytes() == local.read_bytes()

    # cairn verify of the whole repository and of a downloaded file
    cairn(["verify", f"{s3['endpoint']}/{BUCKET}/main", "--root", str(keys / "root.json")], env=environ, check=True)
    ok = cairn(["verify", str(dl / local.name), "--repo", base, "--root", str(keys / "root.json")], env=environ, check=True)
    assert "signed target packages/gfx90a/" in ok.stdout

    # unchanged re-publish: nothing written
    again = json.loads(cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/main", "--keys", str(keys), "--json"], env=environ, check=True).stdout)
    assert again["uploaded"] == 0 and not again["signed"]

    # same version, different bytes: refused, naming the object
    other = write_sample_bundle(tmp_path / "other", version="5.2.3", seed="rebuilt")
    refused = cairn(["publish", str(other), "--to", f"s3://{BUCKET}/main", "--keys", str(keys)], env=environ)
    assert refused.returncode == 1
    assert "already exists with different bytes" in refused.stderr and "5.2.3" in refused.stderr


def test_failed_cell_never_reaches_stable_and_rc_promotes_to_final(s3, keys, tmp_path):
    environ = env(s3, tmp_path)
    gates = {f: {"static-coverage": "passed", "in-container": "passed", "gpu": "passed"} for f in ("gfx908", "gfx90a")}
    gates["gfx1030"] = {"static-coverage": "passed", "in-container": "failed"}
    bundle = write_sample_bundle(tmp_path / "b", version="5.3.0rc1", channel="prerelease", gates=gates)
    to = ["--to", f"s3://{BUCKET}/gated", "--keys", str(keys)]
    cairn(["publish", str(bundle), "--stage-only", *to], env=environ, check=True)
    out = json.loads(cairn(["promote", "--version", "5.3.0rc1", "--channel", "stable", "--as", "5.3.0", *to, "--json"], env=environ, check=True).stdout)
    assert sorted(out["promoted"]) == ["5.3.0/gfx908/debian-12/py3.11/cairn-smoke-0.1.0", "5.3.0/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0"]
    assert out["held"] == {"5.3.0/gfx1030/debian-12/py3.11/cairn-smoke-0.1.0": ["in-container: failed (in-container failed on gfx1030)", "gpu: not-run"]}
    client = s3["client"]
    matrix = json.loads(client.get_object(Bucket=BUCKET, Key="gated/channels/stable/matrix.json")["Body"].read())
    assert {c["gfx_target"] for c in matrix["cells"]} == {"gfx908", "gfx90a"}
    listing = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="gated/channels/stable/")["Contents"]]
    assert not any("gfx1030" in key for key in listing)
    staged = json.loads(client.get_object(Bucket=BUCKET, Key="gated/staging/5.3.0rc1/matrix.json")["Body"].read())
    failed = next(c for c in staged["cells"] if c["gfx_target"] == "gfx1030")
    assert {"gate": "in-container", "status": "failed", "reason": "in-container failed on gfx1030"} in failed["gates"]
    cairn(["verify", f"{s3['endpoint']}/{BUCKET}/gated", "--root", str(keys / "root.json")], env=environ, check=True)


def test_replayed_old_timestamp_is_rejected(s3, keys, tmp_path):
    environ = env(s3, tmp_path)
    to = ["--to", f"s3://{BUCKET}/replay", "--keys", str(keys)]
    cairn(["publish", str(write_sample_bundle(tmp_path / "a", version="6.0.0")), *to], env=environ, check=True)
    client = s3["client"]
    old = client.get_object(Bucket=BUCKET, Key="replay/metadata/timestamp.json")["Body"].read()
    cairn(["publish", str(write_sample_bundle(tmp_path / "b", version="6.0.1")), *to], env=environ, check=True)
    url = f"{s3['endpoint']}/{BUCKET}/replay"
    cairn(["verify", url, "--root", str(keys / "root.json")], env=environ, check=True)  # the client now trusts timestamp v2
    client.put_object(Bucket=BUCKET, Key="replay/metadata/timestamp.json", Body=old, ContentType="application/json")
    replayed = cairn(["verify", url, "--root", str(keys / "root.json")], env=environ)
    assert replayed.returncode == 1
    assert "metadata/timestamp.json: rollback rejected" in replayed.stderr


def test_an_index_page_is_written_once_at_the_directory_pip_reads(s3, keys, tmp_path):
    """A page's bytes go up once, at ``…/<project>/`` (pip's URL), not also at ``…/index.html``; a repository
    published before that layout gets its old ``index.html`` name updated with the page, never left stale."""
    environ = env(s3, tmp_path)
    client = s3["client"]
    to = ["--to", f"s3://{BUCKET}/pages", "--keys", str(keys)]
    cairn(["publish", str(write_sample_bundle(tmp_path / "a", version="7.0.0", families=("gfx90a",))), *to], env=environ, check=True)
    listed = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="pages/channels/dev/simple/gfx90a/")["Contents"]}
    assert "pages/channels/dev/simple/gfx90a/cairn-smoke/" in listed and "pages/channels/dev/simple/gfx90a/" in listed
    assert not {k for k in listed if k.endswith("/index.html")}, "a page was written twice"

    legacy = "pages/channels/dev/simple/gfx90a/cairn-smoke/index.html"  # as an earlier layout wrote it
    client.put_object(Bucket=BUCKET, Key=legacy, Body=b"old page", ContentType="text/html")
    cairn(["publish", str(write_sample_bundle(tmp_path / "b", version="7.0.1", families=("gfx90a",))), *to], env=environ, check=True)
    page = client.get_object(Bucket=BUCKET, Key="pages/channels/dev/simple/gfx90a/cairn-smoke/")["Body"].read()
    assert b"7.0.1" in page and client.get_object(Bucket=BUCKET, Key=legacy)["Body"].read() == page
    cairn(["verify", f"s3://{BUCKET}/pages", "--root", str(keys / "root.json")], env=environ, check=True)


@pytest.mark.slow
def test_server_restart_mid_upload_is_retried(s3, keys, tmp_path):
    environ = {**env(s3, tmp_path), "CAIRN_S3_RETRY_SECONDS": "60"}
    bundle = write_sample_bundle(tmp_path / "big", version="7.0.0", wheels_per_family=8, payload_bytes=256 << 10)
    proc = subprocess.Popen([sys.executable, "-m", "cairn.cli", "publish", str(bundle), "--to", f"s3://{BUCKET}/restart",
                             "--keys", str(keys), "--json"], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = s3["client"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "Contents" not in client.list_objects_v2(Bucket=BUCKET, Prefix="restart/packages/"):
        time.sleep(0.02)
    s3["server"].stop()
    time.sleep(2)
    s3["server"].start()
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    report = json.loads(stdout)
    assert report["signed"]
    cairn(["verify", f"{s3['endpoint']}/{BUCKET}/restart", "--root", str(keys / "root.json")], env=environ, check=True)
