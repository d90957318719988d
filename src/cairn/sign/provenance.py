"""SLSA v1 provenance as an in-toto Statement v1 in a DSSE envelope, one per published artifact.

The statement's subject is the artifact's sha256 (matched by digest only, never by name); the predicate
records what the bytes were built from: the release manifest and its pins, the recipe, the builder and the
``SOURCE_DATE_EPOCH``. The envelope is stored as a one-line ``<artifact>.intoto.jsonl`` bundle next to the
artifact and is itself a TUF target, so it is authenticated twice (DSSE key and TUF targets key).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from securesystemslib import dsse
from securesystemslib.signer import Key, Signer

from cairn import __version__
from cairn.model.build_facts import BuildFacts

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://cairn.invalid/build/v1"


def statement(name: str, sha256: str, facts: BuildFacts, recipe: str = "") -> dict[str, Any]:
    epoch = datetime.fromtimestamp(facts.source_date_epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": sha256}}],
        "predicateType": SLSA_PROVENANCE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"release": facts.release, "version": facts.version, "recipe": recipe,
                                       "manifest": {"sha256": facts.manifest_sha256}},
                "internalParameters": {"source_date_epoch": facts.source_date_epoch, **dict(facts.extra)},
                "resolvedDependencies": [{"name": comp, "uri": pin} for comp, pin in facts.pins]
                + ([{"name": "cairn", "uri": "git+cairn", "digest": {"gitCommit": facts.git_commit}}] if facts.git_commit else []),
            },
            "runDetails": {
                "builder": {"id": facts.builder_id, "version": {"cairn": __version__}},
                "metadata": {"invocationId": facts.invocation or f"{facts.release}-{facts.version}",
                             "startedOn": epoch, "finishedOn": epoch},
            },
        },
    }


def sign_statement(stmt: dict[str, Any], signer: Signer) -> bytes:
    """The ``.intoto.jsonl`` bytes: one DSSE envelope on one line (deterministic for Ed25519)."""
    payload = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()
    envelope = dsse.Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    return (json.dumps(envelope.to_dict(), sort_keys=True, separators=(",", ":")) + "\n").encode()


def verify_attestation(data: bytes, sha256: str, key: Key) -> dict[str, Any]:
    """Check every envelope in a ``.intoto.jsonl``: signed by ``key`` and naming ``sha256``; returns the statement.

    Raises ValueError with the reason; callers turn it into a CheckFailed naming the file.
    """
    lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]
    if not lines:
        raise ValueError("empty attestation bundle")
    found: dict[str, Any] | None = None
    for line in lines:
        try:
            envelope = dsse.Envelope.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a DSSE envelope ({exc})") from None
        if envelope.payload_type != PAYLOAD_TYPE:
            raise ValueError(f"payload type {envelope.payload_type!r} is not in-toto")
        try:
            envelope.verify([key], 1)
        except Exception as exc:  # securesystemslib raises VerificationError
            raise ValueError(f"DSSE signature does not verify ({exc})") from None
        stmt = json.loads(envelope.payload)
        digests = {s.get("digest", {}).get("sha256") for s in stmt.get("subject", [])}
        if sha256 not in digests:
            raise ValueError(f"statement subject is {sorted(d for d in digests if d)} not sha256 {sha256}")
        found = stmt
    assert found is not None
    return found

