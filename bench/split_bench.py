"""Measure ``cairn split`` on Debian experimental's fat librocblas 7.2.4: bytes, wheel (zip deflate) bytes, time.

The library (65 CCOB v3 zstd bundles, 14 targets) and its package tree are fetched from the host's Debian
archive pool into ``$CAIRN_TEST_CACHE`` (default ~/.cache/cairn-test), pinned by sha256 like the tests.
For each target: the split's wall time (``split_file``, audit of the input included), device-code bytes in
``.hip_fatbin`` before and after (compressed, and inflated), the library's size as one deflated zip member
(what it costs in a wheel), and the package tree split (bytes on disk, data files dropped). Usage:

    python bench/split_bench.py --out bench/results/split.json [--target gfx1100 ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import zstandard
from machine import describe

from cairn.audit.split import split_file
from cairn.audit.split_tree import split_tree
from cairn.remote.url import download
from cairn.sources.debian import resolve_mirror

CACHE = Path(os.environ.get("CAIRN_TEST_CACHE", "~/.cache/cairn-test")).expanduser()
PACKAGE = ("librocblas5", "7.2.4-1~exp1", "pool/main/r/rocblas/librocblas5_7.2.4-1~exp1_amd64.deb",
           "d7b0bdb3ca744edc42894c0774c0f4d2341acb42190808dc49251c0d1319b685")
LIBRARY = "usr/lib/x86_64-linux-gnu/librocblas.so.5.2"


def fetch_tree() -> Path:
    package, version, pool_path, sha256 = PACKAGE
    root = CACHE / "unpacked" / f"{package}_{version}"
    if (root / ".unpacked").is_file():
        return root
    deb = CACHE / "debs" / pool_path.rsplit("/", 1)[1]
    deb.parent.mkdir(parents=True, exist_ok=True)
    if not deb.is_file():
        download(f"{resolve_mirror('host')}/{pool_path}", deb, timeout=900)
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    if digest != sha256:
        raise SystemExit(f"{deb}: sha256 {digest} is not the pinned {sha256}")
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    (root / ".unpacked").touch()
    return root


def deflated(path: Path, work: Path) -> int:
    archive = work / "one.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(path, path.name)
    size = archive.stat().st_size
    archive.unlink()
    return size


def measure(tree: Path, target: str, work: Path) -> dict:
    source = tree / LIBRARY
    started = time.monotonic()
    report = split_file(source, work / "lib.so", target)
    seconds = time.monotonic() - started
    doc = report.to_json()
    row = {
        "target": target,
        "split_seconds": round(seconds, 2),
        "file_bytes": report.file_size,
        "bundles": len(report.bundles),
        "targets_before": len(report.targets_before),
        "targets_after": report.targets_after,
        "device_bytes_before": report.device_bytes_before,
        "device_bytes_after": report.device_bytes_after,
        "inflated_before": doc["uncompressed_before"],
        "inflated_after": doc["uncompressed_after"],
        "zip_before": deflated(source, work),
        "zip_after": deflated(work / "lib.so", work),
    }
    (work / "lib.so").unlink()
    started = time.monotonic()
    tree_report = split_tree(tree, work / "tree", target)
    row.update(tree_seconds=round(time.monotonic() - started, 2), tree_bytes_before=tree_report.bytes_before,
               tree_bytes_after=tree_report.bytes_after, data_files_dropped=len(tree_report.dropped),
               data_files_kept=tree_report.kept_data)
    subprocess.run(["rm", "-rf", str(work / "tree")], check=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--target", action="append", default=[])
    args = parser.parse_args()
    tree = fetch_tree()
    rows = []
    with tempfile.TemporaryDirectory(prefix="split-bench-") as work:
        for target in args.target or ["gfx1100"]:
            rows.append(measure(tree, target, Path(work)))
    print(f"{'target':10} {'split s':>8} {'device MB':>17} {'zip MB':>15} {'tree MB':>15}")
    for r in rows:
        print(f"{r['target']:10} {r['split_seconds']:8.1f} {r['device_bytes_before'] / 1e6:8.1f} -> {r['device_bytes_after'] / 1e6:5.1f}"
              f" {r['zip_before'] / 1e6:6.1f} -> {r['zip_after'] / 1e6:5.1f} {r['tree_bytes_before'] / 1e6:6.1f} -> {r['tree_bytes_after'] / 1e6:5.1f}")
    result = {
        "library": f"{PACKAGE[0]} {PACKAGE[1]}: {LIBRARY}",
        "rows": rows,
        "zstandard": zstandard.__version__,
        "machine": describe(),
        "command": "python bench/split_bench.py " + " ".join(sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
