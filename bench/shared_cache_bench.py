"""Shared action cache benchmark: a second machine builds the whole default release from a first machine's S3 cache.

    python bench/shared_cache_bench.py --out bench/results/shared_cache.json [--store .cairn] [--cold JSON]

Needs a store holding a complete build of the default release (``nox -s build``'s ``.cairn``, or the store of
``bench/release_build_bench.py``) and the services (``cairn services start``). Starts a moto S3 server on
loopback with an empty bucket, then runs ``cairn build --cache s3://…`` twice, as two machines:

1. machine A is that store: every action is a local hit, and each hit the bucket lacks is uploaded (the way a
   store built before the cache was turned on seeds it);
2. machine B has an empty store, its own HOME and working directory, and the same bucket: every action should
   be fetched, none run.

Recorded: both commands' wall seconds, their action counts and cache events, the bytes in the bucket, and
whether every action's output digest on B is A's (the same release, byte for byte). The figure B is compared
with is what it would take without the cache: the cold build of the same release (``--cold``, the ``cairn
build`` step of ``bench/results/release_build.json``). B shares A's Docker Engine and registry (one machine
has one); its push actions find their images there by digest, as the image handover tests show they would
in a fresh registry after pushing again from the store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe
from publish_bench import start_moto

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "cairn-bench-shared-cache"


def build(store: Path, cwd: Path, env: dict[str, str], cache: str) -> tuple[dict, float]:
    """One machine's ``cairn build --cache`` of the default release: its ``--json`` report and wall seconds."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cairn.cli", "build", "--store", str(store), "--jobs", "2", "--json",
                           "--cache", cache], cwd=cwd, env=env, capture_output=True, text=True)
    wall = round(time.monotonic() - started, 1)
    if proc.returncode != 0:
        sys.exit(f"error: cairn build in {store} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout), wall


def bucket_bytes(endpoint: str) -> tuple[int, int]:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                          region_name="us-east-1")
    count = size = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for obj in page.get("Contents", []):
            count, size = count + 1, size + obj["Size"]
    return count, size


def machine(report: dict, wall: float) -> dict[str, object]:
    cache = report["cache"] or {}
    return {"seconds": wall, "counts": report["counts"],
            "cache": {event: len(cache.get(event, [])) for event in ("fetched", "uploaded", "raced", "damaged")},
            "cache_offline": cache.get("offline", "")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn", help="machine A: a store with the default release built")
    parser.add_argument("--cold", type=Path, default=ROOT / "bench" / "results" / "release_build.json",
                        help="the cold build to compare with (release_build_bench's JSON)")
    args = parser.parse_args()
    if not (args.store / "last-build.json").is_file():
        sys.exit(f"error: {args.store} holds no build — run nox -s build (or bench/release_build_bench.py) first")
    cold = json.loads(args.cold.read_text())
    cold_seconds = float(cold["steps_seconds"]["cairn build (cold)"])

    work = Path(tempfile.mkdtemp(prefix="cairn-shared-cache-bench-"))
    moto, endpoint = start_moto(work / "moto.log")
    try:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        cache = f"s3://{BUCKET}/cache"
        base = {**os.environ, "CAIRN_S3_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1", "CAIRN_ROOT": str(ROOT)}
        base.pop("CAIRN_CACHE", None)
        first, first_wall = build(args.store.resolve(), ROOT, base, cache)
        print(f"machine A: {first['counts']} in {first_wall} s", file=sys.stderr)
        objects, stored = bucket_bytes(endpoint)

        home, cwd = work / "b" / "home", work / "b" / "cwd"
        home.mkdir(parents=True)
        cwd.mkdir(parents=True)
        second, second_wall = build(work / "b" / "store", cwd, {**base, "HOME": str(home)}, cache)
        print(f"machine B: {second['counts']} in {second_wall} s", file=sys.stderr)
    finally:
        moto.terminate()
        moto.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)

    differ = sorted(a for a, o in second["actions"].items()
                    if o.get("output") != first["actions"].get(a, {}).get("output"))
    doc = {
        "bench": "shared_cache",
        "command": "python bench/shared_cache_bench.py " + " ".join(sys.argv[1:]),
        "machine": describe(),
        "actions": len(first["actions"]),
        "bucket": {"objects": objects, "bytes": stored},
        "machine_a": machine(first, first_wall),
        "machine_b": machine(second, second_wall),
        "same_outputs": not differ, "differing_outputs": differ,
        "cold_build": {"seconds": cold_seconds, "from": str(args.cold.relative_to(ROOT)) if args.cold.is_relative_to(ROOT) else str(args.cold),
                       "commit": cold.get("machine", {}).get("commit", "")},
        "speedup_second_machine": round(cold_seconds / second_wall, 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: doc[k] for k in ("machine_a", "machine_b", "same_outputs", "speedup_second_machine")}, indent=1))
    return 0 if not differ and second["counts"].get("ran", 1) == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
