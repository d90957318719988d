"""Where a repository lives: a local directory with the bucket's exact layout, or an S3 prefix.

The one S3 wrapper, made by ``s3_backend`` (its requests are signed and sent by ``cairn.remote.s3http``). Immutable objects are
written with ``If-None-Match: *`` (single PUT or a multipart upload whose completion is conditional too), and a 412 is
an idempotent re-run only when the object already there has the same sha256; otherwise the write is
refused. Every object carries its sha256 (``ChecksumSHA256`` and ``x-amz-meta-sha256``) so a re-publish
can skip it after one LIST. Connection failures (a restarted server) are retried with backoff.

``copy`` makes a second key of bytes already in the bucket with one server-side ``CopyObject`` (no bytes
sent again); the publisher uses it only for content-addressed names, whose name fixes their content.

The directory backend (``FileBackend``) gives the same answers — the publisher's and the shared cache's
(``cairn.store.shared``): an immutable key is written once (a link, not a rename, gives it its name, so a racing
second writer is refused as S3 refuses it), ``get_file`` stops past ``max_bytes``, and a read, write or delete
never follows a symbolic link out of the directory.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import errno
import hashlib
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from urllib.parse import quote, urlparse
from xml.sax.saxutils import escape

from cairn.digest import file_sha256
from cairn.errors import CairnError
from cairn.io import TEMP_PREFIX, atomic_write, link_or_copy
from cairn.names import BUCKET_NAME, relpath_problem
from cairn.remote import access
from cairn.remote.background import in_background
from cairn.remote.places import check_url_place
from cairn.remote.s3http import (
    BodyTooLarge,
    ConnectionFailed,
    Response,
    S3Client,
    S3Error,
    find_credentials,
    find_endpoint,
    find_region,
    xml_text,
)

IMMUTABLE_CACHE = "public, max-age=31536000, immutable"
MUTABLE_CACHE = "no-cache"
# One PUT up to 1 GiB (S3 takes 5 GiB): S3 then checks the whole object's sha256 (``ChecksumSHA256``), which a
# multipart upload cannot give, and the publisher already uploads 16 objects at a time. Larger objects go up
# in 64 MiB parts, PART_THREADS at once, each with its Content-MD5; the completion is conditional.
MULTIPART_THRESHOLD = int(os.environ.get("CAIRN_MULTIPART_THRESHOLD", str(1 << 30)))
# A multipart upload under the prefix begun this long before a run (``abort_stale_uploads``) is a killed run's: S3
# keeps, and bills, its parts until it is aborted. Younger ones may be another live run's and are left alone.
STALE_UPLOAD_SECONDS = float(os.environ.get("CAIRN_MULTIPART_STALE_SECONDS", "3600"))
PART_SIZE = max(5 << 20, int(os.environ.get("CAIRN_MULTIPART_PART", str(64 << 20))))
PART_THREADS = 4
COPY_MAX = 5 << 30  # CopyObject's limit; larger objects are uploaded again instead


class ObjectTooLarge(CairnError):
    """An object holds more bytes than the reader was told it could (``get_file(max_bytes=…)``): not read further."""


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
class AccessState:
    """What a bucket says about anonymous reads, read before a publish writes anything: the Block Public Access
    settings that would stop them (``BlockPublicPolicy``, ``RestrictPublicBuckets``) and the bucket policy."""

    blocked: tuple[str, ...] = ()
    policy: bytes | None = None


@dataclass(frozen=True)
class Listed:
    size: int
    sha256: str = ""  # known for the local backend; S3 needs a HEAD or the signed metadata


class Backend(Protocol):
    counters: Counters

    @property
    def url(self) -> str: ...

    def list(self, prefix: str = "") -> dict[str, Listed]: ...

    def get(self, key: str) -> bytes | None: ...

    def head_sha256(self, key: str) -> str | None: ...

    def exists(self, key: str) -> bool: ...

    def get_file(self, key: str, dest: Path, *, max_bytes: int | None = None) -> bool: ...

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool, sha256: str = "") -> bool: ...

    def put_file(self, key: str, path: Path, *, content_type: str, immutable: bool, sha256: str) -> bool: ...

    def copy(self, source: str, key: str, *, content_type: str, immutable: bool, sha256: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def read_access(self) -> AccessState: ...

    def grant_public_read(self, state: AccessState | None = None) -> bool: ...


def _pread(handle: BinaryIO, offset: int, length: int) -> bytes:
    """Up to ``length`` bytes of an open file from ``offset`` (fewer only at its end); safe from many threads."""
    chunks, got = [], 0
    while got < length:
        chunk = os.pread(handle.fileno(), length - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _s3_time(text: str) -> Any:
    """An S3 timestamp (``2026-12-05T15:00:00.000Z``) as an aware datetime; unreadable: now (never stale)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def s3_backend(bucket: str, prefix: str = "") -> S3Backend:
    """The one way cairn reaches S3 (publish, the shared cache, verify, diff, ``cairn.io``'s s3:// reads): the
    wrapper for ``s3://bucket/prefix``, with the endpoint ``cairn.remote.s3http.find_endpoint`` picks from the
    environment (``$CAIRN_S3_ENDPOINT``, else ``$AWS_ENDPOINT_URL_S3``, else ``$AWS_ENDPOINT_URL``, else AWS), its
    region and credentials."""
    prefix = prefix.strip("/")
    url = f"s3://{bucket}/{prefix}"
    if not BUCKET_NAME.fullmatch(bucket):
        raise CairnError(f"'{url}': {f'{bucket!r} is not an S3 bucket name' if bucket else 'no bucket'} (3 to 63 lowercase "
                         "letters, digits, '.' and '-') — use s3://bucket/prefix")
    problem = relpath_problem(prefix) if prefix else ""
    if problem:  # '..' in a key is a path a server or proxy may normalize into another prefix, or bucket
        raise CairnError(f"'{url}': the prefix {prefix!r} {problem} — a prefix is plain names joined by '/'")
    return S3Backend(bucket, prefix, find_endpoint())


def open_backend(url: str) -> Backend:
    """``file:///dir``, a plain path, or ``s3://bucket/prefix`` (endpoint: ``s3_backend``'s rule)."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        return s3_backend(parsed.netloc, parsed.path)
    if parsed.scheme == "file":
        check_url_place(url)
    if parsed.scheme in ("", "file"):
        return FileBackend(Path(parsed.path if parsed.scheme == "file" else url))
    raise CairnError(f"cannot publish to '{url}' — use s3://bucket/prefix or file:///dir")


# -- local directory ----------------------------------------------------------------------------------------
_DIR_BELOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_new(parent: int, name: str, data: bytes) -> None:
    """The new file ``name`` in the directory ``parent`` holding ``data`` (0644, as ``atomic_write`` makes them)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        os.fchmod(fd, 0o644)  # whatever the umask: every file of a repository is world-readable


def _link_new(source: Path, parent: int, name: str) -> None:
    """The new name ``name`` in the directory ``parent`` for ``source``'s bytes: a hard link where the file system
    allows one, else a copy (clone where it can: ``copy_file_range``)."""
    try:
        os.link(source, name, dst_dir_fd=parent)
        return
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as out:
        left = os.fstat(src.fileno()).st_size
        with contextlib.suppress(OSError):  # refused (another file system on an older kernel): the plain copy below
            while left > 0 and (sent := os.copy_file_range(src.fileno(), fd, min(left, 1 << 30))):
                left -= sent
        if left:
            src.seek(0)
            out.seek(0)
            out.truncate()
            shutil.copyfileobj(src, out, 1 << 20)
        os.fchmod(fd, 0o644)


class NoSpace(CairnError):
    """The file system of a directory repository is full: one line naming the place and the space needed."""

    exit_code = 1


def human_bytes(n: int) -> str:
    """``n`` bytes for a person: 1.2 GB, 340.0 MB, 12 KB (decimal units, as ``df -H`` prints them)."""
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass
class FileBackend:
    """A directory with the bucket's layout. An artifact (``put_file``) becomes a hard link to its file where
    the file system allows one — the bundle's files are the store's, which are never modified in place (a tree
    is written elsewhere and renamed in whole; ``cairn.store.local``), and nothing here writes into a file
    either: every write is a new file renamed over the name (``atomic_write``), or for an immutable key linked onto
    it (``_create``: never over a file already there, as S3's ``If-None-Match: *``) — else a copy-on-write clone or a
    copy. The directory may be shared by machines and writable by others (the shared cache): no key leaves it,
    not through ``..`` nor through a symbolic link planted there. ``shown``: the directory the user named, when this writes into a temp sibling of it first
    (``cairn.publish.directory``); ``needed``: what the whole publish needs there, for the error when the disk
    fills."""

    root: Path
    counters: Counters = field(default_factory=Counters)
    shown: Path | None = None
    needed: int = 0
    fresh: bool = False  # writing a new repository into a temp sibling: a failure leaves nothing behind

    @property
    def url(self) -> str:
        return (self.shown or self.root).absolute().as_uri()

    def _path(self, key: str) -> Path:
        """The file of ``key``; a key that would leave the root (``..``, absolute, ``//``) is refused outright."""
        problem = relpath_problem(key.removesuffix("/"))
        if problem:
            raise CairnError(f"refusing object key {key!r} under {self.root}: it {problem} — a repository key is a relative path of plain names")
        return self.root / (key + "index.html" if key.endswith("/") else key)

    @contextlib.contextmanager
    def _writing(self, key: str) -> Any:
        """A full disk (or quota) while writing ``key`` is one line: where, and how much the publish needs."""
        try:
            yield
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW met a link where a directory was expected
                raise CairnError(f"{self.root}: a part of {key} is a symbolic link or a file, not a directory — refusing "
                                 "to write through it (out of the repository); remove it") from None
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise self.no_space(f"writing {key}") from None

    def no_space(self, doing: str) -> NoSpace:
        """The one-line error for a full file system under this repository (``doing``: what was being written)."""
        place = self.shown or self.root
        probe = next((p for p in (self.root, *self.root.parents) if p.exists()), Path("/"))
        free = os.statvfs(probe).f_bavail * os.statvfs(probe).f_frsize
        need = f"this publish needs about {human_bytes(self.needed)} there, {human_bytes(free)} is free" if self.needed else \
            f"{human_bytes(free)} is free"
        after = "nothing was written" if self.fresh else "the repository still serves what it served before (its timestamp is written last)"
        return NoSpace(f"{place}: no space left on device ({doing}) — {need}; free space there or publish to another place; {after}")

    def list(self, prefix: str = "") -> dict[str, Listed]:
        self.counters.lists += 1
        out: dict[str, Listed] = {}
        base = self.root / prefix if prefix else self.root
        if not base.exists():
            return out
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith(TEMP_PREFIX):
                    continue
                path = Path(dirpath) / name
                out[path.relative_to(self.root).as_posix()] = Listed(path.stat().st_size)
        return out

    def _parent(self, key: str, *, create: bool = False) -> tuple[int, str]:
        """An open descriptor of the directory holding ``key``, and its last name. The directories below the root are
        opened one at a time, each relative to the one before and never through a symbolic link (``O_NOFOLLOW``):
        a link planted in a shared directory (a cache several machines write) cannot lead a read, a write or a
        delete out of it, whatever it is swapped for between two calls. ``create``: make the missing ones."""
        parts = self._path(key).relative_to(self.root).parts
        if create:
            self.root.mkdir(parents=True, exist_ok=True)  # a new repository (the root itself is the user's to name)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in parts[:-1]:
                try:
                    below = os.open(name, _DIR_BELOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
                        os.mkdir(name, 0o755, dir_fd=fd)
                    below = os.open(name, _DIR_BELOW, dir_fd=fd)
                os.close(fd)
                fd = below
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    @contextlib.contextmanager
    def _reading(self, key: str) -> Any:
        """``key``'s file open for reading, or None when there is none. Only a regular file below the root is
        read: a symbolic link (at any depth) or a FIFO or device is refused in one line, never followed or waited
        on (``O_NONBLOCK``); any other failure to read is one line too, as S3's are."""
        try:
            parent, name = self._parent(key)
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
            finally:
                os.close(parent)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            fd = -1
        except OSError as exc:
            raise self._unreadable(key, exc) from None
        if fd < 0:
            yield None
            return
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                raise CairnError(f"{self.root}: {key} is not a regular file — a repository holds plain files; remove it")
            if stat.S_ISREG(mode):
                os.set_blocking(fd, True)
            yield handle if stat.S_ISREG(mode) else None  # a directory is no object, as S3 has none under that key

    def _unreadable(self, key: str, exc: OSError) -> CairnError:
        if exc.errno == errno.ELOOP:
            return CairnError(f"{self.root}: {key} is, or lies under, a symbolic link — refusing to follow it out of the "
                              "repository; remove the link")
        return CairnError(f"{self.root}: cannot read {key}: {exc.strerror or exc}")

    def get(self, key: str) -> bytes | None:
        self.counters.gets += 1
        with self._reading(key) as handle:
            try:
                return None if handle is None else handle.read()
            except OSError as exc:
                raise self._unreadable(key, exc) from None

    def get_file(self, key: str, dest: Path, *, max_bytes: int | None = None) -> bool:
        """``S3Backend.get_file`` of a directory: ``key``'s bytes copied to the file ``dest`` in chunks; False when
        there is no such key (``dest`` is then left empty). ``max_bytes``: an object bigger than that raises
        ObjectTooLarge once the copy passes it, and ``dest`` is left empty."""
        self.counters.gets += 1
        with open(dest, "wb") as out, self._reading(key) as handle:
            if handle is None:
                return False
            copied = 0
            try:
                while chunk := handle.read(1 << 20):
                    copied += len(chunk)
                    if max_bytes is not None and copied > max_bytes:
                        out.seek(0)
                        out.truncate()
                        raise ObjectTooLarge(f"{self.root}: {key} holds more than the {max_bytes} bytes it may — not read further")
                    out.write(chunk)
            except OSError as exc:
                raise self._unreadable(key, exc) from None
        return True

    def head_sha256(self, key: str) -> str | None:
        self.counters.heads += 1
        return self._sha256(key)

    def _sha256(self, key: str) -> str | None:
        with self._reading(key) as handle:
            if handle is None:
                return None
            try:
                return hashlib.file_digest(handle, "sha256").hexdigest()  # streamed: a GB wheel is never in memory whole
            except OSError as exc:
                raise self._unreadable(key, exc) from None

    def exists(self, key: str) -> bool:
        """Whether ``key`` is there, without reading it (``head_sha256`` reads the whole file to hash it)."""
        self.counters.heads += 1
        with self._reading(key) as handle:
            return handle is not None

    def _already_there(self, key: str, have: str | None, sha256: str) -> bool:
        """``key`` exists and holds ``have``: False when that is ``sha256`` (an idempotent re-run), else a RefusedOverwrite."""
        if have == sha256:
            self.counters.skipped += 1
            return False
        raise RefusedOverwrite(f"{key} already exists with different bytes — a published version is never replaced; bump the version")

    def _create(self, key: str, write: Callable[[int, str], None], sha256: str) -> bool:
        """``If-None-Match: *`` on a directory: ``write(dir_fd, name)`` makes a complete temp file in ``key``'s
        directory, which then gets ``key``'s name by ``link`` — which, unlike a rename, never replaces a file already
        there, so of two machines writing one key at once exactly one wins, as with S3. The loser's bytes are
        compared: the same (``sha256``) is an idempotent re-run (False); others are a RefusedOverwrite. A key
        already there is compared first, before anything is written (a re-publish copies no GB file for nothing)."""
        have = self._sha256(key)
        if have is not None:
            return self._already_there(key, have, sha256)
        with self._writing(key):
            parent, name = self._parent(key, create=True)
            temp = f"{TEMP_PREFIX}{name}.{uuid.uuid4().hex}"
            try:
                write(parent, temp)
                try:
                    os.link(temp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
                except FileExistsError:  # another writer was quicker
                    return self._already_there(key, self._sha256(key), sha256)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp, dir_fd=parent)
                os.close(parent)
        self.counters.puts += 1
        return True

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool, sha256: str = "") -> bool:
        path = self._path(key)
        if key.endswith("/") and path.exists() and path.read_bytes() == data:
            return False  # a directory alias of index.html: the same file on disk
        if immutable and not key.endswith("/"):
            return self._create(key, lambda parent, temp: _write_new(parent, temp, data), sha256 or sha256_hex(data))
        if path.exists():
            same = file_sha256(path) == (sha256 or sha256_hex(data))
            if same:
                self.counters.skipped += 1
                return False
            if immutable:
                raise RefusedOverwrite(f"{key} already exists with different bytes — a published version is never replaced; bump the version")
        with self._writing(key):
            atomic_write(path, data)
        self.counters.puts += 1
        return True

    def put_file(self, key: str, path: Path, *, content_type: str, immutable: bool, sha256: str) -> bool:
        """``key`` becomes ``path``'s bytes (``sha256``, checked by the caller): a hard link to it where the file
        system allows, else a clone or a copy (``link_or_copy``), made under a temp name and renamed; when
        ``immutable``, given its name only if the name is free (``_create``)."""
        if immutable:
            return self._create(key, lambda parent, temp: _link_new(path, parent, temp), sha256)
        dest = self._path(key)
        if dest.exists():
            if file_sha256(dest) == sha256:
                self.counters.skipped += 1
                return False
            if immutable:
                raise RefusedOverwrite(f"{key} already exists with different bytes — a published version is never replaced; bump the version")
        with self._writing(key):
            link_or_copy(path, dest)
        self.counters.puts += 1
        return True

    def copy(self, source: str, key: str, *, content_type: str, immutable: bool, sha256: str) -> bool:
        """A second name for ``source``'s bytes: a hard link where the filesystem allows one (the copies are of
        immutable objects, the consistent-snapshot twin of a GB wheel or deb), else a copy of the bytes."""
        path, origin = self._path(key), self._path(source)
        if path.exists() or not immutable:
            wrote = self.put_file(key, origin, content_type=content_type, immutable=immutable, sha256=sha256)
            if wrote:
                self.counters.puts -= 1
                self.counters.copies += 1
            return wrote
        with self._writing(key):
            link_or_copy(origin, path)
        self.counters.copies += 1
        return True

    def delete(self, key: str) -> None:
        """Remove ``key``'s name (a symbolic link there is removed itself, never what it points at); gone already
        is no error, as with S3; any other failure is one line."""
        try:
            parent, name = self._parent(key)
            try:
                os.unlink(name, dir_fd=parent)
            finally:
                os.close(parent)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            detail = "it lies under a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
            raise CairnError(f"{self.root}: cannot delete {key}: {detail}") from None

    def read_access(self) -> AccessState:
        return AccessState()

    def grant_public_read(self, state: AccessState | None = None) -> bool:
        """Nothing to grant: every file is written world-readable (0644), for whichever server serves the directory."""
        return False


# -- S3 -------------------------------------------------------------------------------------------------------
class S3Backend:
    def __init__(self, bucket: str, prefix: str, endpoint: str | None) -> None:
        self.bucket = bucket
        self.prefix = prefix + "/" if prefix else ""
        self.endpoint = endpoint
        self.counters = Counters()
        self.region = find_region()
        self.client = S3Client(endpoint, self.region, find_credentials())
        self.whole_bucket_public = False  # with no prefix, may the public-read grant name the whole bucket? (--public-bucket)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def http_url(self) -> str:
        """URL of the prefix for HTTP clients (pip, TUF) reading the bucket, in the style and region this client
        reaches it with (``cairn.remote.s3http``: path-style or virtual-hosted)."""
        client = self.client
        base = f"{client.scheme}://{client.host_for(self.bucket)}{client.base}"
        return f"{base}/{self.prefix}" if client.virtual_for(self.bucket) else f"{base}/{self.bucket}/{self.prefix}"

    def _call(self, what: str, method: str, key: str = "", **kwargs: Any) -> Response:
        """One request; connection-level failures (a server restarting) and 5xx are retried with exponential
        backoff for up to ``CAIRN_S3_RETRY_SECONDS`` (60)."""
        problem = relpath_problem(key.removesuffix("/")) if key else ""
        if problem:  # every key is checked here, whatever made it ('..' may be normalized by a proxy into another prefix)
            raise CairnError(f"refusing S3 key {key!r} under {self.url}: it {problem} — a repository key is plain names joined by '/'")
        delay = 0.2
        deadline = time.monotonic() + float(os.environ.get("CAIRN_S3_RETRY_SECONDS", "60"))
        while True:
            try:
                return self.client.request(method, self.bucket, self.prefix + key if key else "", **kwargs)
            except ConnectionFailed as exc:
                if time.monotonic() > deadline:
                    raise CairnError(f"S3 {what} failed: {exc} — check that {self.endpoint or 'S3'} is reachable and retry") from None
                self.counters.retries += 1
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def list(self, prefix: str = "") -> dict[str, Listed]:
        out: dict[str, Listed] = {}
        query = {"list-type": "2", "prefix": self.prefix + prefix}
        while True:
            self.counters.lists += 1
            body = self._checked("list", "GET", query=query).body
            for key, size in xml_text(body, "Contents", "Key", "Size"):
                out[key[len(self.prefix):]] = Listed(int(size))
            truncated, token = xml_text(body, "IsTruncated")[0][0], xml_text(body, "NextContinuationToken")[0][0]
            if truncated != "true" or not token:
                return out
            query = {**query, "continuation-token": token}

    def get(self, key: str) -> bytes | None:
        self.counters.gets += 1
        try:
            return self._call("get", "GET", key).body
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NotFound") or exc.status == 404:
                return None
            raise CairnError(f"S3 get {key}: {exc}") from None

    def head_sha256(self, key: str) -> str | None:
        self.counters.heads += 1
        try:
            head = self._call("head", "HEAD", key, headers={"x-amz-checksum-mode": "ENABLED"}).headers
        except S3Error as exc:
            if exc.status == 404:
                return None
            raise CairnError(f"S3 head {key}: {exc}") from None
        meta = head.get("x-amz-meta-sha256")
        if meta:
            return meta
        checksum = head.get("x-amz-checksum-sha256")
        return base64.b64decode(checksum).hex() if checksum and "-" not in checksum else ""

    def exists(self, key: str) -> bool:
        """Whether ``key`` is there: the one HEAD ``head_sha256`` makes."""
        return self.head_sha256(key) is not None

    def _checked(self, what: str, method: str, key: str = "", **kwargs: Any) -> Response:
        try:
            return self._call(what, method, key, **kwargs)
        except S3Error as exc:
            raise CairnError(f"S3 {what} {key}: {exc}") from None

    def _headers(self, content_type: str, immutable: bool, digest: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Cache-Control": IMMUTABLE_CACHE if immutable else MUTABLE_CACHE,
                   "x-amz-meta-sha256": digest}
        if immutable:
            headers["If-None-Match"] = "*"
        return headers

    def put(self, key: str, data: bytes, *, content_type: str, immutable: bool, sha256: str = "") -> bool:
        """Write ``data`` (``sha256``: its digest when the caller already has it — never trusted blindly:
        S3 recomputes it from the bytes of a single PUT and refuses a mismatch)."""
        view = memoryview(data)
        return self._put(key, len(data), data, lambda offset, length: bytes(view[offset:offset + length]),
                         content_type=content_type, immutable=immutable, sha256=sha256 or sha256_hex(data))

    def put_file(self, key: str, path: Path, *, content_type: str, immutable: bool, sha256: str) -> bool:
        """``put`` of a file that is never read into memory whole (an action's output archive, gigabytes): one PUT
        that sends it from disk, or from ``MULTIPART_THRESHOLD`` parts read from it as they are sent (at most
        ``PART_THREADS`` of them in memory). ``sha256``: the file's digest, which S3 checks."""
        with open(path, "rb") as body:
            return self._put(key, os.fstat(body.fileno()).st_size, body,
                             lambda offset, length: _pread(body, offset, length),
                             content_type=content_type, immutable=immutable, sha256=sha256)

    def _put(self, key: str, size: int, body: bytes | BinaryIO, read: Callable[[int, int], bytes], *,
             content_type: str, immutable: bool, sha256: str) -> bool:
        """The one write of new bytes: ``body`` in a single PUT that carries its checksum or, from
        ``MULTIPART_THRESHOLD`` bytes, parts taken with ``read(offset, length)``. A refused conditional write is an
        idempotent re-run, a concurrent write's conflict (written again) or a refused overwrite (``_already_there``)."""
        while True:
            headers = self._headers(content_type, immutable, sha256)
            try:
                if size >= MULTIPART_THRESHOLD:
                    self._multipart(key, headers, size, read)
                else:
                    headers["x-amz-checksum-sha256"] = base64.b64encode(bytes.fromhex(sha256)).decode()
                    self._call("put", "PUT", key, headers=headers, body=body)
            except S3Error as exc:
                if self._already_there(exc, key, sha256, "put"):
                    return False
                continue
            self.counters.puts += 1
            return True

    def get_file(self, key: str, dest: Path, *, max_bytes: int | None = None) -> bool:
        """Write ``key``'s bytes to the file ``dest`` as they arrive (never whole in memory); False when there is no
        such key (``dest`` is then left empty). ``max_bytes``: the most the object can hold (a size its record
        names); a bigger one is a CairnError as soon as it passes that, and ``dest`` is left empty."""
        self.counters.gets += 1
        with open(dest, "wb") as out:
            try:
                self._call("get", "GET", key, into=out, limit=max_bytes)
            except BodyTooLarge as exc:
                out.seek(0)
                out.truncate()
                raise ObjectTooLarge(f"S3 get {key}: {exc} — not read further") from None
            except S3Error as exc:
                if exc.code in ("NoSuchKey", "NotFound") or exc.status == 404:
                    return False
                raise CairnError(f"S3 get {key}: {exc}") from None
        return True

    def copy(self, source: str, key: str, *, content_type: str, immutable: bool, sha256: str) -> bool:
        """``key`` becomes a server-side copy of ``source`` (which must hold ``sha256``), with its own headers;
        conditional (``If-None-Match: *``) like a PUT when ``immutable``."""
        headers = {**self._headers(content_type, immutable, sha256), "x-amz-metadata-directive": "REPLACE",
                   "x-amz-copy-source": quote(f"{self.bucket}/{self.prefix}{source}", safe="/~")}
        try:
            self._call("copy", "PUT", key, headers=headers)
        except S3Error as exc:
            if self._already_there(exc, key, sha256, "copy"):
                return False
            return self.copy(source, key, content_type=content_type, immutable=immutable, sha256=sha256)
        self.counters.copies += 1
        return True

    def _already_there(self, exc: S3Error, key: str, digest: str, what: str) -> bool:
        """A refused conditional write: True when ``key`` already holds ``digest`` (an idempotent re-run), False
        for a conflict with a concurrent write (try again); raises when it holds other bytes or on any other error."""
        if exc.code not in ("PreconditionFailed", "ConditionalRequestConflict") and exc.status not in (409, 412):
            raise CairnError(f"S3 {what} {key}: {exc}") from None
        have = self.head_sha256(key)
        if have == digest:
            self.counters.skipped += 1
            return True
        if exc.code == "ConditionalRequestConflict" or exc.status == 409:
            return False
        raise RefusedOverwrite(f"{key} already exists with different bytes (sha256 {have or '?'}) — a published version is never replaced; bump the version") from None

    def _multipart(self, key: str, headers: dict[str, str], size: int, read: Callable[[int, int], bytes]) -> None:
        """A conditional multipart upload of ``size`` bytes, ``read(offset, length)`` giving each part when it is
        sent: parts (each with its Content-MD5), then a completion carrying ``If-None-Match: *``."""
        condition = {k: headers.pop(k) for k in ("If-None-Match",) if k in headers}
        created = self._call("create multipart", "POST", key, query={"uploads": ""}, headers=headers)
        upload_id = xml_text(created.body, "UploadId")[0][0]

        def part(number: int) -> tuple[int, str]:
            chunk = read((number - 1) * PART_SIZE, PART_SIZE)
            md5 = base64.b64encode(hashlib.md5(chunk).digest()).decode()
            sent = self._call("upload part", "PUT", key, query={"partNumber": str(number), "uploadId": upload_id},
                              headers={"Content-MD5": md5}, body=chunk)
            return number, sent.headers["etag"]

        try:
            with ThreadPoolExecutor(max_workers=PART_THREADS) as pool:
                parts = list(pool.map(part, range(1, (size + PART_SIZE - 1) // PART_SIZE + 1)))
            body = "<CompleteMultipartUpload>" + "".join(
                f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag></Part>" for n, etag in parts) + "</CompleteMultipartUpload>"
            self._call("complete multipart", "POST", key, query={"uploadId": upload_id}, headers=condition, body=body.encode())
        except Exception:
            with contextlib.suppress(S3Error, CairnError):  # the failure that matters is the one being raised
                self._call("abort multipart", "DELETE", key, query={"uploadId": upload_id})
            raise

    def abort_stale_uploads(self, older_than: float | None = None) -> builtins.list[str]:
        """Abort every multipart upload under this prefix begun more than ``older_than`` seconds ago (default
        ``STALE_UPLOAD_SECONDS``): a run killed mid-upload leaves its parts behind, stored and billed until
        aborted. Returns the keys whose uploads were aborted. Uploads outside the prefix are never touched."""
        cutoff = datetime.now(UTC) - timedelta(seconds=STALE_UPLOAD_SECONDS if older_than is None else older_than)
        query, stale = {"uploads": "", "prefix": self.prefix}, []
        while True:
            body = self._checked("list multipart uploads", "GET", query=query).body
            for key, upload_id, initiated in xml_text(body, "Upload", "Key", "UploadId", "Initiated"):
                if key.startswith(self.prefix) and _s3_time(initiated) < cutoff:
                    stale.append((key[len(self.prefix):], upload_id))
            truncated = xml_text(body, "IsTruncated")[0][0]
            (next_key,), (next_id,) = xml_text(body, "NextKeyMarker")[0], xml_text(body, "NextUploadIdMarker")[0]
            if truncated != "true" or not (next_key or next_id):
                break
            query = {**query, "key-marker": next_key, "upload-id-marker": next_id}
        for key, upload_id in stale:
            try:
                self._call("abort multipart", "DELETE", key, query={"uploadId": upload_id})
            except S3Error as exc:
                if exc.status != 404 and exc.code != "NoSuchUpload":  # gone meanwhile: what was wanted
                    raise CairnError(f"S3 abort of the stale multipart upload of {key}: {exc}") from None
        return [key for key, _ in stale]

    def read_access(self) -> AccessState:
        """The bucket's Block Public Access settings and policy: two reads, which ``cairn.publish.blob_sender`` makes while
        the bundle is still being checked, so that granting costs only the write when the bundle is good."""
        blocked = in_background(self._public_access_blocked, "cairn-access-block")  # at once with the policy's read
        policy = self._bucket_policy()
        return AccessState(tuple(blocked.result()), policy)

    def grant_public_read(self, state: AccessState | None = None) -> bool:
        """Make the bucket policy let anyone read the repository over HTTP (``cairn.remote.access`` says what
        it grants and why); True when the policy had to be written. ``state``: the bucket as ``read_access``
        found it (read now when not given). After a write, one more read confirms that no concurrent publisher
        replaced the policy (then it is merged again, up to 3 times)."""
        state = state or self.read_access()
        if state.blocked:
            raise CairnError(f"s3://{self.bucket}: S3 Block Public Access is on for this bucket ({' and '.join(state.blocked)}), so pip, "
                             "uv and the TUF client could not read the index anonymously — turn it off for this bucket (aws s3api "
                             f"delete-public-access-block --bucket {self.bucket}); nothing was published")
        existing, wrote = state.policy, False
        for _attempt in range(3):
            policy = access.merged(existing, self.bucket, self.prefix, self.client.region_for(self.bucket),
                                   whole_bucket=self.whole_bucket_public)
            if policy is None:
                return wrote
            self._put_bucket_policy(policy)
            wrote = True
            existing = self._bucket_policy()
        raise CairnError(f"s3://{self.bucket}: the bucket policy kept changing under this publish (another publisher?) "
                         "— publish again; nothing was published")

    def _public_access_blocked(self) -> builtins.list[str]:  # ``list`` here is the method above
        """The bucket's Block Public Access settings that would stop anonymous reads: ``BlockPublicPolicy`` refuses the
        policy, ``RestrictPublicBuckets`` ignores it. Unreadable (no permission) or absent: none known, carry on —
        an account-wide block still makes S3 refuse the policy, which ``_put_bucket_policy`` reports."""
        try:
            body = self._call("get public access block", "GET", query={"publicAccessBlock": ""}).body
        except S3Error:
            return []
        names = ("BlockPublicPolicy", "RestrictPublicBuckets")
        values = xml_text(body, "PublicAccessBlockConfiguration", *names)
        return [name for name, value in zip(names, values[0] if values else [], strict=False) if value.lower() == "true"]

    def _bucket_policy(self) -> bytes | None:
        try:
            return self._call("get policy", "GET", query={"policy": ""}).body
        except S3Error as exc:
            if exc.code == "NoSuchBucketPolicy":
                return None
            raise CairnError(f"s3://{self.bucket}: cannot read its bucket policy ({exc}) — the publishing credentials need "
                             "s3:GetBucketPolicy and s3:PutBucketPolicy on the bucket") from None

    def _put_bucket_policy(self, policy: bytes) -> None:
        md5 = base64.b64encode(hashlib.md5(policy).digest()).decode()  # PutBucketPolicy requires it
        try:
            self._call("put policy", "PUT", query={"policy": ""}, body=policy,
                       headers={"Content-Type": "application/json", "Content-MD5": md5})
        except S3Error as exc:
            fix = (f"turn off S3 Block Public Access (BlockPublicPolicy) for this bucket (aws s3api delete-public-access-block "
                   f"--bucket {self.bucket}) and give the publishing credentials s3:PutBucketPolicy") if exc.status == 403 else "retry"
            raise CairnError(f"s3://{self.bucket}: S3 refused the public-read bucket policy ({exc}) — {fix}; nothing was published") from None

    def delete(self, key: str) -> None:
        try:
            self._call("delete", "DELETE", key)
        except S3Error as exc:
            if exc.status != 404:
                raise CairnError(f"S3 delete {key}: {exc}") from None
