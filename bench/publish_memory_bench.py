"""Publish memory benchmark: the peak resident memory of ``cairn publish --to s3://…``, moto in its own process.

    python bench/publish_memory_bench.py --out bench/results/publish_memory.json [--store .cairn | --bundle DIR]
                                         [--synthetic-gb 3] [--release-shaped-gb 21.5] [--keep-before OLD.json]

Why a bench of its own: the publisher once held every blob of the release in memory (10.4 GB resident for the
default release's 21 GB), and beside an S3 server on a 24 GB machine it was killed. Its memory must be bounded
by part size x concurrency, not by the release. The command is measured as a user runs it, in a process of
its own under ``/usr/bin/time -v`` ("Maximum resident set size"), its wall time beside it: a first publish, then
an unchanged re-publish, each bundle to a moto server of its own in another process.

The bundles, all measured in one run with the same settings:

- the default release, ``bundle:release`` of ``--store``'s last build (only read), or a given ``--bundle``;
- when neither exists, a synthetic release of ``--synthetic-gb`` GB written here (``synthetic_release``: the
  sample bundle plus incompressible files and stored wheels, at most 400 MiB each), published to a moto that
  keeps every byte (spooled to the work directory, deleted afterwards);
- and a *release-shaped* bundle of ``--release-shaped-gb`` GB (``release_shaped``; 0: none) in about as many
  repository objects as the default release (1327): two 1.5 GiB framework wheels (multipart uploads), a dozen
  library wheels of 300-520 MB, ten device wheels of 200-260 MB, files of 64-192 MiB and many small files. Its
  files are *sparse* (64 KiB of random bytes, then a hole; a wheel ends in a small valid wheel zip), so they cost
  almost no disk, while the publisher still reads, hashes and sends every byte. Its server is moto behind the
  bench's storage shim (``moto_server.start_moto(discard_above=…)``): bodies from ``--discard-above`` bytes, and
  every multipart part, are hashed, checked against the digests sent and *discarded*, moto keeping their size,
  ETag and metadata — 21 GB would otherwise need 21 GB of disk or memory on the server side too, and the server
  is not what is measured. The publisher never reads such an object back (it reads TUF metadata, the publish
  record and staging records, all small; a HEAD of a big object gets its real size and sha256 metadata), and
  the shim refuses any GET of one with a 501, which would fail the run; its counts are kept in the JSON.
  Then the same bundle once more with every object in a single PUT (``CAIRN_MULTIPART_THRESHOLD`` above its
  largest artifact; ``--no-single-put-run``: not), to show what the multipart parts held in memory cost.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from machine import describe
from moto_server import shim_stats, start_moto

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "cairn-memory"
GOAL_BYTES = 1 << 30  # issue 38: at most 1 GB resident for the default release
PEAK = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")
ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)")
CHUNK = 8 << 20
HEADER = 64 << 10  # the random bytes at the start of each sparse file (its digest is its own); the rest is a hole
DISCARD_ABOVE = 16 << 20  # the shim keeps bodies below this (TUF metadata, pages, records: what the publisher reads)


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


def _sparse_file(path: Path, size: int, tail: bytes = b"") -> None:
    """``size`` bytes that cost about ``HEADER`` of disk: random bytes first (so its digest is its own), a hole,
    and ``tail`` as the last bytes. Read back, the hole is zeros: the publisher reads and hashes all of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.write(os.urandom(min(HEADER, size - len(tail))))
        out.truncate(size)
        if tail:
            out.seek(size - len(tail))
            out.write(tail)


def _sparse_wheel(directory: Path, project: str, size: int) -> Path:
    """A wheel of ``size`` bytes, sparse: a small valid wheel zip at the end of the file, after random bytes and
    a hole (zip readers find the central directory from the end, and the publisher reads only it, METADATA and
    the bytes' digest)."""
    from cairn.publish.sample import write_wheel

    with tempfile.TemporaryDirectory(dir=directory.parent) as scratch:
        small = write_wheel(Path(scratch), project, "5.2.3", "py3-none-linux_x86_64", {f"{project.replace('-', '_')}/__init__.py": b""})
        wheel = directory / small.name
        _sparse_file(wheel, size, small.read_bytes())
    return wheel


def release_sizes(total: int, smalls: int = 125, seed: int = 38) -> dict[str, list[int]]:
    """The artifact sizes of a release-shaped bundle of ``total`` bytes, by kind: two 1.5 GiB framework wheels
    (multipart uploads), twelve library wheels of 300-520 MB, ten device wheels of 200-260 MB (the default
    release's family and device wheels, bench/results/device_wheels.json), ``smalls`` files of 2 KiB-16 MiB
    (log-uniform: pages of sources, Dockerfiles, small wheels) and the rest as files of 64-192 MiB."""
    rng = random.Random(seed)
    sizes = {"framework": [3 << 29] * 2,
             "library": [300_000_000 + n * 20_000_000 for n in range(12)],
             "device": [200_000_000 + n * 6_000_000 for n in range(10)],
             "small": [int(math.exp(rng.uniform(math.log(2 << 10), math.log(16 << 20)))) for _ in range(smalls)]}
    left, medium = total - sum(sum(v) for v in sizes.values()), []
    while left > 0:
        size = min(left, rng.randrange(64 << 20, 192 << 20))
        medium.append(size)
        left -= size
    sizes["medium"] = medium
    return sizes


def release_shaped(root: Path, total: int) -> Path:
    """The sample bundle plus ``release_sizes(total)``: sparse files (``_sparse_file``), the wheels valid ones."""
    from cairn.digest import file_sha256
    from cairn.matrix.bundle import write_bundle_json
    from cairn.publish.sample import write_sample_bundle

    write_sample_bundle(root, wheels_per_family=2, payload_bytes=1 << 20)
    doc = json.loads((root / "bundle.json").read_text())
    artifacts = list(doc["artifacts"])
    family = artifacts[0]["family"]
    for kind, sizes in release_sizes(total).items():
        for n, size in enumerate(sizes):
            if kind in ("framework", "library", "device"):
                wheel = _sparse_wheel(root / "files" / "wheels" / family, f"cairn-{kind}{n}", size)
                artifacts.append({"path": f"wheels/{family}/{wheel.name}", "kind": "wheel", "family": family,
                                  "cells": [family], "recipe": "bench/release-shaped"})
            else:
                path = f"blobs/{kind}-{n:03}.bin"
                _sparse_file(root / "files" / path, size)
                artifacts.append({"path": path, "kind": "other", "cells": [], "content_type": "application/octet-stream"})
    for a in artifacts:  # streamed: write_bundle_json would read each file whole
        a["sha256"] = file_sha256(root / "files" / a["path"])
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


def bench_bundle(bundle_dir: Path, source: str, work: Path, keys_dir: Path, discard_above: int | None,
                 extra_env: dict[str, str] | None = None) -> dict[str, object]:
    """A first publish and an unchanged re-publish of ``bundle_dir`` to a moto of its own (with the storage shim
    when ``discard_above``), each measured; what the repository then holds (one LIST) and the shim's counts.
    ``extra_env``: settings the publisher is run with (recorded as ``settings_override``)."""
    import boto3

    from cairn.matrix.bundle import load_bundle

    bundle = load_bundle(bundle_dir)
    sizes = [bundle.file(a).stat().st_size for a in bundle.artifacts]
    spool = work / "moto-spool"
    spool.mkdir()
    moto, endpoint = start_moto(subprocess.DEVNULL, spool, discard_above=discard_above)
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="b", aws_secret_access_key="b")
        client.create_bucket(Bucket=BUCKET)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
               "CAIRN_TUF_CACHE": str(work / "tuf"), "CAIRN_S3_ENDPOINT": endpoint, **(extra_env or {})}
        cmd = [sys.executable, "-m", "cairn.cli", "publish", str(bundle_dir), "--to", f"s3://{BUCKET}/release",
               "--keys", str(keys_dir), "--json"]
        first = measure(cmd, env)
        again = measure(cmd, env)
        objects = [o for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="release/")
                   for o in page.get("Contents", [])]
        run: dict[str, object] = {
            "source": source, "artifacts": len(sizes), "artifact_bytes": sum(sizes), "largest_artifact_bytes": max(sizes, default=0),
            "artifacts_from_1_gib": sum(1 for n in sizes if n >= 1 << 30),
            "repository_objects": len(objects), "repository_bytes": sum(int(o["Size"]) for o in objects),
            "first": first, "unchanged": again,
            **({"settings_override": extra_env} if extra_env else {}),
            "meets_goal": all("error" not in r and int(r["peak_rss_bytes"]) <= GOAL_BYTES for r in (first, again)),  # type: ignore[call-overload]
        }
        if discard_above is None:
            run["server"] = "moto (python -m moto.server), every body kept (spooled to the work directory)"
        else:
            run["server"] = (f"moto behind the bench storage shim (bench/moto_server.py): bodies from {discard_above} bytes and every "
                             "multipart part are hashed, checked against the digests sent and discarded (moto keeps size, ETag and "
                             "metadata); a GET of one is refused. The server is not what is measured, and 21 GB would need 21 GB "
                             "on its side too")
            run["server_shim"] = {"discard_above_bytes": discard_above, **shim_stats(endpoint)}
            run["source_files"] = (f"sparse: {HEADER} random bytes, then a hole (a wheel ends in a small valid wheel zip); "
                                   "the publisher reads, hashes and sends every byte")
        return run
    finally:
        moto.terminate()
        moto.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn")
    parser.add_argument("--bundle", type=Path, default=None, help="a bundle directory (default: the store's last build's)")
    parser.add_argument("--synthetic", action="store_true", help="bench a synthetic release even when the store has one")
    parser.add_argument("--synthetic-gb", type=float, default=3.0, help="size of the synthetic release (default 3 GB)")
    parser.add_argument("--release-shaped-gb", type=float, default=21.5,
                        help="size of the release-shaped sparse bundle, benched too (default 21.5 GB; 0: none)")
    parser.add_argument("--no-single-put-run", action="store_true",
                        help="skip the release-shaped bundle's second run, in single PUTs only (multipart from above its largest artifact)")
    parser.add_argument("--discard-above", type=int, default=DISCARD_ABOVE,
                        help=f"the storage shim discards bodies from this many bytes (release-shaped run; default {DISCARD_ABOVE})")
    parser.add_argument("--work", type=Path, default=None, help="where moto spools and the synthetic releases go (default: a temp dir)")
    parser.add_argument("--make-synthetic", type=Path, default=None,
                        help="only write the synthetic release into this directory (to bench two commits on one bundle)")
    parser.add_argument("--label", default="", help="how the JSON names the bundle given with --bundle")
    parser.add_argument("--before", type=Path, default=None,
                        help="the JSON this script wrote at an earlier commit, on the same bundle: kept as 'before' beside this run")
    parser.add_argument("--before-code", default="",
                        help="the commit the --before run's cairn was (its machine.commit is the checkout the script ran from)")
    parser.add_argument("--keep-before", type=Path, default=None,
                        help="an earlier results file of this script: its 'before' block is kept as it is (measured on another bundle "
                             "of the same shape, written by the same generator)")
    args = parser.parse_args()
    os.environ.setdefault("CAIRN_ROOT", str(ROOT))

    from tuf.api.serialization.json import JSONSerializer

    from cairn.errors import CairnError
    from cairn.publish.command import last_build_bundle
    from cairn.sign.keys import init_keys, make_root

    if args.make_synthetic:
        synthetic_release(args.make_synthetic, int(args.synthetic_gb * 1e9))
        return 0
    work = Path(tempfile.mkdtemp(prefix="cairn-publish-memory-", dir=args.work))
    try:
        keys = init_keys(work / "keys")
        (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
        bundle_dir, source = args.bundle, args.label or f"bundle {args.bundle}"
        if bundle_dir is None and not args.synthetic:
            try:
                bundle_dir, source = last_build_bundle(args.store), f"default release, bundle:release of {args.store}"
            except CairnError as exc:
                print(f"no default release bundle ({exc}); benching a synthetic release", file=sys.stderr)
        if bundle_dir is None:
            bundle_dir = synthetic_release(work / "synthetic", int(args.synthetic_gb * 1e9))
            source = f"synthetic release, {args.synthetic_gb:g} GB (bench/publish_memory_bench.py synthetic_release)"
        (work / "main").mkdir()
        main_run = bench_bundle(bundle_dir, source, work / "main", keys.directory, None)
        if bundle_dir == work / "synthetic":
            shutil.rmtree(bundle_dir)  # its disk back before the next bundle
        shutil.rmtree(work / "main")
        shaped = single = None
        if args.release_shaped_gb > 0:
            (work / "shaped").mkdir()
            started = time.monotonic()
            shaped_dir = release_shaped(work / "release-shaped", int(args.release_shaped_gb * 1e9))
            made = round(time.monotonic() - started, 2)
            shaped = bench_bundle(shaped_dir, f"release-shaped sparse bundle, {args.release_shaped_gb:g} GB "
                                  "(bench/publish_memory_bench.py release_shaped)", work / "shaped", keys.directory, args.discard_above)
            shaped["bundle_write_seconds"] = made
            if not args.no_single_put_run:  # the same bytes with no part held in memory: what the parts cost
                (work / "single").mkdir()
                above = str(int(shaped["largest_artifact_bytes"]) + 1)  # type: ignore[call-overload]
                single = bench_bundle(shaped_dir, str(shaped["source"]) + ", every object in one PUT", work / "single",
                                      keys.directory, args.discard_above, {"CAIRN_MULTIPART_THRESHOLD": above})
    finally:
        shutil.rmtree(work, ignore_errors=True)

    from cairn.publish.writer import IN_FLIGHT, MULTIPART_AT_ONCE, THREADS
    from cairn.remote.backend import MULTIPART_THRESHOLD, PART_SIZE, PART_THREADS
    from cairn.remote.s3http import BLOCK

    first = main_run["first"]
    doc: dict[str, object] = {
        "bench": "publish_memory", **{k: v for k, v in main_run.items() if k != "meets_goal"},
        "settings": {"threads": THREADS, "in_flight_bytes": IN_FLIGHT, "multipart_threshold": MULTIPART_THRESHOLD,
                     "part_size": PART_SIZE, "part_threads": PART_THREADS, "multipart_at_once": MULTIPART_AT_ONCE,
                     "send_block_bytes": BLOCK,
                     # what the code lets be in flight at once, beside the interpreter and the signing libraries
                     "parts_in_memory_bytes": PART_SIZE * PART_THREADS * MULTIPART_AT_ONCE,
                     "send_blocks_bytes": THREADS * BLOCK},
        "goal": {"peak_rss_bytes": f"<= {GOAL_BYTES}"},
        "command": "python bench/publish_memory_bench.py " + " ".join(sys.argv[1:]), "machine": describe(),
    }
    runs = [main_run] + ([shaped] if shaped else []) + ([single] if single else [])
    if shaped:
        doc["release_shaped"] = shaped
    if single:
        doc["release_shaped_single_put"] = single
    doc["meets_goal"] = all(bool(r["meets_goal"]) for r in runs)
    if args.before:
        earlier = json.loads(args.before.read_text())
        doc["before"] = {k: earlier[k] for k in ("first", "unchanged", "source", "command", "machine", "settings", "error") if k in earlier}
        doc["before"]["code_commit"] = args.before_code  # type: ignore[index]
    elif args.keep_before:
        earlier = json.loads(args.keep_before.read_text())
        if "before" in earlier:
            doc["before"] = {**earlier["before"], "note": "kept from an earlier run of this script, on another bundle written by "
                             "the same generator (synthetic_release) at the same size"}
    before = doc.get("before")
    if isinstance(before, dict) and "peak_rss_bytes" in before.get("first", {}):
        doc["peak_rss_ratio_before_vs_after"] = round(before["first"]["peak_rss_bytes"] / int(first["peak_rss_bytes"]), 1)  # type: ignore[index, call-overload]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    settings = doc["settings"]
    print(f"settings: part size {PART_SIZE >> 20} MiB x {PART_THREADS} part threads x {MULTIPART_AT_ONCE} multipart uploads at once "
          f"= {int(settings['parts_in_memory_bytes']) >> 20} MiB of parts; {THREADS} writers x {BLOCK >> 20} MiB send blocks; "  # type: ignore[index]
          f"multipart from {MULTIPART_THRESHOLD >> 20} MiB; {IN_FLIGHT >> 20} MiB of objects in flight at most")
    for run in runs:
        print(f"{run['source']}: {run['artifacts']} artifacts, {int(run['artifact_bytes']) / 1e9:.2f} GB; "  # type: ignore[call-overload]
              f"{run['repository_objects']} objects, {int(run['repository_bytes']) / 1e9:.2f} GB in the repository")  # type: ignore[call-overload]
        for name in ("first", "unchanged"):
            r = run[name]
            print(f"  {name:10} peak {int(r['peak_rss_bytes']) / 2**20:8.1f} MiB   {r['seconds']:>7} s"  # type: ignore[index, call-overload]
                  + (f"   FAILED: {r['error']}" if "error" in r else ""))  # type: ignore[operator, index]
        if "settings_override" in run:
            print(f"  settings override: {run['settings_override']}")
        if "server_shim" in run:
            print(f"  server shim: {run['server_shim']}")
    print(f"  goal <= {GOAL_BYTES / 2**20:.0f} MiB: {'met' if doc['meets_goal'] else 'NOT met'}")
    return 0 if all("error" not in r[n] for r in runs for n in ("first", "unchanged")) else 1  # type: ignore[operator]


if __name__ == "__main__":
    raise SystemExit(main())
