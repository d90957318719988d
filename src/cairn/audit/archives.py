"""Reading archives as streams: a possibly compressed tar (chosen by magic bytes, not by name), its members one
at a time, and a layer's blob in an OCI layout. Below both readers that need them — the audit of trees and
archives (``sources``) and the scan of image layers (``layers``) — so neither reaches into the other.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import zstandard

from cairn.errors import InputError

COMPRESSED = {b"\x1f\x8b": "gz", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zst", b"BZh": "bz2"}


def decompressed(handle: IO[bytes], head: bytes) -> IO[bytes]:
    """A streaming reader for a possibly compressed tar, chosen by magic bytes rather than file name."""
    kind = next((name for magic, name in COMPRESSED.items() if head.startswith(magic)), None)
    if kind == "gz":
        return gzip.GzipFile(fileobj=handle)  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(handle)  # type: ignore[return-value]
    if kind == "bz2":
        return bz2.BZ2File(handle)  # type: ignore[return-value]
    if kind == "zst":
        return zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(handle)  # type: ignore[return-value]
    return handle


def tar_members(stream: IO[bytes], shown: str) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    """Regular members of a tar stream in archive order, with a reader for each (None for others)."""
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                yield member, archive.extractfile(member) if member.isreg() else None
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError, zstandard.ZstdError) as exc:
        raise InputError(shown, f"cannot read as a tar archive ({exc})") from None


def layer_blob(root: Path, digest: str) -> Path:
    """The blob file of ``digest`` in the OCI layout ``root`` (InputError when malformed or missing)."""
    algorithm, _, value = digest.partition(":")
    if not (algorithm.isalnum() and value.isalnum()):  # never let a digest walk out of blobs/
        raise InputError(root, f"malformed blob digest {digest!r} in the image layout")
    blob = root / "blobs" / algorithm / value
    if not blob.is_file():
        raise InputError(root, f"blob {digest} is missing from the image layout")
    return blob
