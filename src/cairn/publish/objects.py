"""An object the publisher writes (``Obj``): its key, bytes, content type, and whether it is immutable and signed.

Staging (``stage``) and the index pages and matrices (``indexes``) make these; the upload run (``upload``) writes
them and makes every one that is a TUF target a target of the next signed metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
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

    @cached_property
    def sha256(self) -> str:
        """Hashed at most once per object: a 300 MB wheel costs ≈0.2 s per sha256."""
        return self.digest or sha256_hex(self.data)


def json_bytes(value: Any) -> bytes:
    """The repository's JSON documents: sorted keys, one-space indent, a final newline (equal values, equal bytes)."""
    return (json.dumps(value, sort_keys=True, indent=1) + "\n").encode()
