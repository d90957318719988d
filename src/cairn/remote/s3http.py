"""The S3 REST calls the publisher makes, signed (SigV4) and sent over kept-alive ``http.client`` connections.

Why not botocore for these: creating its S3 client parses the service model, and each call goes through its
request pipeline (serialisation, events, parsing) — on a publish of a few hundred small objects that was most
of the client's CPU (``bench/results/publish.json`` measures the publish as it is now). Only ``S3Backend``
(``cairn.remote.backend``, the one S3 wrapper, made by ``s3_backend``) uses this module; the endpoint comes from
``find_endpoint`` (``$CAIRN_S3_ENDPOINT`` first); credentials come from the environment, else from botocore's credential chain
(profiles, SSO, instance roles), which loads no service model.

Addressing. Requests name the bucket in the path (``host/bucket/key``, what moto, MinIO and most S3-compatible
servers take) for an endpoint of one's own, and in the host name (``bucket.s3.<region>.amazonaws.com/key``,
"virtual-hosted", what AWS asks of new buckets) for AWS itself when the bucket name allows it (no '.', which
the wildcard certificate would not cover). ``$CAIRN_S3_ADDRESSING`` (``path``, ``virtual``, ``auto``) overrides
that. A bucket may be in another region than the one configured, and a server may refuse the style chosen: a
request answered by a redirect (301/307), a wrong-region signature error or NoSuchBucket makes the client
*discover* the bucket once — ``HEAD`` of the bucket in the current style, then the other (``auto`` only), taking
the region from ``x-amz-bucket-region`` (which S3 sends on a 200, a 301 and a 403 alike) — and the request is
sent again as discovery says. A virtual host under a ``localhost`` name (``bucket.s3.localhost``) is connected
to on 127.0.0.1, as RFC 6761 §6.3 asks of name resolution (glibc here resolves no such name).

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

from cairn.errors import CairnError

UNSIGNED = "UNSIGNED-PAYLOAD"
TIMEOUT = 60
RETRYABLE_STATUS = (500, 502, 503, 504)
BLOCK = 1 << 20  # a file body is sent, and a body written to a file is read, this much at a time


class ConnectionFailed(Exception):
    """The server could not be reached or dropped the connection (a restart): worth retrying."""


class BodyTooLarge(Exception):
    """A response body passed the size its caller said it could have (``request(limit=…)``): never written whole."""


class S3Error(Exception):
    """An S3 error response: HTTP status plus the error code of its XML body (or of the status, for HEAD)."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.headers: Mapping[str, str] = headers or {}  # lower-cased names: x-amz-bucket-region among them


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
    # lazy: botocore, urllib3, dateutil, 132 ms at start-up (python -X importtime)
    import botocore.session

    found = botocore.session.get_session().get_credentials()
    if found is None:
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


ADDRESSING = ("auto", "path", "virtual")
# answers that mean "not here, not like this": the bucket is in another region, or the server wants the other style
_REDIRECTS = (301, 307)
_DISCOVER_CODES = ("PermanentRedirect", "TemporaryRedirect", "AuthorizationHeaderMalformed",
                   "IllegalLocationConstraintException", "NoSuchBucket")


class S3Client:
    """Signed requests to one endpoint (``http://host:port`` or, without one, the region's AWS endpoint), path-style
    or virtual-hosted per bucket (the module's docstring says which and why)."""

    def __init__(self, endpoint: str | None, region: str, credentials: Credentials, addressing: str | None = None) -> None:
        parsed = urlparse(endpoint or f"https://s3.{region}.amazonaws.com")
        self.scheme, self.host, self.base = parsed.scheme, parsed.netloc, parsed.path.rstrip("/")
        self.region, self.credentials = region, credentials
        self.own_endpoint = endpoint is not None
        self.addressing = addressing or os.environ.get("CAIRN_S3_ADDRESSING") or "auto"
        if self.addressing not in ADDRESSING:
            raise CairnError(f"CAIRN_S3_ADDRESSING={self.addressing!r} is not one of {', '.join(ADDRESSING)} — unset it "
                             "(auto) or pick one")
        self._virtual: dict[str, bool] = {}  # bucket → virtual-hosted, as discovery found
        self._regions: dict[str, str] = {}  # bucket → its region, as discovery found
        self._discovered: set[str] = set()
        self._discovering = threading.Lock()
        self._local = threading.local()
        # called with (method, path and query, headers) before each request is sent: what the server receives
        self.observers: list[Callable[[str, str, dict[str, str]], None]] = []

    # -- addressing -----------------------------------------------------------------------------------------
    def virtual_for(self, bucket: str) -> bool:
        """Whether requests for ``bucket`` name it in the host."""
        if bucket in self._virtual:
            return self._virtual[bucket]
        if self.addressing != "auto":
            return self.addressing == "virtual"
        return not self.own_endpoint and "." not in bucket  # AWS: virtual-hosted where its certificate covers it

    def region_for(self, bucket: str) -> str:
        return self._regions.get(bucket, self.region)

    def host_for(self, bucket: str, virtual: bool | None = None) -> str:
        """The Host a request for ``bucket`` goes to (and is signed for)."""
        host = self.host if self.own_endpoint else f"s3.{self.region_for(bucket)}.amazonaws.com"
        virtual = self.virtual_for(bucket) if virtual is None else virtual
        return f"{bucket}.{host}" if virtual and bucket else host

    def discover(self, bucket: str) -> bool:
        """Find how ``bucket`` answers (once per client and bucket): HEAD of the bucket in the current style, then
        in the other (``auto`` only), in the region ``x-amz-bucket-region`` names. True when the style or the
        region changed, so that a refused request is worth sending again."""
        with self._discovering:
            if bucket in self._discovered:
                return False
            self._discovered.add(bucket)
            before = (self.virtual_for(bucket), self.region_for(bucket))
            styles = [before[0], not before[0]] if self.addressing == "auto" else [before[0]]
            for virtual in styles:
                for _attempt in range(2):  # the second time in the region a redirect or refusal named
                    try:
                        head = self._send("HEAD", bucket, "", {}, {}, b"", None, virtual=virtual)
                    except ConnectionFailed:  # e.g. a virtual host name that does not resolve
                        break
                    except S3Error as exc:
                        named = exc.headers.get("x-amz-bucket-region", "")
                        if named and named != self.region_for(bucket):
                            self._regions[bucket] = named
                            continue
                        break
                    named = head.headers.get("x-amz-bucket-region", "")
                    if named:
                        self._regions[bucket] = named
                    self._virtual[bucket] = virtual
                    return (virtual, self.region_for(bucket)) != before
            return self.region_for(bucket) != before[1]

    def request(self, method: str, bucket: str, key: str = "", *, query: dict[str, str] | None = None,
                headers: dict[str, str] | None = None, body: bytes | BinaryIO = b"", into: BinaryIO | None = None,
                limit: int | None = None) -> Response:
        """One signed request; raises S3Error for an error status, ConnectionFailed when the server is gone.

        ``body`` may be an open file, sent from its start in blocks (an archive of gigabytes never sits in
        memory); ``into``: a file that a successful response's body is written to, from its start, in blocks
        (the ``Response`` then carries no body). Both are rewound first, so a retry sends and keeps one copy.
        ``limit``: the most bytes ``into`` may receive; a longer body raises BodyTooLarge once it passes it.
        A redirect, a wrong-region refusal or NoSuchBucket first makes the client discover the bucket
        (``discover``) and, when that changed how it is reached, the request is sent once more."""
        query, sent = query or {}, {k.lower(): str(v) for k, v in (headers or {}).items()}
        used = (self.virtual_for(bucket), self.region_for(bucket))
        try:
            return self._send(method, bucket, key, query, sent, body, into, limit=limit)
        except S3Error as exc:
            if not (bucket and (exc.status in _REDIRECTS or exc.code in _DISCOVER_CODES)):
                raise
            self.discover(bucket)  # once per bucket; a request that failed meanwhile finds what it found
            if (self.virtual_for(bucket), self.region_for(bucket)) == used:
                raise
        return self._send(method, bucket, key, query, sent, body, into, limit=limit)

    def _send(self, method: str, bucket: str, key: str, query: dict[str, str], headers: dict[str, str],
              body: bytes | BinaryIO, into: BinaryIO | None, *, virtual: bool | None = None,
              limit: int | None = None) -> Response:
        virtual = self.virtual_for(bucket) if virtual is None else virtual
        host = self.host_for(bucket, virtual)
        path = (self.base + (f"/{key}" if key else "/")) if virtual and bucket else f"{self.base}/{bucket}" + (f"/{key}" if key else "")
        sent = dict(headers)
        if isinstance(body, bytes):
            sent["content-length"] = str(len(body))
        else:
            body.seek(0)
            sent["content-length"] = str(os.fstat(body.fileno()).st_size)
        signed = sign(method, host, path, query, sent, self.region_for(bucket), self.credentials, datetime.now(UTC))
        signed["host"] = host  # sent as signed, whichever address the connection goes to
        target = quote(path, safe="/~") + ("?" + _query(query) if query else "")
        for observe in self.observers:
            observe(method, target, signed)
        conn = self._connection(host)
        try:
            conn.request(method, target, body=body, headers=signed)
            raw = conn.getresponse()
            if into is not None and 200 <= raw.status < 300:
                into.seek(0)
                into.truncate()
                written, announced = 0, raw.getheader("content-length") or ""
                if limit is not None and announced.isdigit() and int(announced) > limit:
                    self._drop()
                    raise BodyTooLarge(f"{announced} bytes, more than the {limit} expected")
                while chunk := raw.read(BLOCK):
                    written += len(chunk)
                    if limit is not None and written > limit:
                        self._drop()
                        raise BodyTooLarge(f"more than the {limit} bytes expected")
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

    def _connection(self, host: str) -> http.client.HTTPConnection:
        """This thread's kept-alive connection to ``host`` (a ``localhost`` name is reached on 127.0.0.1)."""
        conns: dict[str, http.client.HTTPConnection] = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(host)
        if conn is None:
            name, _, port = host.rpartition(":") if host.rsplit(":", 1)[-1].isdigit() else (host, "", "")
            address = "127.0.0.1" if name == "localhost" or name.endswith(".localhost") else name
            kind = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = conns[host] = kind(address, int(port) if port else None, timeout=TIMEOUT, blocksize=BLOCK)
        self._local.current = host
        return conn

    def _drop(self) -> None:
        conns: dict[str, http.client.HTTPConnection] = self._local.__dict__.get("conns", {})
        conn = conns.pop(getattr(self._local, "current", ""), None)
        if conn is not None:
            conn.close()


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
    return S3Error(response.status if response.status >= 300 else 500, code, message, response.headers)


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
