"""Gate verdicts as in-toto Statements (v1) in DSSE envelopes, signed by the key of the runner that ran the gate.

A verdict reported after staging (the GPU gate, run on a GPU host) decides whether a cell reaches a channel, so
``cairn promote --gates`` must be able to tell who said it and that nobody changed it since: a plain JSON file
proves neither. The runner signs a statement whose subject is the image digest and whose predicate is the gate,
the target, the status, the sha256 of the gate's log (the evidence) and the identity of the host (GPU product,
gfx target, driver, kernel, ROCm). Promote accepts it only when the signature verifies with a key the release's
signed runner list (``cairn.sign.runners``) trusts for that gate and target.

The envelope is DSSE (``payloadType`` ``application/vnd.in-toto+json``; the signature is over the pre-auth
encoding ``PAE``, so no canonical JSON is needed; ``sig`` is base64, ``keyid`` an unauthenticated hint). Written
here rather than through securesystemslib's ``dsse`` module because that one stores signatures in hex, which
other DSSE readers do not accept. The keys are the ones Cairn's key set already uses (Ed25519 or ECDSA P-256
through pyca ``cryptography``, wrapped as securesystemslib signers for their TUF key ids).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key, Signature, Signer

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
GATE_PREDICATE = "https://cairn.invalid/gate-verdict/v1"
HOST_FIELDS = ("gpu_product", "gfx_target", "driver", "kernel", "rocm")
VERDICT_FIELDS = ("gate", "target", "status")
STATUSES = ("passed", "failed", "not-run")
MAX_ENVELOPE = 1 << 20  # a verdict is a few hundred bytes; refuse to parse megabytes of anything else


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body`` (decimal lengths)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def sign_envelope(payload: bytes, payload_type: str, signer: Signer) -> dict[str, Any]:
    """One DSSE envelope over ``payload``, signed by ``signer`` (Ed25519 signatures are deterministic)."""
    signature = signer.sign(pae(payload_type, payload))
    return {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": signature.keyid, "sig": base64.b64encode(bytes.fromhex(signature.signature)).decode()}]}


def open_envelope(data: bytes, payload_type: str, keys: list[Key]) -> tuple[bytes, list[Key]]:
    """The payload of a DSSE envelope and the keys among ``keys`` whose signatures over it verify (at least one).

    Raises ValueError with the reason (not an envelope, another payload type, no signature by any of ``keys``);
    callers name the file. Every signature is tried against every key: the ``keyid`` hint is not trusted.
    """
    if len(data) > MAX_ENVELOPE:
        raise ValueError(f"{len(data)} bytes, more than any DSSE envelope of a verdict ({MAX_ENVELOPE})")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("payload"), str) or not isinstance(doc.get("payloadType"), str) \
            or not isinstance(doc.get("signatures"), list):
        raise ValueError("not a DSSE envelope (payloadType, payload, signatures)")
    if doc["payloadType"] != payload_type:
        raise ValueError(f"payload type {doc['payloadType']!r}, not {payload_type}")
    try:
        payload = base64.b64decode(doc["payload"], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("payload is not base64") from None
    message = pae(payload_type, payload)
    verified: list[Key] = []
    for entry in doc["signatures"]:
        try:
            raw = base64.b64decode(entry["sig"], validate=True)
        except (binascii.Error, ValueError, TypeError, KeyError):
            continue
        for key in keys:
            if key in verified:
                continue
            try:
                key.verify_signature(Signature(key.keyid, raw.hex()), message)
            except Exception:  # securesystemslib: UnverifiedSignatureError, VerificationError
                continue
            verified.append(key)
    if not verified:
        raise ValueError("no signature verifies with a trusted key" if keys else "no key is trusted to sign it")
    return payload, verified


@dataclass(frozen=True)
class Host:
    """Who ran the gate, as the runner saw its own host."""

    gpu_product: str
    gfx_target: str
    driver: str
    kernel: str
    rocm: str

    def to_dict(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in HOST_FIELDS}


def gate_statement(*, gate: str, target: str, image: str, digest: str, status: str, reason: str,
                   evidence_sha256: str, evidence_name: str, host: Host) -> dict[str, Any]:
    """The in-toto statement of one gate verdict on one image: the image digest is the subject."""
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64:
        raise ValueError(f"image digest {digest!r} is not sha256:<64 hex>")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image, "digest": {"sha256": hexdigest}}],
        "predicateType": GATE_PREDICATE,
        "predicate": {"gate": gate, "target": target, "status": status, "reason": reason,
                      "evidence": {"name": evidence_name, "digest": {"sha256": evidence_sha256}},
                      "host": host.to_dict()},
    }


def sign_statement(statement: dict[str, Any], signer: Signer) -> bytes:
    """The ``.intoto.json`` bytes a runner hands over: one envelope, one line."""
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    return (json.dumps(sign_envelope(payload, PAYLOAD_TYPE, signer), sort_keys=True, separators=(",", ":")) + "\n").encode()


@dataclass(frozen=True)
class Verdict:
    """A verdict whose envelope verified: what it says, and who said it."""

    gate: str
    target: str
    digest: str  # sha256:<hex>, the image's
    status: str
    reason: str
    evidence_sha256: str
    host: Host
    keyid: str

    def as_result(self) -> dict[str, Any]:
        """The shape ``cairn.matrix.build.record_gates`` records (a ``gate.json`` with the signer's identity)."""
        from cairn.model.gate_result import SCHEMA

        return {"schema": SCHEMA, "gate": self.gate, "target": self.target, "digest": self.digest, "status": self.status,
                "reason": self.reason, "runner": {"keyid": self.keyid, "host": self.host.to_dict(),
                                                  "evidence_sha256": self.evidence_sha256}}


def read_verdict(data: bytes, keys: list[Key]) -> Verdict:
    """The verdict of an envelope signed by one of ``keys``; ValueError with the reason otherwise.

    The signature is checked before a byte of the payload is interpreted, so an edited payload is refused as
    unsigned, never as malformed.
    """
    payload, (key, *_) = open_envelope(data, PAYLOAD_TYPE, keys)
    try:
        statement = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"signed payload is not JSON ({exc})") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"signed payload is not an in-toto statement ({STATEMENT_TYPE})")
    if statement.get("predicateType") != GATE_PREDICATE:
        raise ValueError(f"predicate type {statement.get('predicateType')!r}, not a gate verdict ({GATE_PREDICATE})")
    subjects = statement.get("subject")
    predicate = statement.get("predicate")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        raise ValueError("a gate verdict has exactly one subject, the image")
    sha = (subjects[0].get("digest") or {}).get("sha256") if isinstance(subjects[0].get("digest"), dict) else None
    if not isinstance(sha, str) or len(sha) != 64:
        raise ValueError("the subject has no sha256 digest")
    if not isinstance(predicate, dict) or not all(isinstance(predicate.get(k), str) and predicate[k] for k in VERDICT_FIELDS):
        raise ValueError(f"the predicate lacks one of {', '.join(VERDICT_FIELDS)}")
    if predicate["status"] not in STATUSES:
        raise ValueError(f"gate status {predicate['status']!r} is not one of {', '.join(STATUSES)}")
    host, evidence = predicate.get("host"), predicate.get("evidence")
    if not isinstance(host, dict) or not all(isinstance(host.get(k), str) for k in HOST_FIELDS):
        raise ValueError(f"the predicate's host lacks one of {', '.join(HOST_FIELDS)}")
    evidence_sha = (evidence.get("digest") or {}).get("sha256") if isinstance(evidence, dict) and isinstance(evidence.get("digest"), dict) else None
    if not isinstance(evidence_sha, str) or len(evidence_sha) != 64:
        raise ValueError("the predicate has no evidence digest (sha256 of the gate's log)")
    reason = predicate.get("reason", "")
    return Verdict(predicate["gate"], predicate["target"], f"sha256:{sha}", predicate["status"],
                   reason if isinstance(reason, str) else "", evidence_sha, Host(**{k: host[k] for k in HOST_FIELDS}), key.keyid)


def load_signer(path: Path) -> Signer:
    """A runner's private key (PKCS#8 PEM, Ed25519 or ECDSA P-256, as ``cairn keys runner`` writes it)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from securesystemslib.signer import CryptoSigner, SSlibKey

    from cairn.errors import InputError

    fix = "pass the runner key cairn keys runner wrote (its .pem, not the .pub.json)"
    try:
        private = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", fix) from None
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InputError(path, f"not an unencrypted PKCS#8 PEM private key ({exc})", fix) from None
    if not isinstance(private, ed25519.Ed25519PrivateKey) and not (
            isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(private.curve, ec.SECP256R1)):
        raise InputError(path, f"a {type(private).__name__} key; runner keys are Ed25519 or ECDSA P-256", fix)
    return CryptoSigner(private, SSlibKey.from_crypto(private.public_key()))  # type: ignore[arg-type]
