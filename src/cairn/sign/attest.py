"""Gate verdicts as in-toto Statements (v1) in DSSE envelopes, signed by the key of the runner that ran the gate.

A verdict reported after staging (the GPU gate, run on a GPU host) decides whether a cell reaches a channel, so
``cairn promote --gates`` must be able to tell who said it and that nobody changed it since: a plain JSON file
proves neither. The runner signs a statement whose subject is the image digest and whose predicate is the gate,
the target, the status, the sha256 of the gate's log (the evidence) and the identity of the host (GPU product,
gfx target, driver, kernel, ROCm). Promote accepts it only when the signature verifies with a key the release's
signed runner list (``cairn.sign.runners``) trusts for that gate and target.

The envelope is DSSE (``payloadType`` ``application/vnd.in-toto+json``), made and opened by ``cairn.dsse``, which
the shared action cache's signed records use too (the store sits below ``cairn.sign``). The keys are the ones
Cairn's key set already uses (Ed25519 or ECDSA P-256 through pyca ``cryptography``, wrapped as securesystemslib
signers for their TUF key ids).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key, Signer

# the DSSE primitive, still importable from here (promote and the runner list use these names)
from cairn.dsse import MAX_ENVELOPE as MAX_ENVELOPE
from cairn.dsse import load_signer as from_pem
from cairn.dsse import open_envelope as open_envelope
from cairn.dsse import pae as pae
from cairn.dsse import sign_envelope as sign_envelope
from cairn.errors import InputError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
GATE_PREDICATE = "https://cairn.invalid/gate-verdict/v1"
HOST_FIELDS = ("gpu_product", "gfx_target", "driver", "kernel", "rocm")
VERDICT_FIELDS = ("gate", "target", "status")
STATUSES = ("passed", "failed", "not-run")


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
        # lazy: cairn.model, tomllib, cairn.errors, 11 ms at start-up (python -X importtime)
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
    fix = "pass the runner key cairn keys runner wrote (its .pem, not the .pub.json)"
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", fix) from None
    return from_pem(pem, path, fix)
