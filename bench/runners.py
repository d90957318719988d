""""Machines" for the benchmarks that share one S3 action cache: each a working directory and HOME of its own, the
one bucket, and the services' Docker Engine and registry.

Used by ``two_machines_bench.py`` (one machine builds, another fetches) and ``shards_bench.py`` (every job of the
emitted workflow on a runner of its own).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                        aws_secret_access_key="test")


def services() -> dict[str, str]:
    """DOCKER_HOST and CAIRN_REGISTRY of the services (started when none run), passed to every machine, whose
    HOMEs do not hold the services' state file."""
    out = subprocess.run([sys.executable, "-m", "cairn.cli", "services", "start", "--json"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    state = json.loads(out.stdout)
    return {"DOCKER_HOST": state["docker_host"], "CAIRN_REGISTRY": state["registry"]}


def machine(work: Path, name: str, endpoint: str, engine: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """Another machine: its own working directory and HOME; the one bucket and the services."""
    cwd = work / name
    (cwd / "home").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **engine, **CREDENTIALS, "HOME": str(cwd / "home"), "CAIRN_S3_ENDPOINT": endpoint,
           "CAIRN_ROOT": str(ROOT), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           **cache_writer(work / "cache-writer")}
    env.pop("CAIRN_CACHE", None)
    return cwd, env


def cache_writer(where: Path) -> dict[str, str]:
    """Every machine is a trusted cache writer (as the release workflow's shard jobs are): one writer key, made
    once per bench run, and the trust list naming it (``cairn keys cache-writer``)."""
    if not (where / "cache-writer.pem").exists():
        subprocess.run([sys.executable, "-m", "cairn.cli", "keys", "cache-writer", "--dir", str(where), "--name", "bench",
                        "--trust", str(where / "cache-writers.json")], cwd=ROOT, capture_output=True, text=True, check=True)
    return {"CAIRN_CACHE_TRUST": str(where / "cache-writers.json"), "CAIRN_CACHE_SIGNING_KEY": str(where / "cache-writer.pem")}


def bucket_contents(endpoint: str, bucket: str, prefix: str) -> dict[str, int]:
    """Objects and bytes under a cache prefix, by kind: tree archives, blobs and action records (anything else
    under the prefix, such as the compiler cache's ``compilers/``, by its first path segment)."""
    kinds = {"trees": "trees", "blobs": "blobs", "ac": "records"}
    counts = {f"{kind}{suffix}": 0 for kind in kinds.values() for suffix in ("", "_bytes")}
    for page in s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            top = obj["Key"][len(prefix) + 1:].split("/")[0]
            kind = kinds.get(top, top)
            counts[kind] = counts.get(kind, 0) + 1
            counts[kind + "_bytes"] = counts.get(kind + "_bytes", 0) + obj["Size"]
    return counts


def disk_bytes(path: Path) -> int:
    """Bytes the files under ``path`` hold on disk (``du``: hard links counted once)."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def forget_images(engine: dict[str, str]) -> None:
    """A finished machine's images out of the services' engine: its disk goes with the runner."""
    import docker

    docker.DockerClient(base_url=engine["DOCKER_HOST"]).images.prune(filters={"dangling": False})


def build_summary(report: dict[str, Any], seconds: float) -> dict[str, object]:
    """A build's wall seconds and counts, and its cache report with each list of actions as its length."""
    cache = report["cache"]
    return {"seconds": seconds, "counts": report["counts"],
            "cache": {k: (len(v) if isinstance(v, list) else v) for k, v in cache.items() if k != "url"}}
