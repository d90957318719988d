"""A store in a local directory. Layout (all under ``root``, default ``.cairn/``)::

    trees/<digest>/    finished outputs, never modified after the rename that creates them
    ac/<key>.json      action cache: key → output digest (written only after the tree exists)
    logs/<key>.log     one log per action run
    tmp/               work directories; anything here is garbage from an interrupted build

Beside them, runners keep caches that only save time, keyed by content: ``sources/`` (fetched inputs by
sha256), ``layers/`` (built image layers by DiffID) and ``layer-scans/`` (what the gates read from an image
layer, by its digest). Deleting any of them costs a rebuild of what they hold, never a wrong result.

Crash safety comes from ordering: an action writes into ``tmp/``, its tree is renamed into ``trees/``
(atomic on one filesystem), and only then is its cache record written (temp file + ``os.replace``).
A SIGKILL at any point leaves either nothing or a complete tree; the next build reruns what has no
record and clears ``tmp/`` under the store lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from cairn.digest import tree_digest
from cairn.errors import CairnError
from cairn.io import atomic_write
from cairn.names import name_problem
from cairn.store.base import ActionRecord


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        try:
            for sub in ("trees", "ac", "logs", "tmp"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise CairnError(f"{root}: not a directory — give --store a directory (a new one, or a store cairn build made)") from None
        except OSError as exc:
            raise CairnError(f"{root}: cannot hold a store ({exc.strerror or exc}) — give --store a directory you may write") from None
        self._lock_handle: object | None = None

    # -- locking -----------------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the store for one build; a second build waits. Clears work dirs of killed builds."""
        handle = open(self.root / "lock", "w")  # noqa: SIM115 - held until unlock()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another build using {self.root} …", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        self._lock_handle = handle
        for leftover in (self.root / "tmp").iterdir():
            _remove(leftover)

    def unlock(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()  # type: ignore[attr-defined]
            self._lock_handle = None

    # -- action cache ----------------------------------------------------------------------------------
    def lookup(self, key: str) -> ActionRecord | None:
        path = self.root / "ac" / f"{key}.json"
        try:
            data = json.loads(path.read_text())
            record = ActionRecord(**data)
        except (OSError, ValueError, TypeError):
            return None
        if not isinstance(record.output, str) or name_problem(record.output):
            return None  # a damaged record names no tree of this store (``..`` would reach outside it): rerun
        return record if self.has_tree(record.output) else None

    def record(self, record: ActionRecord) -> None:
        _atomic_write(self.root / "ac" / f"{record.key}.json", record.to_json())

    # -- trees -----------------------------------------------------------------------------------------
    def has_tree(self, digest: str) -> bool:
        return (self.root / "trees" / digest).is_dir()

    def tree(self, digest: str) -> Path:
        path = self.root / "trees" / digest
        if not path.is_dir():
            raise CairnError(f"store {self.root} has no tree {digest[:12]} — rebuild with cairn build")
        return path

    def workdir(self, action_id: str) -> Path:
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in action_id)
        return Path(tempfile.mkdtemp(prefix=f"{safe}.", dir=self.root / "tmp"))

    def commit(self, workdir: Path, expect: str = "") -> str:
        """Normalize modes, digest the tree and move it into ``trees/``; returns the digest. With ``expect``
        (a tree from elsewhere, named by the digest it should have), a tree with another digest is removed, not
        kept: the caller sees the digest it really has."""
        normalize_modes(workdir)
        digest = tree_digest(workdir)
        final = self.root / "trees" / digest
        if final.exists() or (expect and digest != expect):
            _remove(workdir)
        else:
            os.rename(workdir, final)
        return digest

    def log_path(self, key: str) -> Path:
        return self.root / "logs" / f"{key}.log"


def normalize_modes(root: Path) -> None:
    """Directories 0755, files 0755 if executable else 0644: umask and tool quirks never leak out."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            os.chmod(path, 0o755 if st.st_mode & 0o111 else 0o644)


def _atomic_write(path: Path, text: str) -> None:
    atomic_write(path, text, durable=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
