"""SIGKILL the publisher at random points against moto S3: after each kill, every reference in the public
indexes resolves to a present object signed by its DSSE attestation, the TUF metadata served verifies with
every target present and intact, and a rerun completes.

Every kill starts from the same published state (release 1.0.0, copied server-side to a fresh prefix) and
interrupts the publish of 1.0.1, so each check costs the same and the kill points spread over one run."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urljoin
from urllib.request import urlopen

import pytest
from securesystemslib.signer import SSlibKey

from cairn.publish.backend import S3Backend
from cairn.publish.bundle import load_bundle
from cairn.publish.publisher import load_root, publish
from cairn.publish.sample import write_sample_bundle
from cairn.sign.keys import load_keys
from cairn.sign.provenance import verify_attestation
from cairn.sign.verify import fetch, verify_repository
from test_publish_s3 import BUCKET, env, free_port, keys  # noqa: F401 - shared fixtures

KILLS = int(os.environ.get("CAIRN_FAULT_KILLS", "20"))


def check_public_references(endpoint: str, prefix: str) -> int:
    """Every wheel a channel index page links is there, matches its sha256, and its attestation verifies."""
    base = f"{endpoint}/{BUCKET}/{prefix}/"
    key_doc = fetch(base + "keys/provenance.json")
    if key_doc is None:
        return 0
    info = json.loads(key_doc)
    key = SSlibKey.from_dict(info.pop("keyid"), info)
    listing = urlopen(f"{endpoint}/{BUCKET}?list-type=2&prefix={prefix}/channels/").read().decode()
    pages = [k for k in re.findall(r"<Key>([^<]+)</Key>", listing) if k.endswith("/index.html") and k.count("/") >= 5]
    checked = 0
    for page_key in pages:
        page_url = f"{endpoint}/{BUCKET}/{page_key}"
        html = fetch(page_url)
        assert html is not None
        for href, sha in re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', html.decode()):
            url = urljoin(page_url, href)
            data = fetch(url)
            assert data is not None, f"{page_key} links {href}, which is missing"
            assert hashlib.sha256(data).hexdigest() == sha, f"{href}: bytes differ from the index's sha256"
            verify_attestation(fetch(url + ".intoto.jsonl") or b"", sha, key)
            checked += 1
    matrix_url = f"{endpoint}/{BUCKET}/{prefix}/channels/dev/matrix.json"
    matrix = json.loads(fetch(matrix_url) or b"{}")
    for cell in matrix.get("cells", []):
        for wheel in cell["wheels"]:
            data = fetch(base + wheel["url"])
            assert data is not None, f"the matrix links {wheel['url']}, which is missing"
            assert hashlib.sha256(data).hexdigest() == wheel["sha256"], f"{wheel['url']}: bytes differ from the matrix's sha256"
            verify_attestation(fetch(base + wheel["url"] + ".intoto.jsonl") or b"", wheel["sha256"], key)
            checked += 1
    return checked


@pytest.fixture(scope="module")
def s3():
    """moto as its own process (``moto_server``): the server, the publisher and the checks each get a core."""
    import boto3

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urlopen(endpoint + "/moto-api/", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.1)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=BUCKET)
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                                       "Resource": f"arn:aws:s3:::{BUCKET}/*"}]}
    client.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(policy))
    yield {"endpoint": endpoint, "client": client, "port": port}
    proc.terminate()
    proc.wait(timeout=10)


def reset(client, source: str, dest: str) -> None:
    """``dest`` becomes a copy of ``source`` (server-side copies): every kill starts from the same public state."""
    names = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=source + "/")
            for o in page.get("Contents", [])]

    def copy(key: str) -> None:
        client.copy_object(Bucket=BUCKET, Key=dest + key[len(source):], CopySource={"Bucket": BUCKET, "Key": key},
                           MetadataDirective="COPY")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(copy, names))


@pytest.mark.slow
def test_sigkill_at_random_points_never_breaks_the_public_view(s3, keys, tmp_path, monkeypatch):  # noqa: F811
    environ = env(s3, tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, environ[name])
    rng = random.Random(20)
    root = (keys / "root.json").read_bytes()
    keyset, signed_root = load_keys(keys), load_root(keys / "root.json")
    publish_cmd = [sys.executable, "-m", "cairn.publish", "publish", "--keys", str(keys), "--json"]
    # the public state every kill starts from: release 1.0.0 on the dev channel
    publish(load_bundle(write_sample_bundle(tmp_path / "b0", version="1.0.0")), S3Backend(BUCKET, "seed", s3["endpoint"]),
            keyset, signed_root)
    bundle = write_sample_bundle(tmp_path / "b1", version="1.0.1", wheels_per_family=2)
    reset(s3["client"], "seed", "timing")
    started = time.monotonic()
    subprocess.run([*publish_cmd, "--to", f"s3://{BUCKET}/timing", str(bundle)], env=environ, check=True, capture_output=True)
    full = time.monotonic() - started
    kills = 0
    for n in range(1, KILLS + 1):
        prefix = f"faults{n}"
        reset(s3["client"], "seed", prefix)
        proc = subprocess.Popen([*publish_cmd, "--to", f"s3://{BUCKET}/{prefix}", str(bundle)], env=environ,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, full))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        # the signed state: every target present and intact under its content-addressed name (plain names of
        # pages and matrices may already hold the interrupted publish's bytes); every public link (index pages
        # and matrix) resolves to a present object whose DSSE provenance verifies
        verify_repository(f"{s3['endpoint']}/{BUCKET}/{prefix}/", root, tmp_path / f"cache-{n}", in_progress=True)
        assert check_public_references(s3["endpoint"], prefix) >= 6
        # the rerun (the same code as the CLI, in this process) completes
        report = publish(load_bundle(bundle), S3Backend(BUCKET, prefix, s3["endpoint"]), keyset, signed_root)
        assert report.promoted and not report.held
    verify_repository(f"{s3['endpoint']}/{BUCKET}/{prefix}/", root, tmp_path / "cache-final")
    assert kills >= KILLS * 3 // 4, f"only {kills} runs were still going when killed"
