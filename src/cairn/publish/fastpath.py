"""An unchanged re-publish in two GETs and no signing libraries: the publish record.

Every publisher run that changes the repository ends by writing ``channels/published.json`` (a signed TUF
target, like every other object) just before the timestamp. It names the run's *fingerprint* — a digest of
everything the run's output depends on: ``bundle.json`` (which carries every artifact's sha256), the gate
results, the channel, ``--stage-only``, the TUF root and the public keys, and the cairn version — and the
timestamp version the run commits. ``cairn publish`` first reads that record and ``metadata/timestamp.json``;
when the fingerprint is its own, the timestamp is the one the record committed (so that run finished, and
nothing committed since) and the timestamp is not close to expiry, the release is already published and the
command exits: zero PUTs, zero HEADs, no LIST, no hashing of the artifacts, no key loading.

Neither file is taken on the bucket's word: a bucket writer holds no key, but could otherwise write a record with
the next publish's fingerprint (and the current timestamp's version) and freeze every publish. So the timestamp
must be signed by a threshold of the timestamp keys of the pinned root (the run's own ``root.json``), and its signed
part names the record's length and sha256 (``x-cairn-published``, written by ``cairn.sign.tuf.sign_state``): the
record must be exactly those bytes. That costs one Ed25519 verification and the import of ``cryptography``'s
Ed25519 alone, not python-tuf. A timestamp that does not verify — or a repository signed before the field
existed — only means the full run, which verifies the whole repository with python-tuf and signs a timestamp
that names the record.

An image whose signature could not be pushed last time (its registry was down) is tried again — by the full
run — as soon as its registry accepts a connection.

A run that is about to write anything first overwrites the record with an "in progress" one, so a run that
is killed half-way (or ``promote``/gate recording, which write fingerprint "") never looks published. Any
doubt — unreadable record, other credentials than the environment's, a network error — means "not known to be
published" and the full, content-checking publish runs; the fast path can only ever skip work, never do it.

This module imports nothing heavier than the standard library and, to check the timestamp, ``cryptography``'s
Ed25519: it runs before tuf, securesystemslib and boto3 are imported, which would otherwise be most of an unchanged
re-publish's time (``bench/results/publish.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from cairn import __version__

RECORD_KEY = "channels/published.json"
RECORD_FIELD = "x-cairn-published"  # the timestamp's field naming the record (= cairn.sign.tuf.RECORD_FIELD, a test checks)
SCHEMA = "cairn.published/v1"
LAYOUT = 2  # 2: an S3 repository is publicly readable (bucket policy); a repository published before is published again
REFRESH_BEFORE = timedelta(hours=12)  # must equal cairn.sign.tuf.REFRESH_BEFORE (a test checks)
IN_PROGRESS = (json.dumps({"schema": SCHEMA, "in_progress": True}, sort_keys=True) + "\n").encode()
TIMEOUT = 10


def fingerprint(bundle_dir: Path, channel: str, stage_only: bool, root_signed: dict[str, Any], keys_public: dict[str, Any],
                public_read: bool = True, public_url: str = "", registry: str = "") -> str:
    """What a publish's output depends on, as one sha256 (cheap: reads bundle.json and gates/, not the artifacts);
    the public URL and registry the matrices name count too (added only when named: older records still match)."""
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    add("layout", f"{LAYOUT} cairn {__version__}".encode())
    add("bundle.json", (Path(bundle_dir) / "bundle.json").read_bytes())
    for gate in sorted((Path(bundle_dir) / "gates").glob("*.json")):
        add(f"gates/{gate.name}", gate.read_bytes())
    add("channel", f"{channel} stage_only={bool(stage_only)} public_read={bool(public_read)}".encode())
    add("root", _canonical(root_signed))
    add("keys", _canonical(keys_public))
    if public_url or registry:
        add("published", f"{public_url}\0{registry}".encode())
    return h.hexdigest()


def record_bytes(fingerprint: str, timestamp_version: int, report: dict[str, Any]) -> bytes:
    """The record a run writes (deterministic: equal runs write equal bytes, so an unchanged run writes nothing)."""
    body = {"schema": SCHEMA, "fingerprint": fingerprint, "timestamp_version": timestamp_version,
            "report": {k: report.get(k) for k in ("version", "channel", "promoted", "held", "images")}}
    return (json.dumps(body, sort_keys=True, indent=1) + "\n").encode()


def timestamp_fresh(timestamp: dict[str, Any], now: datetime | None = None) -> bool:
    """The served timestamp is not within ``REFRESH_BEFORE`` of expiry (else a publish re-signs it)."""
    expires = datetime.strptime(timestamp["signed"]["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return expires - (now or datetime.now(UTC)) > REFRESH_BEFORE


def names_record(timestamp: dict[str, Any], record: bytes) -> bool:
    """The timestamp's signed part names exactly these record bytes (``cairn.sign.tuf.record_binding``)."""
    named = timestamp["signed"].get(RECORD_FIELD)
    return named == {"length": len(record), "hashes": {"sha256": hashlib.sha256(record).hexdigest()}}


def signed_by_timestamp_keys(timestamp: dict[str, Any], root_signed: dict[str, Any]) -> bool:
    """A threshold of the timestamp role's keys in the pinned root signed ``timestamp`` (Ed25519, the online key's
    type; any other key type is left to the full run). Only ``cryptography``'s Ed25519 is imported."""
    # lazy: cryptography, 5 ms at start-up (python -X importtime)
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    role = root_signed["roles"]["timestamp"]
    keyids, threshold = set(role["keyids"]), int(role["threshold"])
    if threshold < 1 or timestamp["signed"].get("_type") != "timestamp":
        return False
    message = canonical_json(timestamp["signed"]).encode()
    good: set[str] = set()
    for signature in timestamp.get("signatures", []):
        keyid = signature.get("keyid")
        key = root_signed["keys"].get(keyid) if keyid in keyids else None
        if key is None or keyid in good or key.get("keytype") != "ed25519" or key.get("scheme") != "ed25519":
            continue
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(key["keyval"]["public"])).verify(bytes.fromhex(signature["sig"]), message)
        except (InvalidSignature, ValueError):
            continue
        good.add(keyid)
    return len(good) >= threshold


def canonical_json(value: Any) -> str:
    """OLPC canonical JSON, which TUF signs (sorted keys, no whitespace, only ``"`` and ``\\`` escaped; no floats)."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is True or value is False or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(canonical_json(k) + ":" + canonical_json(v) for k, v in sorted(value.items())) + "}"
    raise ValueError(f"not canonical JSON: {type(value).__name__}")


def already_published(url: str, bundle_dir: Path, channel: str | None, stage_only: bool, root_path: Path,
                      keys_dir: Path, public_read: bool = True, public_url: str = "", registry: str = "") -> dict[str, Any] | None:
    """The report of the committed publish this one would repeat exactly, or None (then publish for real)."""
    try:
        bundle = json.loads((Path(bundle_dir) / "bundle.json").read_bytes())
        channel = channel or bundle["release"]["channel"]
        root_signed = json.loads(Path(root_path).read_bytes())["signed"]
        keys_public = json.loads((Path(keys_dir) / "public.json").read_bytes())
        mine = fingerprint(bundle_dir, channel, stage_only, root_signed, keys_public, public_read, public_url, registry)
        get = _getter(url)
        if get is None:
            return None
        raw = get(RECORD_KEY)
        record = json.loads(raw) if raw else {}
        if record.get("fingerprint") != mine or record.get("in_progress"):
            return None
        report = record["report"]
        if any(not str(state).startswith("signed") and _reachable(ref) for ref, state in report.get("images", {}).items()):
            return None  # an image was not signed last time and its registry answers now: the full run signs it
        ts_raw = get("metadata/timestamp.json")
        timestamp = json.loads(ts_raw) if ts_raw else {}
        if timestamp.get("signed", {}).get("version") != record["timestamp_version"] or not timestamp_fresh(timestamp):
            return None
        # the record is the one the signed timestamp names: else a bucket writer could freeze every publish
        if not names_record(timestamp, raw) or not signed_by_timestamp_keys(timestamp, root_signed):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return {"url": url.rstrip("/"), "uploaded": 0, "skipped": 0, "signed": False,
            "timestamp_version": record["timestamp_version"], "already_published": True, **report}


def _reachable(reference: str) -> bool:
    """Whether the registry of an image reference accepts a TCP connection (then signing may work now)."""
    # lazy: socket, selectors (on the no-op publish this module keeps fast), 3 ms at start-up (python -X importtime)
    import socket

    host = reference.split("/", 1)[0]
    name, _, port = host.rpartition(":") if host.rpartition(":")[2].isdigit() else (host, "", "443")
    try:
        socket.create_connection((name.strip("[]"), int(port)), timeout=1).close()
        return True
    except OSError:
        return False


# -- reading one object without boto3 --------------------------------------------------------------------------
def _getter(url: str):  # type: ignore[no-untyped-def]
    """A one-shot GET of a repository key, or None when only the full path can read it. Not the one S3 factory
    (``cairn.remote.backend.s3_backend``): that wrapper falls back to botocore's credential chain and retries a
    dead endpoint for a minute, and this path must cost two requests or give up at once. It shares the factory's
    endpoint rule and the publisher's signer."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        root = Path(parsed.path if parsed.scheme == "file" else url)

        def get_file(key: str) -> bytes | None:
            try:
                return (root / key).read_bytes()
            except OSError:
                return None

        return get_file
    if parsed.scheme != "s3":
        return None
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        return None  # profiles, SSO, instance roles: boto3's business — the full path handles them
    token = os.environ.get("AWS_SESSION_TOKEN", "")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    bucket, prefix = parsed.netloc, parsed.path.strip("/")
    # lazy: cairn.remote, email, ssl, 26 ms at start-up (python -X importtime)
    from cairn.remote.s3http import find_endpoint  # standard library only, like this module

    endpoint = find_endpoint() or ""

    def get_s3(key: str) -> bytes | None:
        full = f"{prefix}/{key}" if prefix else key
        if endpoint:
            ep = urlparse(endpoint)
            scheme, host, path = ep.scheme, ep.netloc, f"{ep.path.rstrip('/')}/{bucket}/{full}"
        else:
            scheme, host, path = "https", f"{bucket}.s3.{region}.amazonaws.com", f"/{full}"
        headers = sigv4_get_headers(host, path, region, access, secret, token, datetime.now(UTC))
        return _http_get(scheme, host, quote(path, safe="/~"), headers)

    return get_s3


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def sigv4_get_headers(host: str, path: str, region: str, access: str, secret: str, token: str, now: datetime) -> dict[str, str]:
    """AWS Signature Version 4 headers for an S3 GET of ``path`` (no query, empty body): the publisher's own
    signer (``cairn.remote.s3http``, no botocore), with the empty body's sha256 as the payload hash."""
    # lazy: cairn.remote, email, ssl, 26 ms at start-up (python -X importtime)
    from cairn.remote.s3http import Credentials, sign

    return sign("GET", host, path, {}, {}, region, Credentials(access, secret, token), now, payload=EMPTY_SHA256)


def _http_get(scheme: str, host: str, path: str, headers: dict[str, str]) -> bytes | None:
    # lazy: email, ssl, _ssl, 13 ms at start-up (python -X importtime)
    import http.client

    conn_type = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = conn_type(host, timeout=TIMEOUT)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        return body if response.status == 200 else None
    finally:
        conn.close()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
