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

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "cairn-cache"
PREFIX = "release"


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test")


def services() -> dict[str, str]:
    """DOCKER_HOST and CAIRN_REGISTRY of the services (started when none run), passed to both machines, whose
    HOMEs do not hold the services' state file."""
    out = subprocess.run([sys.executable, "-m", "cairn.cli", "services", "start", "--json"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    state = json.loads(out.stdout)
    return {"DOCKER_HOST": state["docker_host"], "CAIRN_REGISTRY": state["registry"]}


def bucket_contents(endpoint: str) -> dict[str, int]:
    """Objects and bytes under the cache prefix, by kind: tree archives, blobs and action records."""
    kinds = {"trees": "trees", "blobs": "blobs", "ac": "records"}
    counts = {f"{kind}{suffix}": 0 for kind in kinds.values() for suffix in ("", "_bytes")}
    for page in _client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX + "/"):
        for obj in page.get("Contents", []):
            kind = kinds[obj["Key"][len(PREFIX) + 1:].split("/")[0]]
            counts[kind] += 1
            counts[kind + "_bytes"] += obj["Size"]
    return counts


def whole_tree_bytes(store: Path) -> int:
    """The bytes of every regular file of every tree, each tree counted whole (a file two trees share, twice)."""
    total = 0
    for tree in (store / "trees").iterdir():
        for dirpath, _dirs, files in os.walk(tree):
            total += sum(os.lstat(os.path.join(dirpath, f)).st_size for f in files
                         if not os.path.islink(os.path.join(dirpath, f)))
    return total


def disk_bytes(path: Path) -> int:
    """Bytes the files under ``path`` hold on disk (``du``: hard links counted once)."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def machine(work: Path, name: str, endpoint: str, engine: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """Another machine: its own working directory and HOME; the one bucket and the services."""
    cwd = work / name
    (cwd / "home").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **engine, "HOME": str(cwd / "home"), "CAIRN_S3_ENDPOINT": endpoint,
           "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "CAIRN_ROOT": str(ROOT)}
    env.pop("CAIRN_CACHE", None)
    return cwd, env


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


def summary(report: dict[str, Any], seconds: float) -> dict[str, object]:
    """A build's wall seconds and counts, and its cache report with each list of actions as its length."""
    cache = report["cache"]
    return {"seconds": seconds, "counts": report["counts"],
            "cache": {k: (len(v) if isinstance(v, list) else v) for k, v in cache.items() if k != "url"}}


def forget_images(engine: dict[str, str]) -> None:
    """Machine A's images out of the services' engine: its disk goes with the runner (machine B needs none)."""
    import docker

    docker.DockerClient(base_url=engine["DOCKER_HOST"]).images.prune(filters={"dangling": False})


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
        _client(endpoint).create_bucket(Bucket=BUCKET)
        cwd_a, env_a = machine(work, "a", endpoint, engine)
        store_a = cwd_a / "store"
        built, build_seconds = build(cwd_a, env_a, store_a, manifest)
        bucket = bucket_contents(endpoint)
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
            "machine_a_cold_build": summary(built, build_seconds),
            "machine_b_fetch": summary(fetched, fetch_seconds),
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
