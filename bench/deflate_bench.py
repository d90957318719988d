"""Deflate benchmark: an image layer of real binaries, compressed by cairn.deflate against GNU gzip and one zlib stream.

    python bench/deflate_bench.py --out bench/results/deflate.json [--source DIR ...] [--layer TAR]

The layer is a tar of the host's LLVM (``--source``, default ``/usr/lib/llvm-15``: binaries like most of the
build image), or an existing layer tar (``--layer``, e.g. the build image's, unpacked from a store). Each is compressed at level 6 (the images users pull) and level 1 (the
build image, big wheel members) by ``gzip -c -N`` (what a user would run), by one zlib stream in this process (what
Cairn did before ``cairn.deflate``) and by ``cairn.deflate`` on every core and on one; the figures are seconds,
output bytes and the speed-up against gzip and against one stream. ``same_bytes_any_threads`` is true only when
one thread and every core wrote the same bytes, and ``gzip_reads_it`` when ``gzip -t`` accepts them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from machine import describe

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCES = [Path("/usr/lib/llvm-15")]  # LLVM binaries, as the build image is mostly


def _timed(work: Callable[[], int]) -> tuple[float, int]:
    started = time.monotonic()
    size = work()
    return time.monotonic() - started, size


def _one_stream(src: Path, dest: Path, level: int) -> int:
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    with open(src, "rb") as inp, open(dest, "wb") as out:
        while chunk := inp.read(1 << 20):
            out.write(compressor.compress(chunk))
        out.write(compressor.flush())
    return dest.stat().st_size


def _gnu_gzip(src: Path, dest: Path, level: int) -> int:
    with open(dest, "wb") as out:
        subprocess.run(["gzip", "-c", "-n", f"-{level}", str(src)], stdout=out, check=True)
    return dest.stat().st_size


def _cairn(src: Path, dest: Path, level: int, threads: int) -> int:
    from cairn.deflate import CHUNK, Deflater

    with open(src, "rb") as inp, open(dest, "wb") as out, Deflater(out, level, threads=threads) as deflater:
        while chunk := inp.read(CHUNK):
            deflater.write(chunk)
    return dest.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--source", type=Path, action="append", default=[])
    parser.add_argument("--layer", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from cairn.deflate import workers

    with tempfile.TemporaryDirectory(prefix="cairn-deflate-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        layer = args.layer
        if layer is None:
            layer = scratch / "layer.tar"
            with tarfile.open(layer, "w") as tar:
                for source in args.source or DEFAULT_SOURCES:
                    tar.add(source, arcname=source.name)
        results: dict[str, Any] = {}
        for level in (6, 1):
            seconds: dict[str, float] = {}
            sizes: dict[str, int] = {}
            for name, work in (("gzip", partial(_gnu_gzip, layer, scratch / "gnu.gz", level)),
                               ("one_stream", partial(_one_stream, layer, scratch / "one.gz", level)),
                               ("cairn_one_thread", partial(_cairn, layer, scratch / "cairn1.gz", level, 1)),
                               ("cairn", partial(_cairn, layer, scratch / "cairn.gz", level, 0))):
                took, sizes[name] = _timed(work)
                seconds[name] = round(took, 2)
            results[f"level_{level}"] = {
                "seconds": seconds, "bytes": sizes,
                "speedup_vs_gzip": round(seconds["gzip"] / seconds["cairn"], 2),
                "speedup_vs_one_stream": round(seconds["one_stream"] / seconds["cairn"], 2),
                "same_bytes_any_threads": (scratch / "cairn1.gz").read_bytes() == (scratch / "cairn.gz").read_bytes(),
                "gzip_reads_it": subprocess.run(["gzip", "-t", str(scratch / "cairn.gz")]).returncode == 0,
            }
        sources = args.source or DEFAULT_SOURCES
        result = {
            "schema": "cairn.bench.deflate/v1",
            "command": "python bench/deflate_bench.py " + " ".join(sys.argv[1:]),
            "machine": describe(),
            "threads": workers(),
            "layer": str(args.layer) if args.layer else "tar of " + ", ".join(map(str, sources)),
            "layer_bytes": layer.stat().st_size,
            **results,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    ok = True
    for level, row in results.items():
        print(f"{level}: gzip {row['seconds']['gzip']} s, one zlib stream {row['seconds']['one_stream']} s, cairn.deflate "
              f"{row['seconds']['cairn']} s ({row['speedup_vs_gzip']}x gzip, {row['speedup_vs_one_stream']}x one stream); "
              f"same bytes on any thread count: {row['same_bytes_any_threads']}")
        ok = ok and row["same_bytes_any_threads"] and row["gzip_reads_it"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
