"""The reads a first publish makes before it writes: started as soon as ``cairn publish`` knows it has work.

A publish that is not answered by the fast path reads the repository before it writes anything: one LIST, the
first root if the LIST shows one, and — when it makes the repository publicly readable — the bucket's Block
Public Access setting and policy. None of these depend on the bundle, so ``cairn publish`` starts them right after
the fast path, before the bundle's reader is even imported; the server answers them while the bundle is parsed
and checked. They are reads only: what is written, and whether, is still decided after the bundle is checked
(``cairn.publish.blob_sender``). They run on a daemon thread, so a bad bundle's error never waits for the retries of an
unreachable endpoint (``cairn.remote.background``).
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path

from cairn.publish.writer import Log, Writer
from cairn.remote.backend import AccessState, Backend
from cairn.remote.background import in_background


def start_look(backend: Backend, first_root: bytes | None, public_read: bool, log: Log) -> Future[Writer]:
    """The reads, started now: the writer they make (its LIST, the served first root, the bucket's access)."""
    return in_background(lambda: _look(backend, first_root, public_read, log), "cairn-early-look")


def may_write_early(writer: Writer, first_root: bytes | None) -> bool:
    """The keys' first root is known here, and the repository has none or that one, byte for byte: only then does
    anything go up before the signing libraries have checked the repository's root."""
    return first_root is not None and writer.first_root() in (None, first_root)


def _look(backend: Backend, first_root: bytes | None, public_read: bool, log: Log) -> Writer:
    access: Future[AccessState] | None = None
    if public_read and first_root is not None:  # at once with the LIST: two more reads, no write
        access = in_background(backend.read_access, "cairn-early-access")
    writer = Writer(backend, log)
    if access is not None and may_write_early(writer, first_root):
        writer.access = access.result()
    return writer


def first_root_of(root_file: Path) -> bytes | None:
    """The ``metadata/1.root.json`` a key set's ``root.json`` makes, read without the signing libraries: its bytes
    when it is a version-1 root, else None (missing, unreadable or later: the early thread then writes nothing).
    ``cairn keys init`` writes it with the serializer the run compares with, so equal bytes are the same root."""
    try:
        data = root_file.read_bytes()
        signed = json.loads(data)["signed"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if isinstance(signed, dict) and signed.get("_type") == "root" and signed.get("version") == 1 else None
