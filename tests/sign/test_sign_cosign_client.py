"""Real cosign verifies what Cairn signs: Debian's ``cosign`` package (sid), in a stock sid container on the
private engine, checks every image signature ``cairn publish`` pushed with the release's published
``keys/cosign.pub`` — and refuses a tampered manifest, an edited payload, another key's signature and an image
with none.

Until this test, only Cairn's own verifier (``cairn.sign.cosign``) read these signatures, so a format slip
that both halves share would have gone unseen. The container is built once with mmdebstrap from the Debian
archive and kept under ``COSIGN_IMAGE`` in the engine: reruns start at the pushes. It runs with the host's
network, because the private engine has no bridge and the registry listens on loopback.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.signer import CryptoSigner

from cairn.errors import CheckFailed
from cairn.matrix.bundle import load_bundle
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.cosign import PAYLOAD_TYPE, SIGNATURE_ANNOTATION, ImageName, Registry, verify_signature
from cairn.sign.keys import init_keys, make_root
from support import need, need_tool
from support.repositories import push_image

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.network]

COSIGN_IMAGE = "cairn-test/cosign:sid"
# what `cosign verify` prints when no signature at the tag checks out (key, payload digest or signature bytes)
NO_MATCH = "no matching signatures"
NOT_FOUND = "no signatures found"


def build_cosign_image(client: Any, scratch: Path) -> None:
    """A minbase Debian sid root with the ``cosign`` package, imported as ``COSIGN_IMAGE``.

    The same archive and validity handling as the sid build image (``recipes/containers/base-sid.toml``): the
    host's Debian mirror, whose sid Release file may be past its Valid-Until on a host with a later clock."""
    from cairn import proc
    from cairn.errors import CairnError
    from cairn.sources.debian import resolve_mirror

    mmdebstrap = need_tool("mmdebstrap")
    rootfs = scratch / "cosign-sid.tar"
    argv = [mmdebstrap, "--variant=minbase", "--mode=auto", "--format=tar", "--include=cosign,ca-certificates",
            "--aptopt=Acquire::Check-Valid-Until \"false\"",
            "--customize-hook=rm -f \"$1/etc/hostname\" \"$1/etc/resolv.conf\"",
            "sid", str(rootfs), f"deb [check-valid-until=no] {resolve_mirror('host')} sid main"]
    try:
        with (scratch / "mmdebstrap.log").open("w") as log:
            proc.run(argv, env={"LC_ALL": "C.UTF-8"}, log=log, timeout=1800)
    except CairnError as exc:
        tail = (scratch / "mmdebstrap.log").read_text(errors="replace")[-1500:]
        need(False, f"Debian sid's cosign package could not be installed with mmdebstrap ({exc}):\n{tail}")
    repository, tag = COSIGN_IMAGE.rsplit(":", 1)
    client.api.import_image_from_file(str(rootfs), repository=repository, tag=tag)


@pytest.fixture(scope="module")
def cosign(services) -> Any:
    """``run(*args) -> (exit status, stdout, stderr)`` of ``cosign`` in the sid container, keys dir at /keys."""
    import docker

    from cairn.services.engine import docker_client

    client = docker_client()
    try:
        client.images.get(COSIGN_IMAGE)
    except docker.errors.ImageNotFound:
        with tempfile.TemporaryDirectory(prefix="cairn-cosign-", dir="/var/tmp") as scratch:
            build_cosign_image(client, Path(scratch))
    keys_dir = Path(tempfile.mkdtemp(prefix="cairn-cosign-keys-"))

    def run(*args: str) -> tuple[int, str, str]:
        container = client.containers.run(COSIGN_IMAGE, ["cosign", *args], detach=True, network_mode="host",
                                          volumes={str(keys_dir): {"bind": "/keys", "mode": "ro"}},
                                          environment={"HOME": "/tmp"})
        try:
            status = container.wait(timeout=300)["StatusCode"]
            out = container.logs(stdout=True, stderr=False).decode(errors="replace")
            err = container.logs(stdout=False, stderr=True).decode(errors="replace")
        finally:
            container.remove(force=True)
        return status, out, err

    run.keys_dir = keys_dir  # type: ignore[attr-defined]
    status, out, err = run("version")
    need(status == 0 and "GitVersion" in out + err, f"cosign in {COSIGN_IMAGE} does not run: {out}{err}")
    yield run
    shutil.rmtree(keys_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def published(services, cosign, tmp_path_factory) -> dict[str, Any]:
    """Two images in the services' registry, published (and so signed) by ``cairn publish`` with fresh keys."""
    base = tmp_path_factory.mktemp("cosign-client")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    repo = f"cairn-test/cosign-{uuid.uuid4().hex[:8]}"  # a fresh repository: no earlier run's signatures
    images = {}
    for family in ("gfx90a", "gfx1100"):
        digest = push_image(services.registry, repo, f"5.2.3-{family}", f"layer for {family} {repo}".encode())
        images[family] = (f"{services.registry}/{repo}:5.2.3-{family}", digest)
    bundle = write_sample_bundle(base / "bundle", families=tuple(images), images=images)
    report = publish(load_bundle(bundle), FileBackend(base / "repo"), keys, root)
    assert all(state.startswith("signed sha256-") for state in report.images.values()), report.images
    # the key a user verifies with: the published, TUF-signed keys/cosign.pub of the repository
    pem = (base / "repo" / "keys" / "cosign.pub").read_bytes()
    (cosign.keys_dir / "cosign.pub").write_bytes(pem)
    return {"registry": services.registry, "repo": repo, "images": images, "report": report, "pem": pem}


def verify(cosign: Any, reference: str, key: str = "cosign.pub") -> tuple[int, str, str]:
    """The command docs/publishing.md gives users (plain HTTP only because the test registry is on loopback)."""
    return cosign("verify", "--key", f"/keys/{key}", "--insecure-ignore-tlog=true", "--allow-http-registry", reference)


def test_cosign_verifies_every_image_cairn_signed(cosign, published):
    assert len(published["report"].images) == 2
    for reference in published["report"].images:
        image = ImageName.parse(reference)
        status, out, err = verify(cosign, reference)
        assert status == 0, f"cosign refused Cairn's signature of {reference}:\n{err}"
        (claim,) = json.loads(out)
        assert claim["critical"]["image"]["docker-manifest-digest"] == image.digest
        assert claim["critical"]["type"] == "cosign container image signature"
        assert "The signatures were verified against the specified public key" in err
        verify_signature(reference, published["pem"])  # and Cairn's own verifier agrees

    # by tag, as users pull: cosign resolves the tag to the signed digest
    tagged, digest = published["images"]["gfx90a"]
    status, out, err = verify(cosign, tagged)
    assert status == 0, err
    assert json.loads(out)[0]["critical"]["image"]["docker-manifest-digest"] == digest


def test_cosign_refuses_another_key(cosign, published):
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    (cosign.keys_dir / "other.pub").write_bytes(other.public_bytes(serialization.Encoding.PEM,
                                                                   serialization.PublicFormat.SubjectPublicKeyInfo))
    reference = next(iter(published["report"].images))
    status, _out, err = verify(cosign, reference, key="other.pub")
    assert status != 0 and NO_MATCH in err, err


def tampered_manifest(published: dict[str, Any]) -> tuple[ImageName, ImageName, dict[str, Any]]:
    """The gfx1100 tag moved to a manifest with other content (what a registry writer without the key can do).

    Returns (signed image, tampered image, the signed image's signature manifest)."""
    registry, repo = published["registry"], published["repo"]
    tag, digest = published["images"]["gfx1100"]
    signed = ImageName.parse(f"{registry}/{repo}@{digest}")
    evil = push_image(registry, repo, tag.rsplit(":", 1)[1], b"tampered layer " + repo.encode())
    tampered = ImageName.parse(f"{registry}/{repo}@{evil}")
    signature = json.loads(Registry(registry).manifest(repo, signed.signature_tag) or b"{}")
    return signed, tampered, signature


def test_cosign_refuses_a_tampered_manifest(cosign, published):
    signed, tampered, signature = tampered_manifest(published)
    reg = Registry(signed.registry)
    tag = published["images"]["gfx1100"][0]

    # no signature under the new digest: refused by digest and by the moved tag
    for reference in (str(tampered), tag):
        status, _out, err = verify(cosign, reference)
        assert status != 0 and NOT_FOUND in err, (reference, err)
    with pytest.raises(CheckFailed, match=f"no cosign signature at tag {tampered.signature_tag}"):
        verify_signature(str(tampered), published["pem"])

    # the genuine signature copied to the tampered digest's tag: its payload names the signed digest
    reg.put_manifest(tampered.repo, tampered.signature_tag, json.dumps(signature).encode())
    status, _out, err = verify(cosign, str(tampered))
    assert status != 0 and NO_MATCH in err, err
    with pytest.raises(CheckFailed, match=f"payload signs {signed.digest}"):
        verify_signature(str(tampered), published["pem"])

    # the payload edited to name the tampered digest, the signature kept: the signature no longer verifies
    (layer,) = signature["layers"]
    body = (reg.blob(signed.repo, layer["digest"]) or b"").replace(signed.digest.encode(), tampered.digest.encode())
    assert tampered.digest.encode() in body
    edited = {**signature, "layers": [{**layer, "digest": reg.put_blob(tampered.repo, body), "size": len(body)}]}
    reg.put_manifest(tampered.repo, tampered.signature_tag, json.dumps(edited).encode())
    status, _out, err = verify(cosign, str(tampered))
    assert status != 0 and NO_MATCH in err, err
    with pytest.raises(CheckFailed, match="signature does not verify"):
        verify_signature(str(tampered), published["pem"])

    # ... and a valid signature of that payload by another key is refused the same way
    other = CryptoSigner.generate_ecdsa()
    forged = {**edited, "layers": [{**edited["layers"][0], "mediaType": PAYLOAD_TYPE, "annotations": {
        SIGNATURE_ANNOTATION: base64.b64encode(bytes.fromhex(other.sign(body).signature)).decode()}}]}
    reg.put_manifest(tampered.repo, tampered.signature_tag, json.dumps(forged).encode())
    status, _out, err = verify(cosign, str(tampered))
    assert status != 0 and NO_MATCH in err, err
    with pytest.raises(CheckFailed, match="signature does not verify"):
        verify_signature(str(tampered), published["pem"])

    # the signed digest itself still verifies: tampering with the tag did not touch it
    status, _out, err = verify(cosign, str(signed))
    assert status == 0, err


def test_a_replaced_signature_of_the_signed_digest_is_refused_by_both(cosign, published):
    """The signed image's own ``.sig`` tag overwritten: with a mangled annotation, then with another digest's
    genuine signature. Characters outside base64: Go's decoder (cosign) rejects them, so Cairn must too —
    Python's lenient ``b64decode`` dropped them and let Cairn accept a signature cosign refuses."""
    registry, repo = published["registry"], published["repo"]
    _tag, digest = published["images"]["gfx90a"]
    image = ImageName.parse(f"{registry}/{repo}@{digest}")
    reg = Registry(registry)
    original = reg.manifest(repo, image.signature_tag) or b""
    signature = json.loads(original)
    (layer,) = signature["layers"]
    sig = layer["annotations"][SIGNATURE_ANNOTATION]
    mangled = {**signature, "layers": [{**layer, "annotations": {SIGNATURE_ANNOTATION: sig[:10] + "!" + sig[10:]}}]}
    reg.put_manifest(repo, image.signature_tag, json.dumps(mangled).encode())
    try:
        status, _out, err = verify(cosign, str(image))
        assert status != 0 and NO_MATCH in err, err
        with pytest.raises(CheckFailed, match="signature does not verify"):
            verify_signature(str(image), published["pem"])
    finally:
        reg.put_manifest(repo, image.signature_tag, original)

    # the other image's genuine signature (right key, payload of another digest) put in this image's .sig tag
    _tag, other_digest = published["images"]["gfx1100"]
    reg.put_manifest(repo, image.signature_tag, reg.manifest(repo, other_digest.replace(":", "-") + ".sig") or b"")
    try:
        status, _out, err = verify(cosign, str(image))
        assert status != 0 and NO_MATCH in err, err
        with pytest.raises(CheckFailed, match=f"payload signs {other_digest}"):
            verify_signature(str(image), published["pem"])
    finally:
        reg.put_manifest(repo, image.signature_tag, original)
    status, _out, err = verify(cosign, str(image))
    assert status == 0, err
    verify_signature(str(image), published["pem"])
