"""Where a repository lives: a local directory with the bucket's exact layout, or an S3 prefix (boto3).

The one S3 wrapper. Immutable objects are written with ``IfNoneMatch='*'`` (single PUT or a manual
multipart upload whose completion is conditional too — s3transfer cannot pass the condition), and a 412 is
an idempotent re-run only when the object already there has the same sha256; otherwise the write is
refused. Every object carries its sha256 (``ChecksumSHA256`` and ``x-amz-meta-sha256``) so a re-publish
can skip it after one LIST. Connection failures (a restarted server) are retried with backoff.

``copy`` makes a second key of bytes already in the bucket with one server-side ``CopyObject`` (no bytes
sent again); the publisher uses it only for content-addressed names, whose name fixes their content.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlparse

from cairn.errors import CairnError

IMMUTABLE_CACHE = "public, max-age=31536000, immutable"
MUTABLE_CACHE = "no-cache"
# One PUT up to 1 GiB (S3 takes 5 GiB): S3 then checks the whole object's sha256 (``ChecksumSHA256``), which a
# multipart upload cannot give, and the publisher already uploads 16 objects at a time. Larger objects go up
# in 64 MiB parts, PART_THREADS at once, each with its Content-MD5; the completion is conditional.
MULTIPART_THRESHOLD = int(os.environ.get("CAIRN_MULTIPART_THRESHOLD", str(1 << 30)))
PART_SIZE = max(5 << 20, int(os.environ.get("CAIRN_MULTIPART_PART", str(64 << 20))))
PART_THREADS = 4
COPY_MAX = 5 << 30  # CopyObject's limit; larger objects are uploaded again instead
T = TypeVar("T")


class RefusedOverwrite(CairnError):
    """An immutable object already exists with different bytes: a version is never re-published."""

    exit_code = 1


@dataclass
class Counters:
    puts: int = 0
    gets: int = 0
    lists: int = 0
    heads: int = 0
    copies: int = 0
    retries: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class Listed:
    size: int
    sha256: str = ""  # known for the local backend; S3 needs a HEAD or the signed metadata


class Backend(Protocol):
    url: str
    counters: Counters

    def list(self, prefix: str = "") -> dict[str, Listed]: ...

    def get(self, key: str) -> bytes | None: ...

    def head_sha256(self, key: str) -> str | None: ...

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool, sha256: str = "") -> bool: ...

    def copy(self, source: str, key: str, *, content_type: str, immutable: bool, sha256: str) -> bool: ...

    def delete(self, key: str) -> None: ...


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def open_backend(url: str) -> Backend:
    """``file:///dir``, a plain path, or ``s3://bucket/prefix`` (endpoint from ``$CAIRN_S3_ENDPOINT``)."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        return S3Backend(parsed.netloc, parsed.path.strip("/"), os.environ.get("CAIRN_S3_ENDPOINT") or None)
    if parsed.scheme in ("", "file"):
        return FileBackend(Path(parsed.path if parsed.scheme == "file" else url))
    raise CairnError(f"cannot publish to '{url}' — use s3://bucket/prefix or file:///dir")


# -- local directory ----------------------------------------------------------------------------------------
@dataclass
class FileBackend:
    root: Path
    counters: Counters = field(default_factory=Counters)

    @property
    def url(self) -> str:
        return self.root.absolute().as_uri()

    def _path(self, key: str) -> Path:
        return self.root / (key + "index.html" if key.endswith("/") else key)

    def list(self, prefix: str = "") -> dict[str, Listed]:
        self.counters.lists += 1
        out: dict[str, Listed] = {}
        base = self.root / prefix if prefix else self.root
        if not base.exists():
            return out
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                path = Path(dirpath) / name
                out[path.relative_to(self.root).as_posix()] = Listed(path.stat().st_size)
        return out

    def get(self, key: str) -> bytes | None:
        self.counters.gets += 1
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def head_sha256(self, key: str) -> str | None:
        self.counters.heads += 1
        data = self.get(key)
        return None if data is None else sha256_hex(data)

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool, sha256: str = "") -> bool:
        path = self._path(key)
        if key.endswith("/") and path.exists() and path.read_bytes() == data:
            return False  # a directory alias of index.html: the same file on disk
        if path.exists():
            same = sha256_hex(path.read_bytes()) == (sha256 or sha256_hex(data))
            if same:
                self.counters.skipped += 1
                return False
            if immutable:
                raise RefusedOverwrite(f"{key} already exists with different bytes — a published version is never replaced; bump the version")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        self.counters.puts += 1
        return True

    def copy(self, source: str, key: str, *, content_type: str, immutable: bool, sha256: str) -> bool:
        """A second file with ``source``'s bytes (a real copy: tampering one file never changes the other)."""
        wrote = self.put(key, self._path(source).read_bytes(), content_type=content_type, immutable=immutable, sha256=sha256)
        if wrote:
            self.counters.puts -= 1
            self.counters.copies += 1
        return wrote

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


# -- S3 -------------------------------------------------------------------------------------------------------
class S3Backend:
    def __init__(self, bucket: str, prefix: str, endpoint: str | None) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix + "/" if prefix else ""
        self.endpoint = endpoint
        self.counters = Counters()
        # checksums: this wrapper sends its own (SHA256 of the whole object, which S3 checks, and MD5 per part),
        # so botocore need not hash every byte again — neither a CRC32 nor, over plain http, a SigV4 payload sha256
        config = Config(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=32,
                        connect_timeout=5, read_timeout=60, s3={"addressing_style": "path", "payload_signing_enabled": False},
                        request_checksum_calculation="when_required")
        self.client = boto3.client("s3", endpoint_url=endpoint, config=config,
                                   region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def http_url(self) -> str:
        """Path-style URL of the prefix, for HTTP clients (pip, TUF) reading the bucket."""
        base = (self.endpoint or f"https://{self.bucket}.s3.amazonaws.com").rstrip("/")
        return f"{base}/{self.bucket}/{self.prefix}" if self.endpoint else f"{base}/{self.prefix}"

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        """Retry connection-level failures (server restarting) with exponential backoff, up to ~60 s."""
        from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

        delay = 0.2
        deadline = time.monotonic() + float(os.environ.get("CAIRN_S3_RETRY_SECONDS", "60"))
        while True:
            try:
                return call()
            except (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise CairnError(f"S3 {what} failed: {exc} — check that {self.endpoint or 'S3'} is reachable and retry") from None
                self.counters.retries += 1
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def list(self, prefix: str = "") -> dict[str, Listed]:
        out: dict[str, Listed] = {}
        token: dict[str, Any] = {}
        while True:
            self.counters.lists += 1
            page = self._retry("list", lambda token=token: self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix + prefix, **token))
            for obj in page.get("Contents", []):
                out[obj["Key"][len(self.prefix):]] = Listed(int(obj["Size"]))
            if not page.get("IsTruncated"):
                return out
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        self.counters.gets += 1
        try:
            return self._retry("get", lambda: self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read())
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
                return None
            raise CairnError(f"S3 get {key}: {exc}") from None

    def head_sha256(self, key: str) -> str | None:
        from botocore.exceptions import ClientError

        self.counters.heads += 1
        try:
            head = self._retry("head", lambda: self.client.head_object(Bucket=self.bucket, Key=self.prefix + key, ChecksumMode="ENABLED"))
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "404", "NotFound"):
                return None
            raise CairnError(f"S3 head {key}: {exc}") from None
        meta = head.get("Metadata", {}).get("sha256")
        if meta:
            return str(meta)
        checksum = head.get("ChecksumSHA256")
        return base64.b64decode(checksum).hex() if checksum and "-" not in checksum else ""

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool, sha256: str = "") -> bool:
        """Write ``data`` (``sha256``: its digest when the caller already has it — never trusted blindly:
        S3 recomputes it from the bytes of a single PUT and refuses a mismatch)."""
        from botocore.exceptions import ClientError

        digest = sha256 or sha256_hex(data)
        args: dict[str, Any] = {
            "Bucket": self.bucket, "Key": self.prefix + key, "ContentType": content_type,
            "CacheControl": IMMUTABLE_CACHE if immutable else MUTABLE_CACHE, "Metadata": {"sha256": digest},
        }
        if immutable:
            args["IfNoneMatch"] = "*"
        try:
            if len(data) >= MULTIPART_THRESHOLD:
                self._multipart(args, data)
            else:
                self._retry("put", lambda: self.client.put_object(
                    Body=data, ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode(), **args))
        except ClientError as exc:
            if self._already_there(exc, key, digest, "put"):
                return False
            return self.put(key, data, content_type=content_type, immutable=immutable, sha256=digest)
        self.counters.puts += 1
        return True

    def copy(self, source: str, key: str, *, content_type: str, immutable: bool, sha256: str) -> bool:
        """``key`` becomes a server-side copy of ``source`` (which must hold ``sha256``), with its own headers;
        conditional (``If-None-Match: *``) like a PUT when ``immutable``."""
        from botocore.exceptions import ClientError

        args: dict[str, Any] = {
            "Bucket": self.bucket, "Key": self.prefix + key, "CopySource": {"Bucket": self.bucket, "Key": self.prefix + source},
            "MetadataDirective": "REPLACE", "ContentType": content_type,
            "CacheControl": IMMUTABLE_CACHE if immutable else MUTABLE_CACHE, "Metadata": {"sha256": sha256},
        }
        if immutable:
            args["IfNoneMatch"] = "*"
        try:
            self._retry("copy", lambda: self.client.copy_object(**args))
        except ClientError as exc:
            if self._already_there(exc, key, sha256, "copy"):
                return False
            return self.copy(source, key, content_type=content_type, immutable=immutable, sha256=sha256)
        self.counters.copies += 1
        return True

    def _already_there(self, exc: Any, key: str, digest: str, what: str) -> bool:
        """A refused conditional write: True when ``key`` already holds ``digest`` (an idempotent re-run), False
        for a conflict with a concurrent write (try again); raises when it holds other bytes or on any other error."""
        code = exc.response["Error"]["Code"]
        if code not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
            raise CairnError(f"S3 {what} {key}: {exc}") from None
        have = self.head_sha256(key)
        if have == digest:
            self.counters.skipped += 1
            return True
        if code in ("ConditionalRequestConflict", "409"):
            return False
        raise RefusedOverwrite(f"{key} already exists with different bytes (sha256 {have or '?'}) — a published version is never replaced; bump the version") from None

    def _multipart(self, args: dict[str, Any], data: bytes) -> None:
        """A conditional multipart upload: parts, then ``CompleteMultipartUpload(IfNoneMatch='*')``."""
        condition = {k: args.pop(k) for k in ("IfNoneMatch",) if k in args}
        upload = self._retry("create multipart", lambda: self.client.create_multipart_upload(**args))
        upload_id = upload["UploadId"]
        view = memoryview(data)

        def part(number: int) -> dict[str, Any]:
            chunk = bytes(view[(number - 1) * PART_SIZE:number * PART_SIZE])
            md5 = base64.b64encode(hashlib.md5(chunk).digest()).decode()
            result = self._retry("upload part", lambda: self.client.upload_part(
                Bucket=args["Bucket"], Key=args["Key"], UploadId=upload_id, PartNumber=number, Body=chunk, ContentMD5=md5))
            return {"ETag": result["ETag"], "PartNumber": number}

        try:
            with ThreadPoolExecutor(max_workers=PART_THREADS) as pool:
                parts = list(pool.map(part, range(1, (len(data) + PART_SIZE - 1) // PART_SIZE + 1)))
            self._retry("complete multipart", lambda: self.client.complete_multipart_upload(
                Bucket=args["Bucket"], Key=args["Key"], UploadId=upload_id, MultipartUpload={"Parts": parts}, **condition))
        except Exception:
            self.client.abort_multipart_upload(Bucket=args["Bucket"], Key=args["Key"], UploadId=upload_id)
            raise

    def delete(self, key: str) -> None:
        self._retry("delete", lambda: self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key))
