"""cosign-format image signatures against a real registry (Debian's docker-registry on a free loopback port):
``cairn publish`` signs every image of the bundle at ``sha256-<hex>.sig``; ``cairn verify IMAGE@sha256:…``
checks the TUF target, its DSSE provenance and the signature; a missing, foreign or retargeted signature fails."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.signer import CryptoSigner

from cairn.matrix.bundle import load_bundle
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.cosign import PAYLOAD_TYPE, SIGNATURE_ANNOTATION, ImageName, Registry, payload, sign_image
from cairn.sign.keys import init_keys, make_root
from support import ROOT, need_tool
from support.repositories import push_image
from support.servers import free_port

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    binary = need_tool("docker-registry", "docker-registry")
    base = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = base / "config.yml"
    config.write_text(f"version: 0.1\nlog: {{level: error, accesslog: {{disabled: true}}}}\n"
                      f"storage: {{filesystem: {{rootdirectory: {base / 'data'}}}, delete: {{enabled: true}}}}\n"
                      f"http: {{addr: 127.0.0.1:{port}}}\n")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("docker-registry did not start")
            time.sleep(0.2)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def published(registry, tmp_path_factory):
    base = tmp_path_factory.mktemp("cosign")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    from tuf.api.serialization.json import JSONSerializer

    (keys.directory / "root.json").write_bytes(root.to_bytes(JSONSerializer(compact=False)))
    images = {}
    for family in ("gfx90a", "gfx1030"):
        digest = push_image(registry, "cairn/smoke", f"5.2.3-{family}", f"layer for {family}".encode())
        images[family] = (f"{registry}/cairn/smoke:5.2.3-{family}", digest)
    bundle = write_sample_bundle(base / "bundle", families=("gfx90a", "gfx1030"), images=images)
    report = publish(load_bundle(bundle), FileBackend(base / "repo"), keys, root)
    return {"keys": keys, "repo": base / "repo", "images": images, "report": report, "base": base}


def cairn_verify(what: str, published, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAIRN_TUF_CACHE": str(published["base"] / "tuf"), "CAIRN_ROOT": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cairn.cli", "verify", what, "--repo", str(published["repo"]),
                           "--root", str(published["keys"].directory / "root.json"), *extra],
                          capture_output=True, text=True, env=env, timeout=120)


def test_publish_signs_every_image_and_verify_accepts_it(published, registry):
    report = published["report"]
    assert sorted(report.images) == sorted(f"{registry}/cairn/smoke@{d}" for _, d in published["images"].values())
    assert all(state.startswith("signed sha256-") for state in report.images.values()), report.images
    _, digest = published["images"]["gfx90a"]
    reference = f"{registry}/cairn/smoke@{digest}"
    out = cairn_verify(reference, published, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["target"] == "images/5.2.3/gfx90a-0.json"
    assert result["signature"] == f"cairn/smoke:{digest.replace(':', '-')}.sig"

    # the signature is the cosign format: one simple-signing layer, ECDSA P-256 over the payload
    reg = Registry(registry)
    manifest = json.loads(reg.manifest("cairn/smoke", digest.replace(":", "-") + ".sig") or b"{}")
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == PAYLOAD_TYPE
    body = reg.blob("cairn/smoke", layer["digest"])
    assert json.loads(body)["critical"] == {"identity": {"docker-reference": f"{registry}/cairn/smoke"},
                                            "image": {"docker-manifest-digest": digest}, "type": "cosign container image signature"}
    pem = (published["repo"] / "keys" / "cosign.pub").read_bytes()
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    serialization.load_pem_public_key(pem).verify(base64.b64decode(layer["annotations"][SIGNATURE_ANNOTATION]), body,
                                                  ec.ECDSA(hashes.SHA256()))


def test_republish_keeps_the_signature(published, registry):
    keys = published["keys"]
    _, digest = published["images"]["gfx1030"]
    reg = Registry(registry)
    before = reg.manifest("cairn/smoke", digest.replace(":", "-") + ".sig")
    sign_image(f"{registry}/cairn/smoke@{digest}", keys.signer("image"), keys.image_public_pem())
    assert reg.manifest("cairn/smoke", digest.replace(":", "-") + ".sig") == before


def test_unsigned_foreign_and_unknown_images_fail(published, registry):
    # an image that was never published: not a signed target
    stray = push_image(registry, "cairn/smoke", "stray", b"stray layer")
    out = cairn_verify(f"{registry}/cairn/smoke@{stray}", published)
    assert out.returncode == 1 and "is not a signed image of" in out.stderr

    # the published gfx1030 image, its signature replaced by one from another key: rejected, naming the tag
    keys = published["keys"]
    _, digest = published["images"]["gfx1030"]
    image = ImageName.parse(f"{registry}/cairn/smoke@{digest}")
    reg = Registry(registry)
    original = reg.manifest(image.repo, image.signature_tag)
    other = CryptoSigner.generate_ecdsa()
    body = payload(image)
    layer = reg.put_blob(image.repo, body)
    forged = json.loads(original or b"{}")
    forged["layers"] = [{"mediaType": PAYLOAD_TYPE, "size": len(body), "digest": layer,
                         "annotations": {SIGNATURE_ANNOTATION: base64.b64encode(bytes.fromhex(other.sign(body).signature)).decode()}}]
    reg.put_manifest(image.repo, image.signature_tag, json.dumps(forged).encode())
    try:
        out = cairn_verify(str(image), published)
        assert out.returncode == 1
        assert f"{image.repo}:{image.signature_tag}: signature does not verify with keys/cosign.pub" in out.stderr
    finally:
        reg.put_manifest(image.repo, image.signature_tag, original or b"")
    assert cairn_verify(str(image), published).returncode == 0

    # a signature of another digest copied to this tag: the payload names the wrong image
    _, other_digest = published["images"]["gfx90a"]
    copied = reg.manifest(image.repo, other_digest.replace(":", "-") + ".sig")
    reg.put_manifest(image.repo, image.signature_tag, copied or b"")
    try:
        out = cairn_verify(str(image), published)
        assert out.returncode == 1 and f"payload signs {other_digest}" in out.stderr
    finally:
        reg.put_manifest(image.repo, image.signature_tag, original or b"")
    assert keys.image_public_pem()
