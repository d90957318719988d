"""Publish memory benchmark: the peak resident memory of ``cairn publish --to s3://…``, moto in its own process.

    python bench/publish_memory_bench.py --out bench/results/publish_memory.json [--store .cairn | --bundle DIR]
                                         [--synthetic-gb 4]

Why a bench of its own: the publisher once held every blob of the release in memory (10.4 GB resident for the
default release's 21 GB), and beside an S3 server on a 24 GB machine it was killed. Its memory must be bounded
by part size x concurrency, not by the release. The command is measured as a user runs it, in a process of
its own under ``/usr/bin/time -v`` ("Maximum resident set size"), its wall time beside it; moto, which keeps
what it receives, runs in another process with its spool files in the work directory (deleted afterwards).

The bundle is the ``bundle:release`` tree of ``--store``'s last build (the default release; only read), a
given ``--bundle``, or, when neither exists, a synthetic release written here: the sample bundle plus
incompressible "other" artifacts and big stored wheels adding up to ``--synthetic-gb`` GB, the shape of the
default release (a few objects of about a GB, many smaller).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from machine import describe
from moto_server import start_moto

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "cairn-memory"
GOAL_BYTES = 1 << 30  # issue 38: at most 1 GB resident for the default release
PEAK = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")
ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)")
CHUNK = 8 << 20


def _random_file(path: Path, size: int) -> None:
    """``size`` incompressible bytes (a wheel's or deb's payload compresses no further), written a chunk at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        left = size
        while left:
            n = min(CHUNK, left)
            out.write(os.urandom(n))
            left -= n


def _big_wheel(directory: Path, project: str, size: int) -> Path:
    """A valid wheel whose payload is ``size`` random bytes, stored (not deflated), streamed into the zip."""
    from cairn.publish.sample import write_wheel

    small = write_wheel(directory, project, "5.2.3", "py3-none-linux_x86_64", {f"{project.replace('-', '_')}/__init__.py": b""})
    with zipfile.ZipFile(small, "a", zipfile.ZIP_STORED) as zf, zf.open(f"{project.replace('-', '_')}/payload.bin", "w",
                                                                         force_zip64=True) as member:
        left = size
        while left:
            n = min(CHUNK, left)
            member.write(os.urandom(n))
            left -= n
    return small


def synthetic_release(root: Path, total: int) -> Path:
    """The sample bundle plus ``total`` bytes of big artifacts: two 400 MiB files, four wheels of a tenth of the
    rest each, and the remainder as 64 MiB files. (No bigger: moto, which reads a request's body whole, on this
    shared 2-core machine answered neither a 1.1 GiB multipart completion nor a 900 MiB PUT within a request's
    60 s timeout.)"""
    from cairn.matrix.bundle import write_bundle_json
    from cairn.publish.sample import write_sample_bundle

    write_sample_bundle(root, wheels_per_family=2, payload_bytes=1 << 20)
    doc = json.loads((root / "bundle.json").read_text())
    artifacts = [a for a in doc["artifacts"]]
    family = artifacts[0]["family"]
    big = 400 << 20
    sizes = [big, big]
    left = max(0, total - 2 * big)
    wheel_size = left // 10
    for n in range(4):
        wheel = _big_wheel(root / "files" / "wheels" / family, f"cairn-big{n}", wheel_size)
        artifacts.append({"path": f"wheels/{family}/{wheel.name}", "kind": "wheel", "family": family, "cells": [family],
                          "recipe": "bench/synthetic"})
    left -= 4 * wheel_size
    sizes += [64 << 20] * (left // (64 << 20))
    for n, size in enumerate(sizes):
        path = f"blobs/blob-{n:03}.bin"
        _random_file(root / "files" / path, size)
        artifacts.append({"path": path, "kind": "other", "cells": [], "content_type": "application/octet-stream"})
    for a in artifacts:
        a.pop("sha256", None)
    doc["artifacts"] = artifacts
    doc.pop("schema", None)
    write_bundle_json(root, doc)
    return root


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, object]:
    """Peak resident bytes and wall seconds of ``cmd`` as ``/usr/bin/time -v`` reports them."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], env=env, capture_output=True, text=True)
    peak, elapsed = PEAK.search(proc.stderr), ELAPSED.search(proc.stderr)
    assert peak and elapsed, proc.stderr[-2000:]
    hours, minutes, seconds = elapsed.groups()
    run: dict[str, object] = {"peak_rss_bytes": int(peak.group(1)) * 1024,
                              "seconds": round(int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds), 2)}
    if proc.returncode != 0:  # kept, with its error: a publisher killed for memory is a result too
        run["error"] = next((line for line in proc.stderr.splitlines() if line.startswith("cairn ")), proc.stderr[-500:])
        print(f"{' '.join(cmd[:6])} failed: {run['error']}", file=sys.stderr)
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn")
    parser.add_argument("--bundle", type=Path, default=None, help="a bundle directory (default: the store's last build's)")
    parser.add_argument("--synthetic", action="store_true", help="bench a synthetic release even when the store has one")
    parser.add_argument("--synthetic-gb", type=float, default=4.0, help="size of the synthetic release (default 4 GB)")
    parser.add_argument("--work", type=Path, default=None, help="where moto spools and the synthetic release goes (default: a temp dir)")
    parser.add_argument("--make-synthetic", type=Path, default=None,
                        help="only write the synthetic release into this directory (to bench two commits on one bundle)")
    parser.add_argument("--label", default="", help="how the JSON names the bundle given with --bundle")
    parser.add_argument("--before", type=Path, default=None,
                        help="the JSON this script wrote at an earlier commit, on the same bundle: kept as 'before' beside this run")
    parser.add_argument("--before-code", default="",
                        help="the commit the --before run's cairn was (its machine.commit is the checkout the script ran from)")
    args = parser.parse_args()
    os.environ.setdefault("CAIRN_ROOT", str(ROOT))

    from tuf.api.serialization.json import JSONSerializer

    from cairn.errors import CairnError
    from cairn.matrix.bundle import load_bundle
    from cairn.publish.command import last_build_bundle
    from cairn.sign.keys import init_keys, make_root

    if args.make_synthetic:
        synthetic_release(args.make_synthetic, int(args.synthetic_gb * 1e9))
        return 0
    work = Path(tempfile.mkdtemp(prefix="cairn-publish-memory-", dir=args.work))
    try:
        bundle_dir, source = args.bundle, args.label or f"bundle {args.bundle}"
        if bundle_dir is None and not args.synthetic:
            try:
                bundle_dir, source = last_build_bundle(args.store), f"default release, bundle:release of {args.store}"
            except CairnError as exc:
                print(f"no default release bundle ({exc}); benching a synthetic release", file=sys.stderr)
        if bundle_dir is None:
            total = int(args.synthetic_gb * 1e9)
            bundle_dir = synthetic_release(work / "synthetic", total)
            source = f"synthetic release, {args.synthetic_gb:g} GB (bench/publish_memory_bench.py synthetic_release)"
        bundle = load_bundle(bundle_dir)
        sizes = [bundle.file(a).stat().st_size for a in bundle.artifacts]
        keys = init_keys(work / "keys")
        (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
        spool = work / "moto-spool"
        spool.mkdir()
        moto, endpoint = start_moto(subprocess.DEVNULL, spool)
        try:
            import boto3

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="b",
                         aws_secret_access_key="b").create_bucket(Bucket=BUCKET)
            env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
                   "CAIRN_TUF_CACHE": str(work / "tuf"), "CAIRN_S3_ENDPOINT": endpoint}
            cmd = [sys.executable, "-m", "cairn.cli", "publish", str(bundle_dir), "--to", f"s3://{BUCKET}/release",
                   "--keys", str(keys.directory), "--json"]
            first = measure(cmd, env)
            again = measure(cmd, env)
        finally:
            moto.terminate()
            moto.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    from cairn.publish.writer import IN_FLIGHT, THREADS
    from cairn.remote.backend import MULTIPART_THRESHOLD, PART_SIZE, PART_THREADS

    doc = {
        "bench": "publish_memory", "source": source,
        "artifacts": len(sizes), "artifact_bytes": sum(sizes), "largest_artifact_bytes": max(sizes, default=0),
        "first": first, "unchanged": again,
        "settings": {"threads": THREADS, "in_flight_bytes": IN_FLIGHT, "multipart_threshold": MULTIPART_THRESHOLD,
                     "part_size": PART_SIZE, "part_threads": PART_THREADS},
        "goal": {"peak_rss_bytes": f"<= {GOAL_BYTES}"},
        "meets_goal": "error" not in first and int(first["peak_rss_bytes"]) <= GOAL_BYTES,  # type: ignore[call-overload]
        "command": "python bench/publish_memory_bench.py " + " ".join(sys.argv[1:]), "machine": describe(),
    }
    if args.before:
        earlier = json.loads(args.before.read_text())
        doc["before"] = {k: earlier[k] for k in ("first", "unchanged", "source", "command", "machine", "settings", "error") if k in earlier}
        doc["before"]["code_commit"] = args.before_code
        if "peak_rss_bytes" in earlier.get("first", {}):
            doc["peak_rss_ratio_before_vs_after"] = round(earlier["first"]["peak_rss_bytes"] / int(first["peak_rss_bytes"]), 1)  # type: ignore[call-overload]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"{source}: {doc['artifacts']} artifacts, {int(doc['artifact_bytes']) / 1e9:.2f} GB")
    for name, run in (("first publish", first), ("unchanged", again)):
        print(f"  {name:14} peak {int(run['peak_rss_bytes']) / 2**20:8.1f} MiB   {run['seconds']:>7} s"  # type: ignore[call-overload]
              + (f"   FAILED: {run['error']}" if "error" in run else ""))
    print(f"  goal <= {GOAL_BYTES / 2**20:.0f} MiB: {'met' if doc['meets_goal'] else 'NOT met'}")
    return 0 if "error" not in first and "error" not in again else 1


if __name__ == "__main__":
    raise SystemExit(main())
