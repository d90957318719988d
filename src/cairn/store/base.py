"""Store interface and the tree digest that names every output.

A tree digest is the sha256 of a canonical listing: for each entry, sorted by path, its type, its
executable bit, and the sha256 of its content (or the symlink's target). Owners, times and the other
mode bits are not part of it — outputs are normalized so those never vary.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_entries(root: Path, *, digests: bool = True) -> list[tuple[str, str, str]]:
    """(relative path, kind, digest) for every file, symlink and directory below ``root``, sorted. Without
    ``digests`` a file's digest is "" (an archive reads every file anyway: reading it twice doubled the work)."""
    entries: list[tuple[str, str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                entries.append((rel, "link", os.readlink(path)))
            elif path.is_dir():
                entries.append((rel, "dir", ""))
            else:
                kind = "exec" if os.stat(path).st_mode & 0o111 else "file"
                entries.append((rel, kind, file_sha256(path) if digests else ""))
    entries.sort()
    return entries


def tree_digest(root: Path) -> str:
    listing = "\n".join("\0".join(entry) for entry in tree_entries(root))
    return hashlib.sha256(listing.encode()).hexdigest()


@dataclass(frozen=True)
class ActionRecord:
    """What the action cache remembers about one finished action."""

    key: str
    action: str
    output: str  # tree digest
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)


class Store(Protocol):
    """What the executor needs from a store; a local directory or a remote cache can provide it."""

    def lookup(self, key: str) -> ActionRecord | None: ...

    def record(self, record: ActionRecord) -> None: ...

    def has_tree(self, digest: str) -> bool: ...

    def tree(self, digest: str) -> Path: ...

    def workdir(self, action_id: str) -> Path: ...

    def commit(self, workdir: Path) -> str: ...

    def log_path(self, key: str) -> Path: ...
