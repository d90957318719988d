"""Deflate on every core, with the same bytes whatever the core count: gzip streams and raw deflate for zip.

zlib compresses one stream on one core, and compression is most of the time it takes to write an image layer
or a wheel of ROCm libraries (the build image is a GB of LLVM). The input is
cut into fixed 1 MiB chunks, each deflated on its own by a thread pool (zlib lets go of the GIL), primed with
the 32 KiB before it as a dictionary and ended with a sync flush, then written in order: the concatenation is
one valid deflate stream, a single gzip member any reader takes (pigz makes its streams the same way). The
chunks and their dictionaries depend on the input alone, so the output depends only on the input, the level
and the zlib version, never on how many threads ran.
"""

from __future__ import annotations

import os
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

CHUNK = 1 << 20
WINDOW = 32 << 10  # deflate's window: all a chunk could refer back to
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, mtime 0, OS unknown: nothing of this host
FINAL_BLOCK = b"\x03\x00"  # an empty final block of fixed codes: ends a stream whose chunks all sync-flushed


class Sink(Protocol):
    def write(self, data: bytes, /) -> object: ...


def workers() -> int:
    """Threads to deflate with: the cores this process may run on, at most 8 (more gains nothing here)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def _deflate(level: int, chunk: bytes, window: bytes) -> bytes:
    """One chunk as deflate blocks that end on a byte boundary and refer to nothing before ``window``."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9,
                                  zlib.Z_DEFAULT_STRATEGY, **({"zdict": window} if window else {}))
    return compressor.compress(chunk) + compressor.flush(zlib.Z_SYNC_FLUSH)


class Deflater:
    """A write-only file: what is written to it goes to ``out`` deflated (in a gzip member when ``gzip``).

    ``close`` ends the stream (and writes the gzip trailer) but leaves ``out`` open. ``crc``, ``size`` and
    ``compressed`` are the CRC-32 and length of the input and the length of the output, as zip headers need them.
    """

    def __init__(self, out: Sink, level: int = 6, *, gzip: bool = True, threads: int = 0) -> None:
        self.out, self.level, self.gzip = out, level, gzip
        self.crc = self.size = self.compressed = 0
        self._buffer = bytearray()
        self._window = b""
        self._threads = threads or workers()
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="deflate") if self._threads > 1 else None
        self._pending: deque[Future[bytes]] = deque()
        if gzip:
            self._emit(GZIP_HEADER)

    def __enter__(self) -> Deflater:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is None:
            self.close()
        elif self._pool is not None:  # a failed write: the stream is abandoned, its threads are not left behind
            self._pool.shutdown(cancel_futures=True)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        self._buffer += data
        while len(self._buffer) >= CHUNK:
            chunk = bytes(self._buffer[:CHUNK])
            del self._buffer[:CHUNK]
            self._submit(chunk)
        return len(data)

    def tell(self) -> int:
        return self.size  # tarfile asks where its archive starts

    def flush(self) -> None:
        """Nothing to do before ``close``: a chunk is only deflated whole (flushing early would change the bytes)."""

    def close(self) -> None:
        if self._buffer:
            self._submit(bytes(self._buffer))
            self._buffer.clear()
        while self._pending:
            self._emit(self._pending.popleft().result())
        if self._pool is not None:
            self._pool.shutdown()
        self._emit(FINAL_BLOCK)
        if self.gzip:
            self._emit(self.crc.to_bytes(4, "little") + (self.size & 0xFFFFFFFF).to_bytes(4, "little"))

    def _submit(self, chunk: bytes) -> None:
        window, self._window = self._window, chunk[-WINDOW:]
        if self._pool is None:
            self._emit(_deflate(self.level, chunk, window))
            return
        self._pending.append(self._pool.submit(_deflate, self.level, chunk, window))
        while len(self._pending) > 2 * self._threads:  # a bounded queue: a GB input never sits in memory
            self._emit(self._pending.popleft().result())

    def _emit(self, data: bytes) -> None:
        self.out.write(data)
        self.compressed += len(data)
