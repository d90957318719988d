"""Deflating on every core: one valid stream, the same bytes whatever the thread count, what gzip reads back."""

from __future__ import annotations

import gzip
import io
import random
import subprocess
import zlib
from typing import Any

from cairn.deflate import CHUNK, Deflater
from support import need_tool


def _data() -> bytes:
    """Text, then noise, then text, over several chunks and not a whole number of them."""
    rng = random.Random(3)
    text = b"".join(b"rocblas_gemm_ex kernel %d for gfx1100\n" % i for i in range(90000))
    return text + rng.randbytes(CHUNK + 12345) + text[: CHUNK // 3]


def _deflate(data: bytes, threads: int, **options: Any) -> tuple[bytes, Deflater]:
    out = io.BytesIO()
    with Deflater(out, threads=threads, **options) as deflater:
        for at in range(0, len(data), 300_001):  # writes that do not line up with chunks
            deflater.write(data[at:at + 300_001])
    return out.getvalue(), deflater


def test_the_stream_is_the_same_on_any_number_of_threads_and_gzip_reads_it(tmp_path) -> None:
    data = _data()
    stream, four = _deflate(data, 4)
    assert _deflate(data, 1)[0] == stream
    assert gzip.decompress(stream) == data
    assert (four.size, four.crc, four.compressed) == (len(data), zlib.crc32(data), len(stream))
    assert len(stream) < len(data) // 2  # the text did compress
    (tmp_path / "data.gz").write_bytes(stream)
    unzipped = subprocess.run([need_tool("gzip"), "-dc", str(tmp_path / "data.gz")], capture_output=True, check=True)
    assert unzipped.stdout == data
    assert stream[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, no time, no host


def test_raw_deflate_for_zip() -> None:
    data = _data()
    raw, _ = _deflate(data, 2, gzip=False, level=1)
    assert zlib.decompress(raw, -zlib.MAX_WBITS) == data
    assert _deflate(data, 1, gzip=False, level=1)[0] == raw


def test_empty_input_is_an_empty_gzip_file() -> None:
    assert gzip.decompress(_deflate(b"", 2)[0]) == b""
