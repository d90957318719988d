"""Cairn's local I/O layer: write a file atomically, link or copy one, hold a lock, name a cache directory.

Every stage that writes a file another process may read at the same time goes through here, so a reader never
sees half a file. Reading a URL (path, ``file://``, ``http(s)://``, ``s3://``) is ``cairn.remote.url``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cairn.errors import CairnError


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
    store's files are immutable, and a GB deb or wheel is then stored once), else a clone or a copy
    (``clone_or_copy``). Made under a temp name and renamed, so a reader or a racing writer only ever sees a
    complete file, and a copy that fails (a full disk) leaves nothing behind."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{TEMP_PREFIX}{dest.name}.{os.getpid()}.{threading.get_ident()}.link")
    tmp.unlink(missing_ok=True)
    try:
        try:
            os.link(source, tmp)
        except OSError:
            clone_or_copy(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def clone_or_copy(source: Path, dest: Path) -> None:
    """Copy ``source`` to the new file ``dest`` with ``copy_file_range``, which shares the blocks (a reflink) on
    a file system that can (btrfs, XFS, bcachefs on one device) and copies in the kernel elsewhere; a plain copy
    where the call is refused (across file systems on older kernels, or not in this OS)."""
    try:
        with open(source, "rb") as src, open(dest, "wb") as out:
            left = os.fstat(src.fileno()).st_size
            while left > 0:
                sent = os.copy_file_range(src.fileno(), out.fileno(), min(left, 1 << 30))
                if sent == 0:
                    break
                left -= sent
            if left == 0:
                return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    except AttributeError:  # no os.copy_file_range on this OS
        pass
    shutil.copyfile(source, dest)
