"""Benchmark ``cairn audit`` against the pipeline users run today, on the same real files.

Peer: ``objcopy --only-section=.hip_fatbin -O binary LIB fatbin`` then
``clang-offload-bundler-15 --list --type=o --input=fatbin`` (Debian's ROCm 5.x toolchain).
Cairn: ``cairn audit --json LIB`` as a fresh process (Python start-up included), and ``audit_file`` in process.

Files (fetched into ``$CAIRN_TEST_CACHE``, default ~/.cache/cairn-test, like the tests): Debian's 1.3 GB
librocsparse.so (111 plain bundles) and the largest device library of the jax-rocm7-plugin wheel (CCOB v3,
zstd). Besides wall time it records where the peer's answer is incomplete (it reads the first bundle only)
or fails (clang 15's bundler cannot read CCOB). Usage:

    python bench/audit_bench.py --out bench/results/audit.json [--repeat 5] [--file LIB ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from machine import describe

from cairn.audit import audit_file

CACHE = Path(os.environ.get("CAIRN_TEST_CACHE", "~/.cache/cairn-test")).expanduser()
BUNDLER = "clang-offload-bundler-15"
ROCSPARSE = ("librocsparse0", "5.3.0+dfsg-2", "usr/lib/x86_64-linux-gnu/librocsparse.so.0.1")
WHEEL = ("jax-rocm7-plugin", "0.10.2")


def fetch_rocsparse() -> Path:
    package, version, member = ROCSPARSE
    root = CACHE / "unpacked" / f"{package}_{version}"
    if not (root / member).is_file():
        debs = CACHE / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        found = sorted(debs.glob(f"{package}_{version}_*.deb"))
        if not found:
            subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=debs, check=True)
            found = sorted(debs.glob(f"{package}_{version}_*.deb"))
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(found[0]), str(root)], check=True)
    return root / member


def fetch_wheel_library() -> Path:
    """The largest member of the plugin wheel that has a .hip_fatbin section."""
    name, version = WHEEL
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{name.replace('-', '_')}-{version}-cp311-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
                        "--platform", "manylinux_2_27_x86_64", f"{name}=={version}", "-d", str(wheels)], check=True)
        found = sorted(wheels.glob(pattern))
    target = CACHE / "unpacked" / found[0].stem
    with zipfile.ZipFile(found[0]) as archive:
        archive.extractall(target)
    libraries = sorted(target.rglob("*.so"), key=lambda p: p.stat().st_size, reverse=True)
    for library in libraries:
        sections = subprocess.run(["readelf", "-SW", str(library)], capture_output=True, text=True, check=True).stdout
        if ".hip_fatbin" in sections:
            return library
    raise SystemExit(f"no library with .hip_fatbin in {found[0]}")


def timed(fn, repeat: int):
    """Median wall time over ``repeat`` runs (after one warm-up that fills the page cache) and the last result."""
    fn()
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def peer(library: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as work:
        dumped = Path(work) / "fatbin"
        subprocess.run(["objcopy", "--only-section=.hip_fatbin", "-O", "binary", str(library), str(dumped)], check=True)
        listed = subprocess.run([BUNDLER, "--list", "--type=o", f"--input={dumped}"], capture_output=True, text=True)
    ids = sorted(listed.stdout.split())
    failed = listed.returncode != 0 or not ids
    return {"ids": ids, "returncode": listed.returncode, "failed": failed, "stderr": listed.stderr.strip()[-300:]}


def cairn_cli(library: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "cairn.cli", "audit", "--json", str(library)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def max_rss_kb(library: Path) -> int:
    """Peak resident memory of a fresh ``cairn audit --json`` process (GNU time)."""
    time_tool = shutil.which("time") or "/usr/bin/time"
    out = subprocess.run([time_tool, "-f", "%M", sys.executable, "-m", "cairn.cli", "audit", "--json", str(library)],
                         capture_output=True, text=True, check=True)
    return int(out.stderr.strip().splitlines()[-1])


def bench_file(library: Path, repeat: int) -> dict:
    peer_time, peer_result = timed(lambda: peer(library), repeat)
    cli_time, document = timed(lambda: cairn_cli(library), repeat)
    lib_time, _ = timed(lambda: audit_file(library), repeat)
    (binary,) = document["binaries"]
    all_ids = sorted({e["id"] for b in binary["bundles"] for e in b["entries"]})
    first_ids = sorted(e["id"] for e in binary["bundles"][0]["entries"]) if binary["bundles"] else []
    if peer_result["failed"] and peer_result["returncode"] == 0:
        verdict = f"peer silently listed no targets (exit 0) for {', '.join(binary['formats'])}"
    elif peer_result["failed"]:
        verdict = f"peer failed (exit {peer_result['returncode']}): {peer_result['stderr'][:120] or 'no output'}"
    elif peer_result["ids"] == first_ids and len(binary["bundles"]) > 1:
        verdict = f"peer read 1 of {len(binary['bundles'])} bundles; a bundle lacking a target would go unseen"
    elif peer_result["ids"] == all_ids:
        verdict = "same answer"
    else:
        verdict = "peer answer differs"
    return {
        "file": str(library),
        "size_bytes": library.stat().st_size,
        "bundles": len(binary["bundles"]),
        "formats": binary["formats"],
        "targets": binary["targets"],
        "complete_targets": binary["complete_targets"],
        "peer_seconds": round(peer_time, 4),
        "cairn_cli_seconds": round(cli_time, 4),
        "cairn_library_seconds": round(lib_time, 4),
        "speedup_cli": round(peer_time / cli_time, 1),
        "speedup_library": round(peer_time / lib_time, 1),
        "cairn_max_rss_kb": max_rss_kb(library),
        "peer_ids": peer_result["ids"],
        "peer_failed": peer_result["failed"],
        "peer_verdict": verdict,
    }


def tool_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "unavailable"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON results")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per tool and file (median is reported)")
    parser.add_argument("--file", type=Path, action="append", default=[], help="benchmark these ELF files instead")
    args = parser.parse_args(argv)
    for tool in ("objcopy", BUNDLER, "readelf"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (apt-get install binutils clang-tools-15)")
    files = args.file or [fetch_rocsparse(), fetch_wheel_library()]
    results = [bench_file(f, args.repeat) for f in files]
    startup, _ = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.repeat)
    header = f"{'file':<34} {'size':>9} {'bundles':>7} {'peer s':>8} {'cairn s':>8} {'x (cli)':>8} {'x (lib)':>8}  peer answer"
    print(header)
    for r in results:
        print(f"{Path(r['file']).name[:34]:<34} {r['size_bytes'] / 2**20:>7.1f}MB {r['bundles']:>7} {r['peer_seconds']:>8.3f} "
              f"{r['cairn_cli_seconds']:>8.3f} {r['speedup_cli']:>8.1f} {r['speedup_library']:>8.1f}  {r['peer_verdict']}")
    document = {
        "benchmark": "audit",
        "command": "python bench/audit_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "repeat": args.repeat,
        "machine": {**describe(), "platform": platform.platform(), "python_startup_seconds": round(startup, 4)},
        "tools": {"objcopy": tool_version(["objcopy", "--version"]), "bundler": tool_version([BUNDLER, "--version"])},
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"python start-up alone: {startup:.3f}s (part of every cairn CLI figure); load average {os.getloadavg()[0]:.1f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
