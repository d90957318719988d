"""Read a URL — a path, ``file://``, ``http(s)://`` or ``s3://`` — or download one to a file.

Every stage that reads an input by URL goes through here, so a failed download never leaves half a file behind
and every unreadable URL is one ``UrlError`` line (its ``status`` tells a missing object from a refused one).
``s3://`` goes through the one S3 wrapper (``cairn.remote.backend.s3_backend``), whose endpoint rule is
``cairn.remote.s3http.find_endpoint``. Protocol clients that speak more than "GET this URL" keep their own
connection: the registry client of ``cairn.sign.cosign`` and the package index client of ``cairn.sources.pypi``.
"""

from __future__ import annotations

import http.client
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from cairn.errors import CairnError, UrlError
from cairn.remote.backend import s3_backend
from cairn.remote.s3http import find_endpoint, find_region

# -- reading a URL ----------------------------------------------------------------------------------------
_BUCKETS: dict[tuple[str | None, str, str, str], Any] = {}


def _s3_bucket(bucket: str) -> Any:
    """The one S3 wrapper (``cairn.remote.backend.s3_backend``: signed requests with the environment's
    credentials, its endpoint rule, its retries) for ``bucket``, made once per bucket and environment so its
    connections stay alive across reads."""
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
