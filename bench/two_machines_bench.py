"""Two machines, one release: machine A builds it cold with the shared S3 action cache on; machine B builds it
from the bucket.

    python bench/two_machines_bench.py --out bench/results/two_machines.json [--work DIR] [--manifest NAME]
                                       [--hand-over]

Both machines are ``cairn build --cache s3://…`` processes of their own, each with its own working directory,
HOME and empty store, against one moto S3 server in its own process (its objects spooled under ``--work``), and
the services' Docker Engine and registry (``cairn services start``):

1. machine A builds the release from nothing: every action runs, and its output goes up to the bucket as it
   finishes (the build waits for the last upload before it ends) — a first CI runner;
2. machine B runs the same command: every action must be fetched, none may run, and every action's output
   digest must equal machine A's.

``--hand-over`` deletes machine A's store, and the images its build left in the services' engine, before machine
B starts, as a CI runner's disk goes when its job ends: one 100 GB disk does not hold machine A's store and
images, the bucket and machine B's store together.

The JSON records both builds' wall seconds, action counts and cache reports (bytes sent and received, blobs
linked instead of downloaded), the bucket's objects and bytes by kind beside the bytes machine A's trees hold
counted whole (what whole-tree archives would have put in the bucket before compression), each store's size on
disk and the machine. The peer is what machine B does without the cache: build the release cold, as machine A
did (whose seconds include sending its uploads, so the ratio, if anything, flatters the cold build).
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
from typing import Any

from machine import describe
from moto_server import start_moto
from runners import bucket_contents, build_summary, disk_bytes, forget_images, machine, s3_client, services

BUCKET = "cairn-cache"
PREFIX = "release"


def whole_tree_bytes(store: Path) -> int:
    """The bytes of every regular file of every tree, each tree counted whole (a file two trees share, twice)."""
    total = 0
    for tree in (store / "trees").iterdir():
        for dirpath, _dirs, files in os.walk(tree):
            total += sum(os.lstat(os.path.join(dirpath, f)).st_size for f in files
                         if not os.path.islink(os.path.join(dirpath, f)))
    return total


def build(cwd: Path, env: dict[str, str], store: Path, manifest: list[str]) -> tuple[dict[str, Any], float]:
    """One ``cairn build --cache`` of the whole release (its progress to this terminal); its report and wall
    seconds."""
    command = [sys.executable, "-m", "cairn.cli", "build", *manifest, "--jobs", str(os.cpu_count() or 2),
               "--store", str(store), "--cache", f"s3://{BUCKET}/{PREFIX}"]
    started = time.monotonic()
    status = subprocess.run(command, cwd=cwd, env=env).returncode
    seconds = round(time.monotonic() - started, 1)
    if status != 0:
        raise SystemExit(f"cairn build in {cwd} exited {status}")
    return json.loads((store / "last-build.json").read_text()), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, help="the machines' directories and the bucket's spool (default: a temporary one)")
    parser.add_argument("--manifest", default=None, help="release manifest (default: the default release)")
    parser.add_argument("--hand-over", action="store_true",
                        help="delete machine A's store and images once its uploads are in the bucket, before machine B starts")
    args = parser.parse_args()
    manifest = [args.manifest] if args.manifest else []
    engine = services()

    work = args.work.resolve() if args.work else Path(tempfile.mkdtemp(prefix="two-machines-"))
    spool = work / "bucket-spool"
    spool.mkdir(parents=True, exist_ok=True)
    server, endpoint = start_moto(spool=spool)
    try:
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        cwd_a, env_a = machine(work, "a", endpoint, engine)
        store_a = cwd_a / "store"
        built, build_seconds = build(cwd_a, env_a, store_a, manifest)
        bucket = bucket_contents(endpoint, BUCKET, PREFIX)
        store_a_bytes, trees_whole = disk_bytes(store_a), whole_tree_bytes(store_a)
        print(f"machine A: {built['counts']} in {build_seconds} s; bucket {bucket}", file=sys.stderr)
        if args.hand_over:
            shutil.rmtree(store_a)
            forget_images(engine)

        cwd_b, env_b = machine(work, "b", endpoint, engine)
        store_b = cwd_b / "store"
        fetched, fetch_seconds = build(cwd_b, env_b, store_b, manifest)
        print(f"machine B: {fetched['counts']} in {fetch_seconds} s", file=sys.stderr)

        everything = sorted(built["actions"])
        outputs_a = {a: o["output"] for a, o in built["actions"].items()}
        outputs_b = {a: o["output"] for a, o in fetched["actions"].items()}
        different = sorted(a for a in everything if outputs_b.get(a) != outputs_a[a])
        ran_on_b = sorted(a for a, o in fetched["actions"].items() if o["status"] == "ran")
        stored = sum(v for k, v in bucket.items() if k.endswith("_bytes"))
        result = {
            "bench": "two_machines",
            "command": " ".join(["python", "bench/two_machines_bench.py", *sys.argv[1:]]),
            "manifest": args.manifest or "default",
            "actions": len(everything),
            "machine_a_cold_build": build_summary(built, build_seconds),
            "machine_b_fetch": build_summary(fetched, fetch_seconds),
            "ran_on_machine_b": ran_on_b,
            "outputs_that_differ": different,
            "same_release": not different and set(outputs_a) == set(outputs_b),
            "bundle_digest": outputs_b.get("bundle:release"),
            "bucket": bucket,
            "bucket_bytes": stored,
            "trees_counted_whole_bytes": trees_whole,
            "bucket_over_trees_counted_whole": round(stored / trees_whole, 3),
            "disk_bytes": {"store_a": store_a_bytes, "store_b": disk_bytes(store_b)},
            "hand_over": args.hand_over,
            "speedup_fetch_vs_cold_build": round(build_seconds / fetch_seconds, 2),
            "machine": describe(),
        }
    finally:
        server.kill()
        server.wait()
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: result[k] for k in ("actions", "ran_on_machine_b", "same_release", "speedup_fetch_vs_cold_build")}))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    if ran_on_b or not result["same_release"]:
        sys.exit("error: machine B ran actions or built other outputs than machine A — see " + str(args.out))


if __name__ == "__main__":
    main()
