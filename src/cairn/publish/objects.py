"""An object the publisher writes (``Obj``): its key, bytes, content type, and whether it is immutable and signed.

A bundle's artifact is an ``Obj`` of its file (``path``), not of its bytes: the publisher never holds a release
in memory (the default release is 21 GB; holding its blobs made a publish peak at 10.4 GB resident). Its bytes
are streamed from the file when written, and its sha256 is the one checked against ``bundle.json``.

Staging (``stage``) and the index pages and matrices (``indexes``) make these; the upload run (``upload``) writes
them and makes every one that is a TUF target a target of the next signed metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from cairn.remote.backend import sha256_hex

WHEEL = "application/zip"  # a wheel is a zip archive; browsers and curl save it as one
CORE_METADATA = "text/plain; charset=utf-8"  # PEP 658: the wheel's METADATA file, email-header text in UTF-8
JSON = "application/json"
JSONL = "application/vnd.in-toto.bundle"


@dataclass(frozen=True)
class Obj:
    key: str
    data: bytes
    content_type: str
    immutable: bool
    target: bool = True
    custom: dict[str, Any] | None = None
    alias: str = ""  # a second key with the same bytes (``simple/<family>/<project>/`` for pip)
    digest: str = ""  # the sha256 when already known (artifacts: checked once against bundle.json)
    path: Path | None = None  # the bytes are this file's (``data`` is then empty): an artifact, sent from disk

    def __post_init__(self) -> None:
        assert self.path is None or (self.digest and not self.data), "a file's object has its checked digest and no bytes"

    @cached_property
    def sha256(self) -> str:
        """Hashed at most once per object: a wheel can be hundreds of MB, and every reader of the object asks."""
        return self.digest or sha256_hex(self.data)

    def read(self) -> bytes:
        """Its bytes, from its file if it is a file's (for small objects and checks: the writer streams files)."""
        return self.data if self.path is None else self.path.read_bytes()

    @cached_property
    def size(self) -> int:
        """Its length in bytes (a file's, from one ``stat``)."""
        return len(self.data) if self.path is None else self.path.stat().st_size


def json_bytes(value: Any) -> bytes:
    """The repository's JSON documents: sorted keys, one-space indent, a final newline (equal values, equal bytes)."""
    return (json.dumps(value, sort_keys=True, indent=1) + "\n").encode()
