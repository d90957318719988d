"""The S3 REST calls the publisher makes, signed (SigV4) and sent over kept-alive ``http.client`` connections.

Why not botocore for these: creating its S3 client parses the service model, and each call goes through its
request pipeline (serialisation, events, parsing) — on a publish of a few hundred small objects that was most
of the client's CPU (bench/README.md: 0.88 s before, 0.35 s after, for the sample bundle). Only ``S3Backend``
(``cairn.remote.backend``, the one S3 wrapper, made by ``s3_backend``) uses this module; the endpoint comes from
``find_endpoint`` (``$CAIRN_S3_ENDPOINT`` first); credentials come from the environment, else from botocore's credential chain
(profiles, SSO, instance roles), which loads no service model.

Bodies are sent with ``UNSIGNED-PAYLOAD``: every write carries its checksum instead (``x-amz-checksum-sha256``
for objects, ``Content-MD5`` for parts), a signed header that S3 checks against the bytes it receives.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO
from urllib.parse import quote, urlparse
from xml.etree import ElementTree

UNSIGNED = "UNSIGNED-PAYLOAD"
TIMEOUT = 60
RETRYABLE_STATUS = (500, 502, 503, 504)
BLOCK = 1 << 20  # a file body is sent, and a body written to a file is read, this much at a time


class ConnectionFailed(Exception):
    """The server could not be reached or dropped the connection (a restart): worth retrying."""


class S3Error(Exception):
    """An S3 error response: HTTP status plus the error code of its XML body (or of the status, for HEAD)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str = ""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes


def find_credentials() -> Credentials:
    """The environment's keys, else botocore's chain (its credential resolver only, no service model)."""
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if access and secret:
        return Credentials(access, secret, os.environ.get("AWS_SESSION_TOKEN", ""))
    import botocore.session

    found = botocore.session.get_session().get_credentials()
    if found is None:
        from cairn.errors import CairnError

        raise CairnError("no AWS credentials — set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or configure a profile)")
    frozen = found.get_frozen_credentials()
    return Credentials(frozen.access_key, frozen.secret_key, frozen.token or "")


ENDPOINT_VARIABLES = ("CAIRN_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def find_endpoint(environ: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint every cairn S3 user talks to: the first of ``$CAIRN_S3_ENDPOINT`` (publish, the shared
    cache, verify, diff), ``$AWS_ENDPOINT_URL_S3`` and ``$AWS_ENDPOINT_URL`` (the AWS tools' own variables, which
    ``cairn doctor`` read s3:// matrices through) that is set and not empty; None means AWS itself."""
    env = os.environ if environ is None else environ
    return next((env[name] for name in ENDPOINT_VARIABLES if env.get(name)), None)


def find_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


class S3Client:
    """Path-style requests to one endpoint (``http://host:port`` or, without one, the region's AWS endpoint)."""

    def __init__(self, endpoint: str | None, region: str, credentials: Credentials) -> None:
        parsed = urlparse(endpoint or f"https://s3.{region}.amazonaws.com")
        self.scheme, self.host, self.base = parsed.scheme, parsed.netloc, parsed.path.rstrip("/")
        self.region, self.credentials = region, credentials
        self._local = threading.local()
        # called with (method, path and query, headers) before each request is sent: what the server receives
        self.observers: list[Callable[[str, str, dict[str, str]], None]] = []

    def request(self, method: str, bucket: str, key: str = "", *, query: dict[str, str] | None = None,
                headers: dict[str, str] | None = None, body: bytes | BinaryIO = b"", into: BinaryIO | None = None) -> Response:
        """One signed request; raises S3Error for an error status, ConnectionFailed when the server is gone.

        ``body`` may be an open file, sent from its start in blocks (an archive of gigabytes never sits in
        memory); ``into``: a file that a successful response's body is written to, from its start, in blocks
        (the ``Response`` then carries no body). Both are rewound first, so a retry sends and keeps one copy."""
        path = f"{self.base}/{bucket}" + (f"/{key}" if key else "")
        query = query or {}
        sent = {k.lower(): str(v) for k, v in (headers or {}).items()}
        if isinstance(body, bytes):
            sent["content-length"] = str(len(body))
        else:
            body.seek(0)
            sent["content-length"] = str(os.fstat(body.fileno()).st_size)
        signed = sign(method, self.host, path, query, sent, self.region, self.credentials, datetime.now(UTC))
        target = quote(path, safe="/~") + ("?" + _query(query) if query else "")
        for observe in self.observers:
            observe(method, target, signed)
        conn = self._connection()
        try:
            conn.request(method, target, body=body, headers=signed)
            raw = conn.getresponse()
            if into is not None and 200 <= raw.status < 300:
                into.seek(0)
                into.truncate()
                while chunk := raw.read(BLOCK):
                    into.write(chunk)
                data = b""
            else:
                data = raw.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise ConnectionFailed(str(exc) or type(exc).__name__) from None
        response = Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, data)
        if raw.will_close:
            self._drop()
        error = _error(response, method)
        if error is not None:
            if error.status in RETRYABLE_STATUS:
                raise ConnectionFailed(str(error))
            raise error
        return response

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = self._local.conn = kind(self.host, timeout=TIMEOUT, blocksize=BLOCK)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _error(response: Response, method: str) -> S3Error | None:
    """The error a response carries: an error status, or a 200 whose body is an <Error> (CopyObject, completion)."""
    body = response.body
    if response.status < 300 and not (method in ("PUT", "POST") and b"<Error>" in body[:300]):
        return None
    code, message = {304: "NotModified", 404: "NotFound", 412: "PreconditionFailed"}.get(response.status, str(response.status)), ""
    if body:
        try:
            root = ElementTree.fromstring(body)
            code = root.findtext("Code") or code
            message = root.findtext("Message") or ""
        except ElementTree.ParseError:
            message = body[:200].decode(errors="replace")
    return S3Error(response.status if response.status >= 300 else 500, code, message)


def _query(query: dict[str, str]) -> str:
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))


def sign(method: str, host: str, path: str, query: dict[str, str], headers: dict[str, str], region: str,
         credentials: Credentials, now: datetime, payload: str = UNSIGNED) -> dict[str, str]:
    """``headers`` plus the SigV4 ones (every header sent is signed; the payload is UNSIGNED-PAYLOAD unless
    ``payload`` gives its sha256, as the fast path's empty-bodied GETs do)."""
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    out = {**headers, "host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload}
    if credentials.token:
        out["x-amz-security-token"] = credentials.token
    names = sorted(out)
    signed_names = ";".join(names)
    canonical = "\n".join([method, quote(path, safe="/~"), _query(query),
                           *(f"{k}:{' '.join(out[k].split())}" for k in names), "", signed_names, payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{credentials.secret_key}".encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["authorization"] = (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                            f"SignedHeaders={signed_names}, Signature={signature}")
    del out["host"]  # http.client sends it (the same value)
    return out


def xml_text(body: bytes, *paths: str) -> list[list[str]]:
    """For each element matching the first path (namespace-agnostic), the text of the other paths under it."""
    root = ElementTree.fromstring(body)
    for element in root.iter():
        if "}" in element.tag:
            element.tag = element.tag.split("}", 1)[1]
    first, *rest = paths
    return [[item.findtext(p) or "" for p in rest] for item in root.iter(first)] if rest else [[root.findtext(first) or ""]]
