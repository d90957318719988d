"""Cairn's I/O layer: read a URL (a path, ``file://``, ``http(s)://``, ``s3://``), download one to a file, write a
file atomically.

Every stage that reads an input by URL or writes a file another process may read at the same time goes
through here, so a reader never sees half a file, a failed download never leaves one behind, and every
unreadable URL is one ``UrlError`` line (its ``status`` tells a missing object from a refused one). ``s3://``
goes through the one S3 wrapper (``cairn.remote.backend.s3_backend``), whose endpoint rule is
``cairn.remote.s3http.find_endpoint``. Protocol clients that speak more than "GET this URL" keep their own
connection: the registry client of ``cairn.sign.cosign`` and the package index client of ``cairn.sources.pypi``.
"""

from __future__ import annotations

import fcntl
import http.client
import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from cairn.errors import CairnError, UrlError


def cache_dir(kind: str) -> Path:
    """Per-user cache for things fetched again cheaply (archive indexes): ``$XDG_CACHE_HOME/cairn/<kind>``."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = root / "cairn" / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# what an interrupted atomic_write can leave next to its file: listings of a directory others write skip it
TEMP_PREFIX = ".tmp-"


def output_place(path: Path) -> Path:
    """Make ``path``'s directory, or refuse in one line a path that cannot become a file (a directory, or under
    a file): checked before a command does work whose result would then have nowhere to go."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CairnError(f"{path}: cannot be written — a part of {path.parent} is a file, not a directory") from None
    if path.is_dir():
        raise CairnError(f"{path}: is a directory — give the path of a file to write")
    return path


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and ``os.replace``; ``durable``
    also flushes it to disk first (a record that must survive a power cut once its rename is seen)."""
    output_place(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold ``lock_file`` (made if absent) exclusively while the block runs; another holder, a thread or another
    process, waits. Why: two actions that would make the same cached file at once (two gates reading one image's
    layers) make it once, the second one reading what the first wrote. The lock goes with the process, so a
    killed holder never leaves it held."""
    output_place(lock_file)
    with open(lock_file, "a") as handle:  # each open is its own lock: threads of one process exclude each other too
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def link_or_copy(source: Path, dest: Path) -> None:
    """``dest`` becomes another name for ``source``'s bytes: a hard link where the filesystem allows one (the
    store's files are immutable, and a GB deb or wheel is then stored once), else a copy. Made under a temp name
    and renamed, so a reader or a racing writer only ever sees a complete file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{TEMP_PREFIX}{dest.name}.{os.getpid()}.{threading.get_ident()}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, dest)


# -- reading a URL ----------------------------------------------------------------------------------------
def check_url_place(url: str) -> None:
    """Refuse a URL that names no place, before it is mistaken for another one: ``file://dir/x`` is the file
    ``/x`` on host ``dir`` (a repository published or verified there would be ``/x``), and ``https://`` or
    ``s3://`` with nothing after them would otherwise be read as a relative path."""
    parsed = urlparse(url)
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise CairnError(f"'{url}' names the host {parsed.netloc!r} — a local directory is file:///absolute/dir "
                         "(three slashes) or a plain path")
    if parsed.scheme in ("http", "https", "s3") and not parsed.netloc:
        what = "bucket" if parsed.scheme == "s3" else "host"
        raise CairnError(f"'{url}' names no {what} — give {parsed.scheme}://{what}/path")


_BUCKETS: dict[tuple[str | None, str, str, str], Any] = {}


def _s3_bucket(bucket: str) -> Any:
    """The one S3 wrapper (``cairn.remote.backend.s3_backend``: signed requests with the environment's
    credentials, its endpoint rule, its retries) for ``bucket``, made once per bucket and environment so its
    connections stay alive across reads. Imported here, not at the top: most commands never read S3, and the
    wrapper sits with the publisher that writes the buckets."""
    from cairn.remote.backend import s3_backend
    from cairn.remote.s3http import find_endpoint, find_region

    mine = (find_endpoint(), bucket, find_region(), os.environ.get("AWS_ACCESS_KEY_ID", ""))
    if mine not in _BUCKETS:
        _BUCKETS[mine] = s3_backend(bucket)
    return _BUCKETS[mine]


def _s3_key(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    key = unquote(parsed.path.lstrip("/"))
    if not parsed.netloc or not key:
        raise UrlError("an s3:// URL names a bucket and a key (s3://BUCKET/KEY)", url, "no bucket or key")
    return parsed.netloc, key


def _s3_bytes(url: str) -> bytes:
    bucket, key = _s3_key(url)
    try:
        data: bytes | None = _s3_bucket(bucket).get(key)
    except CairnError as exc:  # refused (403), no credentials, or the endpoint stayed unreachable through the retries
        raise UrlError(str(exc), url, str(exc)) from None
    if data is None:
        raise UrlError("404 NoSuchKey", url, "404 NoSuchKey: no such key", 404)
    return data


def _open(url: str, timeout: float) -> BinaryIO:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return open(parsed.path, "rb")
    if not parsed.scheme or "://" not in url:  # a plain path (``a:b/matrix.json`` is one too)
        return open(url, "rb")
    if parsed.scheme in ("http", "https"):
        return urllib.request.urlopen(url, timeout=timeout)  # type: ignore[no-any-return]
    if parsed.scheme == "s3":
        return BytesIO(_s3_bytes(url))
    raise UrlError("only file, http, https and s3 URLs are supported here", url, "unsupported scheme")


@contextmanager
def _failures(url: str, verb: str) -> Iterator[None]:
    """What the transports raise, as one UrlError ``cannot <verb> <url>: <reason>`` that keeps the transport's own
    text (``detail``) and the status that said no (404 for a missing file too)."""
    try:
        yield
    except urllib.error.HTTPError as exc:
        raise UrlError(f"cannot {verb} {url}: {exc.reason}", url, str(exc), exc.code) from None
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise UrlError(f"cannot {verb} {url}: {exc}", url, str(exc), 404) from None
    except (OSError, urllib.error.URLError, http.client.HTTPException) as exc:
        raise UrlError(f"cannot {verb} {url}: {getattr(exc, 'reason', exc)}", url, str(exc)) from None
    except UrlError as exc:
        raise UrlError(f"cannot {verb} {url}: {exc.message}", url, exc.detail, exc.status) from None


def read_url(url: str, timeout: float = 60) -> bytes:
    """The bytes at ``url`` (a path, ``file://``, ``http(s)://`` or ``s3://bucket/key``); a UrlError, one clear
    line, when it cannot be read."""
    with _failures(url, "read"), _open(url, timeout) as response:
        return bytes(response.read())


def read_status(url: str, timeout: float = 60) -> tuple[bytes | None, int]:
    """The bytes at ``url`` and 200, or None and the status that said no — 404 missing (a file, an object or an
    HTTP answer), 403 not readable — for a reader that must tell them apart (``cairn verify``). Nothing answering
    at all is still a UrlError."""
    try:
        return read_url(url, timeout), 200
    except UrlError as exc:
        if exc.status is None:
            raise
        return None, exc.status


def download(url: str, dest: Path, timeout: float = 60, *, max_bytes: int | None = None) -> None:
    """Stream ``url`` into ``dest`` (a temp name first, renamed when complete). With ``max_bytes`` (a size the
    caller knows, e.g. the one a signed package index gives), a source that sends more is a UrlError as soon
    as it passes it: a wrong or hostile server never fills the disk before the digest check."""
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        with _failures(url, "download"), _open(url, timeout) as response, open(partial, "wb") as handle:
            if max_bytes is None:
                shutil.copyfileobj(response, handle, 1 << 20)
            else:
                written = 0
                while chunk := response.read(min(1 << 20, max_bytes + 1 - written)):
                    written += len(chunk)
                    if written > max_bytes:
                        raise UrlError(f"it sends more than the {max_bytes} bytes it should have", url, "more bytes than expected")
                    handle.write(chunk)
    except UrlError:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dest)


def exists(url: str, timeout: float = 30) -> bool:
    """Whether ``url`` answers (HEAD for http(s) and s3, a stat for files)."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(parsed.path).is_file()
    if not parsed.scheme or "://" not in url:
        return Path(url).is_file()
    if parsed.scheme == "s3":
        try:
            bucket, key = _s3_key(url)
            return _s3_bucket(bucket).head_sha256(key) is not None
        except CairnError:
            return False
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except (OSError, urllib.error.URLError, http.client.HTTPException):
        return False
