"""The bundle's files are read and hashed while ``cairn publish`` is still starting up.

Before a publish can send its first blob it imports its HTTP client, asks the repository whether this exact
release is already published (``fastpath``) and imports the bundle reader; only then does ``read_blobs`` read
every artifact and check its sha256. Reading and hashing release the GIL, so ``cairn publish`` starts them
first, on two daemon threads, and ``read_blobs`` takes what they read: a small bundle's whole read is off
the path to the first request.

Nothing here decides anything: ``bundle.json`` is read loosely, only for the files to read, and every digest is
still checked by ``read_blobs`` against the strict reader's ``bundle.json``. A path that is not a plain
relative name under ``files/`` is skipped (the strict reader refuses it later, with its line). The threads are
daemons, skip every file bigger than ``LARGEST`` and stop at ``BUDGET`` bytes: when the release is already
published the command exits at once, and what they read is dropped with them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from cairn.names import relpath_problem

BUDGET = 64 << 20  # read ahead at most this much: a big release's remaining files are read by ``read_blobs``
LARGEST = 16 << 20  # and no file bigger than this: reading a large wheel ahead kept an unchanged re-publish of
#                     the release, which exits after two GETs, waiting on it for nothing
THREADS = 2  # hashlib and file reads release the GIL: two at a time, as ``read_blobs`` does


class Prefetch:
    """Files under ``<bundle>/files/`` read and hashed ahead: ``take(relpath)`` gives (bytes, sha256) or None."""

    def __init__(self, bundle_dir: Path) -> None:
        self._files = Path(bundle_dir) / "files"
        self._done: dict[str, tuple[bytes, str]] = {}
        self._queue = _paths(Path(bundle_dir))
        self._lock = threading.Lock()
        self._budget = BUDGET
        self._threads = [threading.Thread(target=self._work, name=f"cairn-prefetch-{n}", daemon=True) for n in range(THREADS)]
        for thread in self._threads:
            thread.start()

    def take(self, relpath: str) -> tuple[bytes, str] | None:
        """The bytes and sha256 of ``files/<relpath>`` as read ahead (once reading ahead is over), or None: read it
        yourself."""
        for thread in self._threads:
            thread.join()
        with self._lock:
            return self._done.pop(relpath, None)

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self._budget <= 0:
                    return
                relpath = self._queue.pop(0)
            path = self._files / relpath
            try:
                if path.stat().st_size > min(LARGEST, self._budget):
                    continue  # ``read_blobs`` reads it when the upload needs it
                data = path.read_bytes()
            except OSError:
                continue  # missing or unreadable: ``read_blobs`` says so
            digest = hashlib.sha256(data).hexdigest()
            with self._lock:
                self._done[relpath] = (data, digest)
                self._budget -= len(data)


def _paths(bundle_dir: Path) -> list[str]:
    """The artifact paths ``bundle.json`` names (not the sidecars, which ``read_blobs`` derives), in its order."""
    try:
        raw = json.loads((bundle_dir / "bundle.json").read_bytes())
        entries = [a for a in raw["artifacts"] if isinstance(a, dict) and a.get("kind") != "metadata"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [a["path"] for a in entries if isinstance(a.get("path"), str) and not relpath_problem(a["path"])]
