"""Cairn's I/O layer: read a URL (file, http(s)), download one to a file, write a file atomically.

Every stage that reads an input by URL or writes a file another process may read at the same time goes
through here, so a reader never sees half a file and a failed download never leaves one behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from cairn.errors import CairnError


def cache_dir(kind: str) -> Path:
    """Per-user cache for things fetched again cheaply (archive indexes): ``$XDG_CACHE_HOME/cairn/<kind>``."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = root / "cairn" / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and ``os.replace``; ``durable``
    also flushes it to disk first (a record that must survive a power cut once its rename is seen)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
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


def link_or_copy(source: Path, dest: Path) -> None:
    """``dest`` becomes another name for ``source``'s bytes: a hard link where the filesystem allows one (the
    store's files are immutable, and a GB deb or wheel is then stored once), else a copy. Made under a temp name
    and renamed, so a reader or a racing writer only ever sees a complete file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, dest)


def _open(url: str, timeout: float):  # type: ignore[no-untyped-def]
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return open(parsed.path if parsed.scheme else url, "rb")
    if parsed.scheme in ("http", "https"):
        return urllib.request.urlopen(url, timeout=timeout)
    raise CairnError(f"cannot read {url}: only file, http and https URLs are supported here")


def read_url(url: str, timeout: float = 60) -> bytes:
    """The bytes at ``url``; one clear error line when it cannot be read."""
    try:
        with _open(url, timeout) as response:
            return bytes(response.read())
    except (OSError, urllib.error.URLError) as exc:
        raise CairnError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None


def download(url: str, dest: Path, timeout: float = 60) -> None:
    """Stream ``url`` into ``dest`` (a temp name first, renamed when complete)."""
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        with _open(url, timeout) as response, open(partial, "wb") as handle:
            shutil.copyfileobj(response, handle, 1 << 20)
    except (OSError, urllib.error.URLError) as exc:
        partial.unlink(missing_ok=True)
        raise CairnError(f"cannot download {url}: {getattr(exc, 'reason', exc)}") from None
    os.replace(partial, dest)


def exists(url: str, timeout: float = 30) -> bool:
    """Whether ``url`` answers (HEAD for http(s), a stat for files)."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else url).is_file()
    request = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except (OSError, urllib.error.URLError):
        return False
