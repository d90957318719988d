"""cosign-format image signatures: simple-signing payloads, ECDSA P-256, at tag ``sha256-<hex>.sig``.

Cairn writes the format itself, without the cosign binary (which Debian packages only in sid, not on the
build hosts), following sigstore/cosign ``specs/SIGNATURE_SPEC.md``; Debian's cosign verifies what it writes
(``tests/sign/test_sign_cosign_client.py``). The payload names the image's manifest digest; the
signature is ECDSA P-256 over SHA-256 of the payload (what ``cosign verify --key cosign.pub
--insecure-ignore-tlog`` checks); the signature manifest is an OCI image manifest whose one layer is the
payload, with the base64 signature in the layer annotation ``dev.cosignproject.cosign/signature``. It is
pushed with the registry's HTTP API (``POST``/``PUT`` blob uploads, ``PUT`` manifest) — a few requests
that need no client library. The public key is ``keys/cosign.pub``, itself a signed TUF target.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from cairn.errors import CairnError, CheckFailed
from cairn.sign.provenance import verify_attestation

PAYLOAD_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
SIGNATURE_TYPE = "cosign container image signature"
ACCEPT = ", ".join([MANIFEST_TYPE, "application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"])


@dataclass(frozen=True)
class ImageName:
    """``registry/repo@sha256:<hex>`` split into its parts (a tag before ``@`` is dropped)."""

    registry: str
    repo: str
    digest: str

    @classmethod
    def parse(cls, text: str) -> ImageName:
        name, sep, digest = text.partition("@")
        if not sep or not digest.startswith("sha256:") or len(digest) != 71:
            raise CairnError(f"'{text}' is not an image by digest — write REGISTRY/REPO@sha256:<64 hex>")
        registry, slash, repo = name.partition("/")
        if not slash or ("." not in registry and ":" not in registry and registry != "localhost"):
            raise CairnError(f"'{text}' names no registry — write REGISTRY/REPO@sha256:<64 hex>")
        if ":" in repo.rsplit("/", 1)[-1]:
            repo = repo.rsplit(":", 1)[0]
        return cls(registry, repo, digest)

    @property
    def signature_tag(self) -> str:
        return self.digest.replace(":", "-") + ".sig"

    def __str__(self) -> str:
        return f"{self.registry}/{self.repo}@{self.digest}"


def payload(image: ImageName) -> bytes:
    """The simple-signing payload: exactly ``critical`` and ``optional`` (cosign ignores docker-reference)."""
    doc = {"critical": {"identity": {"docker-reference": f"{image.registry}/{image.repo}"},
                        "image": {"docker-manifest-digest": image.digest}, "type": SIGNATURE_TYPE},
           "optional": None}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


# -- registry HTTP API ---------------------------------------------------------------------------------------
class Registry:
    """The handful of OCI distribution API calls signing needs; loopback registries speak plain HTTP.

    Its own urllib requests, not ``cairn.remote.url``: this is a protocol client (POST/PUT uploads, Accept and
    Content-Type headers, the status and headers of every answer, an error body that is data), not a reader of
    a URL's bytes."""

    def __init__(self, address: str, timeout: float = 30) -> None:
        loopback = address.startswith(("127.", "localhost", "[::1]"))
        self.base = f"{'http' if loopback else 'https'}://{address}"
        self.address = address
        self.timeout = timeout

    def _request(self, method: str, url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(urljoin(self.base, url), data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()
        except (urllib.error.URLError, OSError) as exc:
            raise CairnError(f"registry {self.address} is not reachable ({exc}) — start it (cairn services start) or check the address") from None

    def manifest(self, repo: str, reference: str) -> bytes | None:
        status, _headers, body = self._request("GET", f"/v2/{repo}/manifests/{reference}", headers={"Accept": ACCEPT})
        if status == 404:
            return None
        if status != 200:
            raise CairnError(f"registry {self.address}: GET manifest {repo}:{reference} answered {status}")
        return body

    def blob(self, repo: str, digest: str) -> bytes | None:
        status, _headers, body = self._request("GET", f"/v2/{repo}/blobs/{digest}")
        return body if status == 200 else None

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        status, _h, _b = self._request("HEAD", f"/v2/{repo}/blobs/{digest}")
        if status == 200:
            return digest
        status, headers, body = self._request("POST", f"/v2/{repo}/blobs/uploads/")
        location = headers.get("Location") or headers.get("location")
        if status != 202 or not location:
            raise CairnError(f"registry {self.address}: starting a blob upload to {repo} answered {status} {body[:200]!r}")
        sep = "&" if "?" in location else "?"
        status, _h, body = self._request("PUT", f"{location}{sep}digest={digest}", data,
                                         {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
        if status != 201:
            raise CairnError(f"registry {self.address}: blob upload to {repo} answered {status} {body[:200]!r}")
        return digest

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str = MANIFEST_TYPE) -> None:
        status, _h, body = self._request("PUT", f"/v2/{repo}/manifests/{reference}", data, {"Content-Type": media_type})
        if status != 201:
            raise CairnError(f"registry {self.address}: PUT manifest {repo}:{reference} answered {status} {body[:200]!r}")


# -- signing and verifying -----------------------------------------------------------------------------------
def _public_key(pem: str | bytes) -> ec.EllipticCurvePublicKey:
    key = serialization.load_pem_public_key(pem.encode() if isinstance(pem, str) else pem)
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise CheckFailed("keys/cosign.pub: not an ECDSA P-256 public key")
    return key


def _valid(layer: dict[str, Any], blob: bytes, image: ImageName, key: ec.EllipticCurvePublicKey) -> str:
    """"" when ``layer`` is a valid signature of ``image`` by ``key``, else why not."""
    if layer.get("mediaType") != PAYLOAD_TYPE:
        return f"layer media type {layer.get('mediaType')}"
    if "sha256:" + hashlib.sha256(blob).hexdigest() != layer.get("digest"):
        return "payload blob does not match its digest"
    try:
        doc = json.loads(blob)
        signed_digest = doc["critical"]["image"]["docker-manifest-digest"]
        kind = doc["critical"]["type"]
    except (ValueError, KeyError, TypeError):
        return "payload is not a simple-signing document"
    if kind != SIGNATURE_TYPE or signed_digest != image.digest:
        return f"payload signs {signed_digest}, not {image.digest}"
    try:
        # strict base64, as cosign's Go decoder: a lenient decode drops stray characters and would accept an
        # annotation cosign refuses (binascii.Error is a ValueError)
        key.verify(base64.b64decode(layer.get("annotations", {}).get(SIGNATURE_ANNOTATION, ""), validate=True), blob,
                   ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return "signature does not verify with keys/cosign.pub"
    return ""


def signature_layers(registry: Registry, image: ImageName) -> list[tuple[dict[str, Any], bytes]]:
    raw = registry.manifest(image.repo, image.signature_tag)
    if raw is None:
        return []
    manifest = json.loads(raw)
    return [(layer, registry.blob(image.repo, layer["digest"]) or b"") for layer in manifest.get("layers", [])]


def sign_image(reference: str, signer: Any, public_pem: str, registry: Registry | None = None) -> str:
    """Push a cosign signature of ``reference`` (``registry/repo@sha256:…``); returns the tag.

    Idempotent: when the tag already holds a signature that ``public_pem`` verifies, nothing is pushed
    (ECDSA signatures are randomized, so re-signing would needlessly change the manifest).
    """
    image = ImageName.parse(reference)
    registry = registry or Registry(image.registry)
    if registry.manifest(image.repo, image.digest) is None:
        raise CairnError(f"{image}: the registry has no such manifest — push the image before signing it")
    key = _public_key(public_pem)
    layers = signature_layers(registry, image)
    if any(not _valid(layer, blob, image, key) for layer, blob in layers):
        return image.signature_tag
    body = payload(image)
    sig = base64.b64encode(bytes.fromhex(signer.sign(body).signature)).decode()
    layer_digest = registry.put_blob(image.repo, body)
    config = json.dumps({"architecture": "", "config": {}, "created": "0001-01-01T00:00:00Z",
                         "history": [{"created": "0001-01-01T00:00:00Z"}], "os": "",
                         "rootfs": {"diff_ids": [layer_digest], "type": "layers"}}, separators=(",", ":"), sort_keys=True).encode()
    config_digest = registry.put_blob(image.repo, config)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                "config": {"mediaType": CONFIG_TYPE, "size": len(config), "digest": config_digest},
                "layers": [{"mediaType": PAYLOAD_TYPE, "size": len(body), "digest": layer_digest,
                            "annotations": {SIGNATURE_ANNOTATION: sig}}]}
    registry.put_manifest(image.repo, image.signature_tag, json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode())
    return image.signature_tag


def verify_signature(reference: str, public_pem: str | bytes, registry: Registry | None = None) -> str:
    """The image is in the registry with exactly that digest and ``sha256-<hex>.sig`` holds a valid signature."""
    image = ImageName.parse(reference)
    registry = registry or Registry(image.registry)
    raw = registry.manifest(image.repo, image.digest)
    if raw is None:
        raise CheckFailed(f"{image}: not in the registry")
    if "sha256:" + hashlib.sha256(raw).hexdigest() != image.digest:
        raise CheckFailed(f"{image}: the registry serves a manifest with another digest — do not pull it")
    key = _public_key(public_pem)
    layers = signature_layers(registry, image)
    if not layers:
        raise CheckFailed(f"{image}: no cosign signature at tag {image.signature_tag}")
    reasons = [_valid(layer, blob, image, key) for layer, blob in layers]
    if "" not in reasons:
        raise CheckFailed(f"{image.repo}:{image.signature_tag}: {reasons[0]}")
    return image.signature_tag


def verify_image(reference: str, repository: str, root_bytes: bytes, cache: Any = None) -> dict[str, Any]:
    """TUF: the digest is a signed ``images/…`` target with valid provenance; registry: the cosign signature."""
    # lazy: urllib3, cairn.remote, importlib, 59 ms at start-up (python -X importtime)
    from cairn.sign.verify import _provenance_key, fetch, repository_url, trusted_updater

    image = ImageName.parse(reference)
    base = repository_url(repository or str(Path(".cairn") / "publish"))
    _updater, cache_dir = trusted_updater(base, root_bytes, Path(cache) if cache else None)
    targets = json.loads((cache_dir / "targets.json").read_bytes())["signed"]["targets"]
    match = next((path for path, info in sorted(targets.items())
                  if info.get("custom", {}).get("image", {}).get("digest") == image.digest), None)
    if match is None:
        raise CheckFailed(f"{image}: digest {image.digest} is not a signed image of {base} — do not run it")
    hexdigest = image.digest.removeprefix("sha256:")
    attestation = match + ".intoto.jsonl"
    if attestation not in targets:
        raise CheckFailed(f"{attestation}: missing — the image has no signed provenance")
    data = fetch(base + attestation) or b""
    if hashlib.sha256(data).hexdigest() != targets[attestation]["hashes"]["sha256"]:
        raise CheckFailed(f"{attestation}: bytes do not match the signed sha256 — it was modified after signing")
    try:
        statement = verify_attestation(data, hexdigest, _provenance_key(base, targets))
    except ValueError as exc:
        raise CheckFailed(f"{attestation}: {exc}") from None
    if "keys/cosign.pub" not in targets:
        raise CheckFailed("keys/cosign.pub: not a signed target — the repository has no image key")
    pem = fetch(base + "keys/cosign.pub") or b""
    if hashlib.sha256(pem).hexdigest() != targets["keys/cosign.pub"]["hashes"]["sha256"]:
        raise CheckFailed("keys/cosign.pub: bytes do not match the signed sha256 — it was modified after signing")
    tag = verify_signature(reference, pem)
    return {"image": str(image), "target": match, "signature": f"{image.repo}:{tag}",
            "provenance": statement["predicate"]["buildDefinition"]["externalParameters"].get("version", "")}
