"""Compiler cache benchmark: llama.cpp's HIP build for one target with a cold, then a warm sccache in S3.

    python bench/compiler_cache_bench.py --out bench/results/compiler_cache.json [--store DIR]
                                         [--action build:llama.cpp@gfx110X-dgpu]

Starts a moto S3 server on loopback (the same server the tests use) with an empty bucket, then:

1. ``cairn build --only <action> --compiler-cache s3://…`` into an empty store: every input of the action is
   fetched and built (the build image, the HIP and BLAS debs), then llama.cpp is compiled with every compile
   a cache miss that sccache stores in the bucket;
2. the action's record is removed from the store, and the same command runs again: the dependencies are
   cached, the llama.cpp action runs from nothing but its inputs (its build tree lives in the container and was
   thrown away), and every compile can be a hit.

The figure is the llama.cpp action's own seconds in both runs (each ``cairn build``'s ``--json`` report), their
ratio, the hit and miss counts sccache logged, and whether both runs gave the same output digest (the cache
must change no byte). Needs the services (``cairn services start``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "cairn-bench-compiler-cache"
STATS = ("Compile requests", "Cache hits", "Cache misses", "Cache hits (HIP)", "Cache misses (HIP)",
         "Cache hits (C/C++)", "Cache misses (C/C++)", "Cache errors", "Non-cacheable calls")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _build(store: Path, action: str, env: dict[str, str]) -> tuple[dict, float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", "--only", action, "--store", str(store),
                             "--compiler-cache", f"s3://{BUCKET}/bench", "--json"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    wall = round(time.monotonic() - started, 1)
    if result.returncode != 0:
        sys.exit(f"error: cairn build failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return json.loads(result.stdout), wall


def _stats(log: str) -> dict[str, int]:
    found = {}
    for name in STATS:
        match = re.search(rf"^{re.escape(name)}\s+(\d+)\s*$", log, re.MULTILINE)
        if match:
            found[name] = int(match[1])
    return found


def _run_record(report: dict, action: str) -> dict[str, object]:
    entry = report["actions"][action]
    log = Path(entry["log"]).read_text() if entry.get("log") else ""
    return {"status": entry["status"], "seconds": entry["seconds"], "output": entry["output"],
            "sccache": _stats(log), "counts": report["counts"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, help="store to build into (default: a fresh temporary one)")
    parser.add_argument("--action", default="build:llama.cpp@gfx110X-dgpu")
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                 aws_secret_access_key="bench").create_bucket(Bucket=BUCKET)
    env = {**os.environ, "CAIRN_S3_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
    scratch = Path(tempfile.mkdtemp(prefix="cairn-ccbench-", dir=ROOT))
    store = args.store or scratch / ".cairn"
    try:
        first, first_wall = _build(store, args.action, env)
        cold = _run_record(first, args.action)
        if cold["status"] != "ran":
            sys.exit(f"error: {args.action} was {cold['status']} in the first run, not built — use an empty --store")
        key = Path(first["actions"][args.action]["log"]).read_text().splitlines()[1].removeprefix("# key ")  # "# key <key>"
        (store / "ac" / f"{key}.json").unlink()  # the action runs again; everything it depends on stays cached
        second, second_wall = _build(store, args.action, env)
        warm = _run_record(second, args.action)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    doc = {
        "machine": describe(),
        "command": "python bench/compiler_cache_bench.py " + " ".join(sys.argv[1:]),
        "action": args.action,
        "cold": {**cold, "build_wall_seconds": first_wall},
        "warm": {**warm, "build_wall_seconds": second_wall},
        "speedup": round(float(cold["seconds"]) / float(warm["seconds"]), 2),  # type: ignore[arg-type]
        "same_output": cold["output"] == warm["output"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("speedup", "same_output")} | {"cold_s": cold["seconds"], "warm_s": warm["seconds"]}))
    if not doc["same_output"]:
        sys.exit("error: the warm build's output differs from the cold build's — the compiler cache changed bytes")


if __name__ == "__main__":
    main()
