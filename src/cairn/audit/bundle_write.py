"""Write offload bundles the way clang's ``clang-offload-bundler`` does, so a rewritten bundle is one the
bundler, comgr and the HIP runtime read like any other (layouts: hip-fatbin-format.md, parser: bundle.py).

Plain bundle: magic, entry count, the entry table (offset, size, ID length, ID), then each code object at
the next multiple of the bundle alignment after the previous one — the host entry (size 0) shares its offset
with the first device entry, and the bundle ends at the last code object's end, with no padding after it
(``BinaryFileHandler::WriteHeader``/``WriteBundle``). CCOB: the plain bundle compressed as one stream behind
a header whose hash is the first 8 bytes of the MD5 of the plain bundle, with LLVM's default levels (zstd 3
with long-distance matching, zlib 6). Same input, same bytes (for one ``zstandard``/zlib version).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence

import zstandard

from cairn.audit.bundle import CCOB_MAGIC, ENTRY_RECORD, PLAIN_MAGIC
from cairn.audit.model import Bundle

ZSTD_LEVEL = 3  # LLVM's default for offload bundles
ZLIB_LEVEL = 6
MAX_ALIGN = 4096  # clang's HIPCodeObjectAlign


def write_plain(entries: Sequence[tuple[str, bytes | bytearray]], align: int = MAX_ALIGN) -> bytes:
    """A ``__CLANG_OFFLOAD_BUNDLE__`` holding ``(id, code object)`` pairs in the order given."""
    ids = [entry_id.encode("ascii") for entry_id, _ in entries]
    cursor = len(PLAIN_MAGIC) + 8 + sum(ENTRY_RECORD + len(i) for i in ids)
    table = bytearray(PLAIN_MAGIC + struct.pack("<Q", len(entries)))
    offsets = []
    for entry_id, (_, blob) in zip(ids, entries, strict=True):
        cursor = _align(cursor, align)
        offsets.append(cursor)
        table += struct.pack("<QQQ", cursor, len(blob), len(entry_id)) + entry_id
        cursor += len(blob)
    out = bytearray(table)
    for offset, (_, blob) in zip(offsets, entries, strict=True):
        out += bytes(offset - len(out)) + blob  # zero padding up to each offset, as the bundler writes it
    return bytes(out)


def write_ccob(plain: bytes, version: int, method: str) -> bytes:
    """A compressed bundle of format ``version`` (1, 2 or 3) with ``method`` "zlib" or "zstd"."""
    payload = _compress(plain, method)
    code = {"zlib": 0, "zstd": 1}[method]
    digest = hashlib.md5(plain).digest()[:8]  # MD5(data).low(), stored as is
    if version == 1:
        header = CCOB_MAGIC + struct.pack("<HHI", 1, code, len(plain)) + digest
    elif version == 2:
        if 24 + len(payload) >= 1 << 32 or len(plain) >= 1 << 32:
            raise ValueError("CCOB v2 holds at most 4 GiB")
        header = CCOB_MAGIC + struct.pack("<HHII", 2, code, 24 + len(payload), len(plain)) + digest
    elif version == 3:
        header = CCOB_MAGIC + struct.pack("<HHQQ", 3, code, 32 + len(payload), len(plain)) + digest
    else:
        raise ValueError(f"CCOB version {version} is not 1, 2 or 3")
    return header + payload


def write_like(original: Bundle, plain: bytes) -> bytes:
    """``plain`` in the format and compression method of ``original`` (plain stays plain)."""
    if original.format == "plain":
        return plain
    return write_ccob(plain, int(original.format.removeprefix("ccob-v")), original.compression or "zlib")


def alignment_of(bundle: Bundle) -> int:
    """The bundle alignment the producer used: the largest power of two up to 4096 that divides the offset
    of every code object (4096 for everything clang's HIP driver writes)."""
    offsets = [e.offset for e in bundle.entries if e.size]
    align = MAX_ALIGN
    while align > 1 and any(offset % align for offset in offsets):
        align //= 2
    return align


def _compress(data: bytes, method: str) -> bytes:
    if method == "zlib":
        return zlib.compress(data, ZLIB_LEVEL)
    if method != "zstd":
        raise ValueError(f"unknown CCOB compression method {method!r}")

    # content size in the frame header (parameters default to writing it): LLVM decompresses in one call
    params = zstandard.ZstdCompressionParameters.from_level(ZSTD_LEVEL, source_size=len(data), enable_ldm=True)
    return zstandard.ZstdCompressor(compression_params=params).compress(data)


def _align(value: int, align: int) -> int:
    return (value + align - 1) // align * align
