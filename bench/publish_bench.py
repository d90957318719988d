"""Publish benchmark: ``cairn publish`` vs ``aws s3 sync`` of the same tree, to the same moto S3 endpoint.

    python bench/publish_bench.py --out bench/results/publish.json [--store .cairn] [--only release|sample] [--repeat 3] [--sample-repeat 7]

Two bundles in one run, each on a moto server of its own that both sides share: the ``bundle:release`` tree of ``--store``'s last
build (the default release; only read) and the sample bundle (3 families x 4 wheels x 1 MiB). Both sides
upload one repository tree: cairn publishes the bundle (signing, attestations, index pages, TUF metadata,
conditional writes); the peer syncs the tree cairn wrote to a local directory first (same objects, already
signed) — what a user would do with today's tools. Per bundle and side, in a fresh bucket prefix: the first
upload, then an unchanged re-publish; ``--repeat`` pairs of runs, the side that goes first alternating, and
the medians reported (every run is kept in the JSON with the load average after it). Times are wall clock of
the whole command, interpreter start-up included on both sides (both are the real scripts of this
interpreter, no pyenv shim, and both run compiled bytecode, as installed packages do). Requests of those same runs are counted from the server's access log (one line
per request): PUTs (objects, multipart parts and cairn's server-side copies, which are PUTs with a copy
source), GETs, HEADs, LISTs; and the CPU seconds of each first upload: the command's (with its children)
and the server process's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe
from moto_server import start_moto

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "cairn-bench"


# werkzeug colours the lines of 3xx/4xx/5xx answers (a 404 GET, a 412 PUT) with ANSI escapes inside the quotes
COLOUR = r"(?:\x1b\[[0-9;]*m)*"
REQUEST = re.compile(rf'"{COLOUR}(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/[0-9.]+{COLOUR}" (\d+)')


def count_requests(log: Path, offset: int, prefix: str) -> tuple[dict[str, int], int]:
    """Requests to ``BUCKET/prefix`` logged after ``offset``: PUT (objects and parts), GET, HEAD, LIST, other; and
    BUCKET: requests about the bucket itself (its policy and Block Public Access setting, which cairn reads and
    writes so that the index is publicly readable)."""
    data = log.read_bytes()
    counts = {"PUT": 0, "GET": 0, "HEAD": 0, "LIST": 0, "POST": 0, "DELETE": 0, "BUCKET": 0}
    for method, path, _status in REQUEST.findall(data[offset:].decode(errors="replace")):
        if path.startswith(f"/{BUCKET}/{prefix}/"):
            counts[method] += 1
        elif path.startswith((f"/{BUCKET}?", f"/{BUCKET}/?")) and method == "GET" and f"prefix={prefix}" in path.replace("%2F", "/"):
            counts["LIST"] += 1
        elif path.startswith((f"/{BUCKET}?policy", f"/{BUCKET}?publicAccessBlock")):
            counts["BUCKET"] += 1
    return counts, len(data)


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="b", aws_secret_access_key="b")


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str, float]:
    """Wall seconds, stdout and the CPU seconds (user + system) of the command and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} failed: {proc.stderr[-2000:]}")
    return elapsed, proc.stdout, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the server process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compile_bytecode() -> None:
    """Both sides start from compiled bytecode, as installed packages do (pip compiles a wheel's modules when it
    installs it; the aws CLI's are). An editable checkout run with ``PYTHONDONTWRITEBYTECODE`` set never writes
    its ``.pyc`` files, so without this every timed ``cairn`` command compiled its modules from source again."""
    import cairn

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(cairn.__file__).parent)], check=True)


def peer_aws() -> str:
    """The aws CLI script itself, next to this interpreter when installed there (a pyenv shim adds ~0.1 s per call)."""
    beside = Path(sys.executable).parent / "aws"
    found = str(beside) if beside.is_file() else shutil.which("aws")
    if not found:
        raise SystemExit("aws CLI not installed — pip install awscli")
    return found


def bench_one(name: str, bundle_dir: Path, work: Path, keys_dir: Path, aws: str, endpoint: str, log: Path,
              env: dict[str, str], repeat: int = 1, server_pid: int = 0) -> dict[str, object]:
    """Both sides, first upload then unchanged re-publish, each into its own fresh prefix, ``repeat`` times
    (medians reported, every run kept); requests counted from the server's access log of the timed runs."""
    from cairn.publish.bundle import load_bundle
    from cairn.publish.publisher import load_root, publish
    from cairn.publish.writer import COPY_MIN
    from cairn.remote.backend import FileBackend

    client = _client(endpoint)

    def drop(prefix: str) -> None:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            for i in range(0, len(keys), 1000):
                client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys[i:i + 1000], "Quiet": True})
    from cairn.sign.keys import load_keys

    tree = work / f"tree-{name}"  # the peer uploads exactly what cairn publishes, written locally first
    publish(load_bundle(bundle_dir), FileBackend(tree), load_keys(keys_dir), load_root(keys_dir / "root.json"))
    files = [p for p in tree.rglob("*") if p.is_file()]

    def cairn_cmd(prefix: str) -> list[str]:
        return [sys.executable, "-m", "cairn.cli", "publish", str(bundle_dir), "--to", f"s3://{BUCKET}/{prefix}",
                "--keys", str(keys_dir), "--json"]

    def aws_cmd(prefix: str) -> list[str]:
        return [aws, "--endpoint-url", endpoint, "s3", "sync", "--only-show-errors", str(tree), f"s3://{BUCKET}/{prefix}"]

    sides = {"cairn": cairn_cmd, "aws s3 sync": aws_cmd}
    runs: dict[str, list[dict[str, object]]] = {side: [] for side in sides}
    for n in range(repeat):
        # the order alternates, so a change in the machine's load does not always fall on the same side
        for side in (list(sides) if n % 2 == 0 else list(sides)[::-1]):
            prefix = f"{name}-{'c' if side == 'cairn' else 'a'}{n}"
            offset = log.stat().st_size
            server_before = server_cpu(server_pid)
            first, _, first_cpu = timed(sides[side](prefix), env)
            time.sleep(0.5)  # let the server flush its log (and finish the requests' work)
            first_server_cpu = server_cpu(server_pid) - server_before
            first_counts, offset = count_requests(log, offset, prefix)
            again, out, _ = timed(sides[side](prefix), env)
            time.sleep(0.5)
            again_counts, _ = count_requests(log, offset, prefix)
            if side == "cairn":
                report = json.loads(out)
                assert report["uploaded"] == 0 and not report["signed"], report
            runs[side].append({"first_seconds": round(first, 3), "unchanged_seconds": round(again, 3),
                               "first_cpu_seconds": {"client": round(first_cpu, 2), "server": round(first_server_cpu, 2)},
                               "first_requests": first_counts, "unchanged_requests": again_counts,
                               "load": round(os.getloadavg()[0], 2)})
            drop(prefix)  # untimed: keeps the server's memory and spool files to one repository at a time
    results = {side: {"first_seconds": _median([r["first_seconds"] for r in rs]),
                      "unchanged_seconds": _median([r["unchanged_seconds"] for r in rs]),
                      "first_requests": rs[0]["first_requests"], "unchanged_requests": rs[0]["unchanged_requests"],
                      "first_cpu_seconds": {part: _median([r["first_cpu_seconds"][part] for r in rs]) for part in ("client", "server")},
                      "runs": rs} for side, rs in runs.items()}
    c, a = results["cairn"], results["aws s3 sync"]
    copied = [p for p in files if HASHED.match(p.name) and p.stat().st_size >= COPY_MIN]
    return {
        "objects": len(files), "bytes": sum(p.stat().st_size for p in files), "results": results, "repeat": repeat,
        "cairn_server_side_copies": {"objects": len(copied), "bytes": sum(p.stat().st_size for p in copied)},
        "speedup_first": round(float(a["first_seconds"]) / float(c["first_seconds"]), 2),  # type: ignore[arg-type]
        "speedup_unchanged": round(float(a["unchanged_seconds"]) / float(c["unchanged_seconds"]), 2),  # type: ignore[arg-type]
        "speedup_first_per_run": [round(float(x["first_seconds"]) / float(y["first_seconds"]), 2)  # type: ignore[arg-type]
                                  for x, y in zip(runs["aws s3 sync"], runs["cairn"], strict=True)],
        "unchanged_puts": {"cairn": c["unchanged_requests"]["PUT"], "aws s3 sync": a["unchanged_requests"]["PUT"]},  # type: ignore[index]
    }


HASHED = re.compile(r"^[0-9a-f]{64}\.")


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else round((ordered[mid - 1] + ordered[mid]) / 2, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn")
    parser.add_argument("--only", choices=("release", "sample"), default=None, help="bench one bundle (default: both)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side of the release, order alternating; medians reported")
    parser.add_argument("--sample-repeat", type=int, default=7,
                        help="runs per side of the sample (about 2 s each, so one busy second moves a run by half)")
    args = parser.parse_args()
    os.environ.setdefault("CAIRN_ROOT", str(ROOT))
    aws = peer_aws()
    compile_bytecode()

    from tuf.api.serialization.json import JSONSerializer

    from cairn.errors import CairnError
    from cairn.publish.command import last_build_bundle
    from cairn.publish.sample import write_sample_bundle
    from cairn.sign.keys import init_keys, make_root

    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="cairn-publish-bench-"))
    bundles: dict[str, tuple[Path, str]] = {}
    if args.only in (None, "release"):
        try:  # the store is only read: publishing reads the bundle's files, never writes next to them
            bundles["release"] = (last_build_bundle(args.store), f"default release, bundle:release of {args.store}")
        except CairnError as exc:
            print(f"no default release bundle ({exc}); benching the sample only", file=sys.stderr)
    if args.only in (None, "sample"):
        bundles["sample"] = (write_sample_bundle(work / "sample", wheels_per_family=4, payload_bytes=1 << 20),
                             "sample bundle, 3 families x 4 wheels x 1 MiB")
    keys = init_keys(work / "keys")
    (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))

    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
           "CAIRN_TUF_CACHE": str(work / "tuf")}
    runs: dict[str, dict[str, object]] = {}
    try:
        for name, (bundle_dir, source) in bundles.items():
            # each bundle on a server of its own, both sides on that one: the release's gigabytes leave moto's
            # memory and spool files behind them, which made every request of a bundle benched after it slower
            log = work / f"moto-{name}.log"
            with open(log, "wb") as access_log:  # one line per request: how requests are counted
                moto, endpoint = start_moto(access_log)
            try:
                _client(endpoint).create_bucket(Bucket=BUCKET)
                runs[name] = {"source": source, **bench_one(name, bundle_dir, work, keys.directory, aws, endpoint, log,
                                                         {**env, "CAIRN_S3_ENDPOINT": endpoint},
                                                         args.sample_repeat if name == "sample" else args.repeat, moto.pid)}
            finally:
                moto.terminate()
                moto.wait(timeout=10)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    doc = {
        "bench": "publish", "runs": runs,
        "command": "python bench/publish_bench.py " + " ".join(sys.argv[1:]), "machine": describe(),
        "load_before": load_before,
        "tools": {"aws": " ".join(subprocess.run([aws, "--version"], capture_output=True, text=True).stdout.split()[:1])},
        "goals": {"first": ">= 1.5x", "unchanged": ">= 5x with zero PUTs"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    for run in runs.values():
        print(f"{run['source']}: {run['objects']} objects, {int(run['bytes']) / 1e6:.1f} MB")  # type: ignore[call-overload]
        print(f"  {'':14}{'first upload':>14}{'CPU client/server':>20}{'unchanged':>12}{'PUTs first':>12}{'PUTs again':>12}"
              f"{'GET/HEAD/LIST again':>22}")
        for side, r in run["results"].items():  # type: ignore[attr-defined]
            q, cpu = r["unchanged_requests"], r["first_cpu_seconds"]
            print(f"  {side:14}{r['first_seconds']:>13.2f}s{cpu['client']:>13.2f}/{cpu['server']:.2f}s{r['unchanged_seconds']:>11.2f}s"
                  f"{r['first_requests']['PUT']:>12}{q['PUT']:>12}{q['GET']:>10}/{q['HEAD']}/{q['LIST']}")
        print(f"  speed-up: first {run['speedup_first']}x (goal 1.5x; per run {run['speedup_first_per_run']}), "
              f"unchanged {run['speedup_unchanged']}x (goal 5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
