"""An unchanged re-publish in two GETs and no signing libraries: the publish record.

Every publisher run that changes the repository ends by writing ``channels/published.json`` (a signed TUF
target, like every other object) just before the timestamp. It names the run's *fingerprint* — a digest of
everything the run's output depends on: ``bundle.json`` (which carries every artifact's sha256), the gate
results, the channel, ``--stage-only``, the TUF root and the public keys, and the cairn version — and the
timestamp version the run commits. ``cairn publish`` first reads that record and ``metadata/timestamp.json``;
when the fingerprint is its own, the timestamp is the one the record committed (so that run finished, and
nothing committed since) and the timestamp is not close to expiry, the release is already published and the
command exits: zero PUTs, zero HEADs, no LIST, no hashing of the artifacts, no key loading.

An image whose signature could not be pushed last time (its registry was down) is tried again — by the full
run — as soon as its registry accepts a connection.

A run that is about to write anything first overwrites the record with an "in progress" one, so a run that
is killed half-way (or ``promote``/gate recording, which write fingerprint "") never looks published. Any
doubt — unreadable record, other credentials than the environment's, a network error — means "not known to be
published" and the full, content-checking publish runs; the fast path can only ever skip work, never do it.

This module imports nothing heavier than the standard library: it runs before tuf, securesystemslib,
cryptography and boto3 are imported (together ≈0.5 s of an unchanged re-publish otherwise).
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
SCHEMA = "cairn.published/v1"
LAYOUT = 2  # 2: an S3 repository is publicly readable (bucket policy); a repository published before is published again
REFRESH_BEFORE = timedelta(hours=12)  # must equal cairn.sign.tuf.REFRESH_BEFORE (a test checks)
IN_PROGRESS = (json.dumps({"schema": SCHEMA, "in_progress": True}, sort_keys=True) + "\n").encode()
TIMEOUT = 10


def fingerprint(bundle_dir: Path, channel: str, stage_only: bool, root_signed: dict[str, Any], keys_public: dict[str, Any],
                public_read: bool = True) -> str:
    """What a publish's output depends on, as one sha256 (cheap: reads bundle.json and gates/, not the artifacts)."""
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


def already_published(url: str, bundle_dir: Path, channel: str | None, stage_only: bool, root_path: Path,
                      keys_dir: Path, public_read: bool = True) -> dict[str, Any] | None:
    """The report of the committed publish this one would repeat exactly, or None (then publish for real)."""
    try:
        bundle = json.loads((Path(bundle_dir) / "bundle.json").read_bytes())
        channel = channel or bundle["release"]["channel"]
        root_signed = json.loads(Path(root_path).read_bytes())["signed"]
        keys_public = json.loads((Path(keys_dir) / "public.json").read_bytes())
        mine = fingerprint(bundle_dir, channel, stage_only, root_signed, keys_public, public_read)
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
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {"url": url.rstrip("/"), "uploaded": 0, "skipped": 0, "signed": False,
            "timestamp_version": record["timestamp_version"], "already_published": True, **report}


def _reachable(reference: str) -> bool:
    """Whether the registry of an image reference accepts a TCP connection (then signing may work now)."""
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
    from cairn.remote.s3http import Credentials, sign

    return sign("GET", host, path, {}, {}, region, Credentials(access, secret, token), now, payload=EMPTY_SHA256)


def _http_get(scheme: str, host: str, path: str, headers: dict[str, str]) -> bytes | None:
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
