"""DSSE envelopes and the small key handling around them, for every layer that signs or checks one.

Two parts of Cairn sign small JSON documents that travel through places they do not trust: gate verdicts and the
runner list (``cairn.sign``) and the shared action cache's records (``cairn.store.shared``). The store sits below
``cairn.sign`` in the import floors, so the primitive both use lives down here, with no Cairn import beyond errors.

The envelope is DSSE (the signature is over the pre-auth encoding ``PAE``, so no canonical JSON is needed;
``sig`` is base64, ``keyid`` an unauthenticated hint). Written here rather than through securesystemslib's
``dsse`` module because that one stores signatures in hex, which other DSSE readers do not accept. Keys are
Ed25519 or ECDSA P-256 through pyca ``cryptography``, wrapped as securesystemslib signers for their TUF key ids;
securesystemslib and cryptography are imported only when a key is used, so importing this module costs nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from securesystemslib.formats import encode_canonical

from cairn.errors import InputError

if TYPE_CHECKING:
    from securesystemslib.signer import Key, Signer

MAX_ENVELOPE = 1 << 20  # a verdict or a cache record is a few hundred bytes; refuse to parse megabytes of anything else
KEY_TYPES = (("ed25519", "ed25519"), ("ecdsa", "ecdsa-sha2-nistp256"))  # (keytype, scheme) a public key may have


def import_signer() -> None:
    """Import securesystemslib's signer package without boto3 (its AWS KMS signer pulls in boto3, whose import
    costs CPU for a signer cairn never uses); ``cairn.sign`` calls it first, and a build reading the shared cache calls it here."""
    if "securesystemslib.signer" not in sys.modules and "boto3" not in sys.modules:
        sys.modules["boto3"] = None  # type: ignore[assignment]  # makes ``import boto3`` raise ImportError
        try:
            # lazy: securesystemslib and cryptography with boto3 blocked, 36 ms at start-up (python -X importtime)
            import securesystemslib.signer  # noqa: F401
        finally:
            if sys.modules.get("boto3", 0) is None:
                del sys.modules["boto3"]


class Unverified(ValueError):
    """Why an envelope was not accepted. ``kind``: ``malformed`` (not a DSSE envelope of that type), ``unsigned``
    (no signature at all), ``bad-signature`` (a signature names a trusted key's id but does not verify: the
    payload or the signature was changed), ``untrusted-key`` (signed, by no trusted key); ``keyids`` are the
    signatures' key id hints, for the message."""

    def __init__(self, kind: str, message: str, keyids: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kind, self.keyids = kind, keyids


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body`` (decimal lengths)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def sign_envelope(payload: bytes, payload_type: str, signer: Signer) -> dict[str, Any]:
    """One DSSE envelope over ``payload``, signed by ``signer`` (Ed25519 signatures are deterministic)."""
    signature = signer.sign(pae(payload_type, payload))
    return {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": signature.keyid, "sig": base64.b64encode(bytes.fromhex(signature.signature)).decode()}]}


def open_envelope(data: bytes, payload_type: str, keys: list[Key], *, max_bytes: int = MAX_ENVELOPE,
                  what: str = "a verdict") -> tuple[bytes, list[Key]]:
    """The payload of a DSSE envelope and the keys among ``keys`` whose signatures over it verify (at least one).

    Raises ``Unverified`` (a ValueError) with the reason; callers name the file. Every signature is tried against
    every key: the ``keyid`` hint is not trusted (it only tells a changed record from a stranger's in messages).
    """
    import_signer()
    # lazy: securesystemslib.signer, loaded by import_signer() with boto3 blocked (at the top: boto3 too, 190 ms), 36 ms at start-up (python -X importtime)
    from securesystemslib.signer import Signature

    if len(data) > max_bytes:
        raise Unverified("malformed", f"{len(data)} bytes, more than any DSSE envelope of {what} ({max_bytes})")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Unverified("malformed", f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("payload"), str) or not isinstance(doc.get("payloadType"), str) \
            or not isinstance(doc.get("signatures"), list):
        raise Unverified("malformed", "not a DSSE envelope (payloadType, payload, signatures)")
    if doc["payloadType"] != payload_type:
        raise Unverified("malformed", f"payload type {doc['payloadType']!r}, not {payload_type}")
    try:
        payload = base64.b64decode(doc["payload"], validate=True)
    except (binascii.Error, ValueError):
        raise Unverified("malformed", "payload is not base64") from None
    if not doc["signatures"]:
        raise Unverified("unsigned", "it carries no signature")
    message = pae(payload_type, payload)
    verified: list[Key] = []
    hints: list[str] = []
    for entry in doc["signatures"]:
        hint = entry.get("keyid") if isinstance(entry, dict) else None
        hints.append(hint if isinstance(hint, str) else "")
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
        trusted_ids = {key.keyid for key in keys}
        kind = "bad-signature" if trusted_ids & set(hints) else "untrusted-key"
        raise Unverified(kind, "no signature verifies with a trusted key" if keys else "no key is trusted to sign it",
                         tuple(hints))
    return payload, verified


def load_signer(pem: bytes, where: Path | str, fix: str) -> Signer:
    """The private key in ``pem`` (PKCS#8 PEM, Ed25519 or ECDSA P-256, unencrypted) as a signer; one InputError
    naming ``where`` (a file, or the environment variable that held it) otherwise."""
    import_signer()
    # lazy: securesystemslib.signer, loaded by import_signer() with boto3 blocked (at the top: boto3 too, 190 ms), 36 ms at start-up (python -X importtime)
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from securesystemslib.signer import CryptoSigner, SSlibKey

    try:
        private = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InputError(where, f"not an unencrypted PKCS#8 PEM private key ({exc})", fix) from None
    if not isinstance(private, ed25519.Ed25519PrivateKey) and not (
            isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(private.curve, ec.SECP256R1)):
        raise InputError(where, f"a {type(private).__name__} key; signing keys here are Ed25519 or ECDSA P-256", fix)
    return CryptoSigner(private, SSlibKey.from_crypto(private.public_key()))  # type: ignore[arg-type]


def generate(keytype: str) -> Signer:
    """A new Ed25519 (``ed25519``) or ECDSA P-256 (``ecdsa``) signer; its ``private_bytes`` are the PKCS#8 PEM."""
    import_signer()
    # lazy: securesystemslib.signer, loaded by import_signer() with boto3 blocked (at the top: boto3 too, 190 ms), 36 ms at start-up (python -X importtime)
    from securesystemslib.signer import CryptoSigner

    return CryptoSigner.generate_ed25519() if keytype == "ed25519" else CryptoSigner.generate_ecdsa()


def public_entry(signer: Signer) -> dict[str, Any]:
    """The public half of ``signer`` as one JSON object: ``keyid`` with the TUF key fields (keytype, scheme, keyval)."""
    return {"keyid": signer.public_key.keyid, **signer.public_key.to_dict()}


def key_from_entry(entry: Any) -> Key:
    """A public key from an entry ``public_entry`` made; ValueError with the reason otherwise.

    The key id is computed from the key, not taken from the entry: an entry whose ``keyid`` names another key (a
    copy-paste slip) is refused instead of making every message about it name the wrong key.
    """
    import_signer()
    # lazy: securesystemslib.signer, loaded by import_signer() with boto3 blocked (at the top: boto3 too, 190 ms), 36 ms at start-up (python -X importtime)
    from securesystemslib.signer import SSlibKey

    if not isinstance(entry, dict):
        raise ValueError(f"a {type(entry).__name__}, not a public key object (keyid, keytype, scheme, keyval)")
    if (entry.get("keytype"), entry.get("scheme")) not in KEY_TYPES:
        raise ValueError(f"key type {entry.get('keytype')!r}/{entry.get('scheme')!r}; keys here are "
                         f"{' or '.join('/'.join(t) for t in KEY_TYPES)}")
    fields = {k: entry[k] for k in ("keytype", "scheme", "keyval") if k in entry}
    try:
        probe = SSlibKey.from_dict("probe", dict(fields))
        keyid = _keyid(probe)
        key = SSlibKey.from_dict(keyid, dict(fields))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a public key ({exc})") from None
    if entry.get("keyid") not in (None, keyid):
        raise ValueError(f"its keyid {str(entry['keyid'])[:16]}… is not the id of its key ({keyid[:16]}…)")
    return key


def _keyid(key: Any) -> str:
    """The TUF key id of ``key``: sha256 of the canonical JSON of its fields, as securesystemslib computes it."""
    canonical = encode_canonical(key.to_dict())
    assert isinstance(canonical, str)
    return hashlib.sha256(canonical.encode()).hexdigest()
