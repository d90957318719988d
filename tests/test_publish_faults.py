"""SIGKILL the publisher at random points against moto S3: after each kill, every reference in the public
indexes resolves to a present object signed by its DSSE attestation, the TUF metadata served verifies with
every target present and intact, and a rerun completes."""

from __future__ import annotations

import hashlib
import json
import random
import re
import signal
import subprocess
import sys
import time
from urllib.parse import urljoin
from urllib.request import urlopen

import pytest
from securesystemslib.signer import SSlibKey

from cairn.publish.sample import write_sample_bundle
from cairn.sign.provenance import verify_attestation
from cairn.sign.verify import fetch, verify_repository
from test_publish_s3 import BUCKET, env, keys, s3  # noqa: F401 - shared fixtures

KILLS = 20


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
    return checked


@pytest.mark.slow
def test_sigkill_at_random_points_never_breaks_the_public_view(s3, keys, tmp_path):  # noqa: F811
    environ = env(s3, tmp_path)
    rng = random.Random(20)
    root = (keys / "root.json").read_bytes()
    base = f"{s3['endpoint']}/{BUCKET}/faults/"
    cmd = [sys.executable, "-m", "cairn.publish", "publish", "--to", f"s3://{BUCKET}/faults", "--keys", str(keys), "--json"]
    started = time.monotonic()
    subprocess.run([*cmd, str(write_sample_bundle(tmp_path / "b0", version="1.0.0", wheels_per_family=2))], env=environ,
                   check=True, capture_output=True)
    full = time.monotonic() - started
    kills = 0
    for n in range(1, KILLS + 1):
        bundle = write_sample_bundle(tmp_path / f"b{n}", version=f"1.0.{n}", wheels_per_family=2)
        proc = subprocess.Popen([*cmd, str(bundle)], env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, full))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        verify_repository(base, root, tmp_path / f"cache-{n}")  # the signed state: every target present and intact
        assert check_public_references(s3["endpoint"], "faults") >= 6
        subprocess.run([*cmd, str(bundle)], env=environ, check=True, capture_output=True)  # the rerun completes
    assert kills >= KILLS * 3 // 4, f"only {kills} runs were still going when killed"
