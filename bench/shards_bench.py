"""The emitted workflow's jobs, each on a runner of its own, build the default release — with no action run twice,
and the same digests as one build of it.

    python bench/shards_bench.py --out bench/results/shards.json [--work DIR] [--manifest NAME] [--reference FILE]
    python bench/shards_bench.py --reference-build --out bench/results/shards_reference.json [--manifest NAME]
    python bench/shards_bench.py --recheck bench/results/shards.json [--reference FILE]

``cairn ci github`` writes the release workflow; this runs its jobs here, one after another in an order their
``needs:`` allow, as GitHub would on separate runners:

- every job is a process of its own with its own working directory, HOME and empty store (``--store .cairn``,
  as the job says), against one moto S3 server in its own process (the cache bucket, its objects spooled under
  ``--work``) and the services' Docker Engine and registry;
- each job runs its ``build`` step's script as written, rendered as GitHub renders it for a push to main:
  ``vars.CAIRN_CACHE_BUCKET`` is the bucket, the pull-request read-only switch is empty and the compiler cache
  is on. What the other steps do is done once here instead: cairn is the one installed in this environment, and
  the services' registry stands in for the registry each Docker job starts on its runner (``CAIRN_REGISTRY``);
- after a job, its store and the images it left in the engine are deleted, as a runner's disk goes;
- the publish job runs its build step (read-only: every action must come from the cache) and stages the
  release, signed with development keys in place of the release keys from its secrets, to a local directory.

Then one more runner with an empty store runs ``nox -s build``'s build command (``cairn build --jobs N``) with
the same cache. The checks, each recorded in the JSON and each failing the bench when it does not hold:

- no action ran in two jobs, and every action of the plan ran in exactly one;
- every job ran only its own actions (what it needed from earlier jobs came from the cache) and every action's
  output digest is the same in every job that reported it;
- the one build ran no action, and its outputs equal the jobs' for every action;
- against ``--reference`` (default: ``bench/results/shards_reference.json``), every action's output digest equals
  that of ``nox -s build``'s build command run cold, with no cache, on a runner of its own beside the same
  services (``--reference-build`` makes that file). The services' registry address is part of what the images'
  push records, the gates and the bundle hold, so a reference made beside other services differs there and only
  there: the check names the actions that differ, and the registry of each side.

``--recheck`` compares a finished run's outputs with the reference again, without building anything (the
reference may be made after the run).

The JSON holds, per job: wall seconds, counts, the cache report and its store's size; the bucket's objects by
kind; every action's output digest; and the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import describe
from moto_server import start_moto
from runners import (
    ROOT,
    bucket_contents,
    build_summary,
    disk_bytes,
    forget_images,
    machine,
    s3_client,
    services,
)

REFERENCE = ROOT / "bench" / "results" / "shards_reference.json"
BUCKET = "cairn-ci-cache"
PREFIX = "cairn"
RENDERED_FOR_A_PUSH = {
    "${{ vars.CAIRN_CACHE_BUCKET }}": BUCKET,
    "${{ github.event_name == 'pull_request' && '--cache-read-only' || '' }}": "",
    ("${{ github.event_name != 'pull_request' && format('--compiler-cache s3://{0}/" + PREFIX
     + "/compilers', vars.CAIRN_CACHE_BUCKET) || '' }}"): f"--compiler-cache s3://{BUCKET}/{PREFIX}/compilers",
}


def emit(work: Path, manifest: list[str], env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``cairn ci github`` for the release: the workflow and the shards report."""
    import yaml

    out = work / "release.yml"
    proc = subprocess.run([sys.executable, "-m", "cairn.cli", "ci", "github", *manifest, "--cache-prefix", PREFIX,
                           "--out", str(out), "--json"], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"cairn ci github failed: {proc.stderr.strip()}")
    return yaml.safe_load(out.read_text()), json.loads(proc.stdout)


def in_needs_order(jobs: dict[str, Any]) -> list[str]:
    """The jobs in an order their ``needs:`` allow, the workflow's own order where it does."""
    done: list[str] = []
    while len(done) < len(jobs):
        done.append(next(n for n, j in jobs.items() if n not in done and set(j.get("needs", [])) <= set(done)))
    return done


def render(script: str) -> str:
    """A step's script as GitHub renders it for a push to main; no expression may be left."""
    for expression, value in RENDERED_FOR_A_PUSH.items():
        script = script.replace(expression, value)
    if "${{" in script:
        raise SystemExit(f"an expression this bench does not render:\n{script}")
    return script


def run_step(cwd: Path, env: dict[str, str], script: str, log: Path) -> float:
    """One step's script under ``bash -eu`` (output to ``log``); its wall seconds. A failed step ends the bench."""
    started = time.monotonic()
    with log.open("w") as sink:
        status = subprocess.run(["bash", "-euc", script], cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT).returncode
    seconds = round(time.monotonic() - started, 1)
    if status != 0:
        raise SystemExit(f"{cwd.name}: the step exited {status} after {seconds} s — see {log}")
    return seconds


def run_job(work: Path, name: str, job: dict[str, Any], endpoint: str, engine: dict[str, str]) -> dict[str, Any]:
    """One job's build step on a runner of its own; its report. The runner's store and images go afterwards."""
    cwd, env = machine(work, f"runner-{name}", endpoint, engine)
    build = next(step for step in job["steps"] if step.get("name") == "build")
    print(f"job {name}: running", file=sys.stderr, flush=True)
    seconds = run_step(cwd, env, render(build["run"]), work / f"{name}.log")
    report = json.loads((cwd / ".cairn" / "last-build.json").read_text())
    result = {**build_summary(report, seconds), "store_bytes": disk_bytes(cwd / ".cairn"),
              "outcomes": {a: {"status": o["status"], "output": o.get("output")} for a, o in report["actions"].items()}}
    if name == "publish":
        result["stage_seconds"] = stage_release(cwd, env, job, work / "published")
    print(f"job {name}: {report['counts']} in {seconds} s", file=sys.stderr, flush=True)
    shutil.rmtree(cwd)
    forget_images(engine)
    return result


def stage_release(cwd: Path, env: dict[str, str], job: dict[str, Any], destination: Path) -> float:
    """The publish job's staging step, signed with development keys (the release keys are the workflow's
    secrets), to a local directory."""
    step = next(step for step in job["steps"] if step.get("name") == "stage the release")
    script = step["run"].replace('--keys "$RUNNER_TEMP/keys"', "--dev-keys")
    return run_step(cwd, {**env, "CAIRN_PUBLISH_TO": destination.as_uri()}, render(script), destination.parent / "stage.log")


def one_build(work: Path, endpoint: str, engine: dict[str, str], manifest: list[str]) -> dict[str, Any]:
    """``nox -s build``'s build command on one more runner with an empty store and the same cache."""
    cwd, env = machine(work, "one-build", endpoint, engine)
    command = ["cairn", "build", *manifest, "--jobs", "$(nproc)", "--cache", f"s3://{BUCKET}/{PREFIX}"]
    print("one build: running", file=sys.stderr, flush=True)
    seconds = run_step(cwd, env, " ".join(command), work / "one-build.log")
    report = json.loads((cwd / ".cairn" / "last-build.json").read_text())
    result = {**build_summary(report, seconds), "store_bytes": disk_bytes(cwd / ".cairn"),
              "outputs": {a: o.get("output") for a, o in report["actions"].items()}}
    shutil.rmtree(cwd)
    forget_images(engine)
    return result


def reference_build(work: Path, engine: dict[str, str], manifest: list[str]) -> dict[str, Any]:
    """``nox -s build``'s build command, cold: a runner of its own with an empty store and no cache."""
    cwd, env = machine(work, "reference", "", engine)
    command = ["cairn", "build", *manifest, "--jobs", "$(nproc)"]
    print("reference build: running", file=sys.stderr, flush=True)
    seconds = run_step(cwd, env, " ".join(command), work / "reference.log")
    report = json.loads((cwd / ".cairn" / "last-build.json").read_text())
    result = {"seconds": seconds, "counts": report["counts"], "store_bytes": disk_bytes(cwd / ".cairn"),
              "outputs": {a: o.get("output") for a, o in sorted(report["actions"].items())}}
    shutil.rmtree(cwd)
    forget_images(engine)
    return result


def totals(result: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """The jobs' seconds and cache bytes summed, beside the bucket and the one cold build: what running the
    release as separate jobs costs over one machine (each job fetches what its actions need from the bucket)."""
    jobs = result["jobs"].values()
    seconds = round(sum(job["seconds"] for job in jobs), 1)
    received = sum(job["cache"]["received_bytes"] for job in jobs)
    bucket = sum(v for k, v in result["bucket"].items() if k.endswith("_bytes"))
    out = {"jobs_seconds": seconds, "jobs_received_bytes": received,
           "jobs_sent_bytes": sum(job["cache"]["sent_bytes"] for job in jobs), "bucket_bytes": bucket,
           "received_vs_bucket": round(received / bucket, 2)}
    if reference is not None:
        out["one_build_seconds"] = reference["seconds"]
        out["jobs_seconds_vs_one_build"] = round(seconds / reference["seconds"], 2)
    return out


def against_reference(outputs: dict[str, Any], registry: str, reference: dict[str, Any] | None) -> dict[str, Any] | None:
    """Every action's output beside the reference build's: the ones that differ, and both registries."""
    if reference is None:
        return None
    theirs = reference["outputs"]
    return {"file": reference["file"], "commit": reference["commit"], "registry": reference["registry"],
            "registry_here": registry, "actions": len(theirs),
            "outputs_that_differ": sorted(a for a in set(outputs) | set(theirs) if outputs.get(a) != theirs.get(a))}


def check(jobs: dict[str, dict[str, Any]], members: dict[str, set[str]], alone: dict[str, Any],
          reference: dict[str, Any] | None, registry: str) -> dict[str, Any]:
    """The checks the module docstring lists, each as what it found (empty lists when it holds)."""
    ran_in: dict[str, list[str]] = {}
    outputs: dict[str, str | None] = {}
    differ: set[str] = set()
    foreign: dict[str, list[str]] = {}
    for name, job in jobs.items():
        for action, outcome in job["outcomes"].items():
            if outcome["status"] == "ran":
                ran_in.setdefault(action, []).append(name)
            if outputs.setdefault(action, outcome["output"]) != outcome["output"]:
                differ.add(action)
        ran = {a for a, o in job["outcomes"].items() if o["status"] == "ran"}
        if ran - members.get(name, set()):
            foreign[name] = sorted(ran - members.get(name, set()))
    planned = set().union(*members.values())
    bundle = alone["outputs"].get("bundle:release")
    return {
        "actions": len(planned),
        "ran_in_two_jobs": sorted(a for a, names in ran_in.items() if len(names) > 1),
        "never_ran": sorted(planned - set(ran_in)),
        "ran_outside_their_job": foreign,
        "outputs_that_differ_between_jobs": sorted(differ),
        "ran_in_one_build": alone["counts"]["ran"],
        "outputs_that_differ_from_one_build": sorted(a for a in set(outputs) | set(alone["outputs"])
                                                     if outputs.get(a) != alone["outputs"].get(a)),
        "bundle_digest": bundle,
        "reference": against_reference(alone["outputs"], registry, reference),
    }


def holds(checks: dict[str, Any]) -> bool:
    return (not checks["ran_in_two_jobs"] and not checks["never_ran"] and not checks["ran_outside_their_job"]
            and not checks["outputs_that_differ_between_jobs"] and checks["ran_in_one_build"] == 0
            and not checks["outputs_that_differ_from_one_build"]
            and (checks["reference"] is None or not checks["reference"]["outputs_that_differ"]))


def load_reference(path: Path) -> dict[str, Any] | None:
    """A ``--reference-build`` result: its outputs, registry and commit (None when there is none yet)."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return {"file": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), "commit": data["machine"]["commit"],
            "registry": data["registry"], "outputs": data["reference_build"]["outputs"],
            "seconds": data["reference_build"]["seconds"]}


def write_reference(args: argparse.Namespace, manifest: list[str], engine: dict[str, str]) -> None:
    work = args.work.resolve() if args.work else Path(tempfile.mkdtemp(prefix="shards-reference-"))
    built = reference_build(work, engine, manifest)
    result = {"bench": "shards", "command": " ".join(["python", "bench/shards_bench.py", *sys.argv[1:]]),
              "manifest": args.manifest or "default", "registry": engine["CAIRN_REGISTRY"], "reference_build": built,
              "machine": describe()}
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: built[k] for k in ("seconds", "counts")}))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


def recheck(path: Path, reference: dict[str, Any] | None) -> None:
    """A finished run's checks with its outputs compared against the reference again."""
    result = json.loads(path.read_text())
    checks = result["checks"]
    checks["reference"] = against_reference(result["outputs"], result["registry"], reference)
    result["totals"] = totals(result, reference)
    result["same_release"] = holds(checks)
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"same_release": result["same_release"], "reference": checks["reference"]}))
    if not result["same_release"]:
        sys.exit("error: the jobs did not build the release one build does — see " + str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--work", type=Path, help="the runners' directories and the bucket's spool (default: a temporary one)")
    parser.add_argument("--manifest", default=None, help="release manifest (default: the default release)")
    parser.add_argument("--reference", type=Path, default=REFERENCE,
                        help="a --reference-build result every output must equal (default: the committed one)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--reference-build", action="store_true", help="make the reference: one cold build, no cache")
    mode.add_argument("--recheck", type=Path, metavar="RESULT", help="compare a finished run with the reference again")
    args = parser.parse_args()
    if not args.recheck and not args.out:
        parser.error("--out is required")
    manifest = [args.manifest] if args.manifest else []
    reference = load_reference(args.reference.resolve())
    if args.recheck:
        return recheck(args.recheck, reference)
    engine = services()
    if args.reference_build:
        return write_reference(args, manifest, engine)
    work = args.work.resolve() if args.work else Path(tempfile.mkdtemp(prefix="shards-"))
    spool = work / "bucket-spool"
    spool.mkdir(parents=True, exist_ok=True)
    server, endpoint = start_moto(spool=spool)
    started = time.monotonic()
    try:
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        workflow, report = emit(work, manifest, machine(work, "emit", endpoint, engine)[1])
        members = {s["name"]: set(s["actions"]) for s in report["shards"]}
        order = in_needs_order(workflow["jobs"])
        jobs = {name: run_job(work, name, workflow["jobs"][name], endpoint, engine) for name in order}
        alone = one_build(work, endpoint, engine, manifest)
        checks = check(jobs, members, alone, reference, engine["CAIRN_REGISTRY"])
        result = {
            "bench": "shards",
            "command": " ".join(["python", "bench/shards_bench.py", *sys.argv[1:]]),
            "manifest": args.manifest or "default",
            "registry": engine["CAIRN_REGISTRY"],
            "order": order,
            "jobs": {name: {k: v for k, v in job.items() if k != "outcomes"} for name, job in jobs.items()},
            "wall_seconds": round(time.monotonic() - started, 1),
            "one_build": {k: v for k, v in alone.items() if k != "outputs"},
            "bucket": bucket_contents(endpoint, BUCKET, PREFIX),
            "checks": checks,
            "same_release": holds(checks),
            "outputs": dict(sorted(alone["outputs"].items())),
            "machine": describe(),
        }
        result["totals"] = totals(result, reference)
    finally:
        server.kill()
        server.wait()
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"jobs": len(jobs), "same_release": result["same_release"], **{k: checks[k] for k in
                      ("actions", "ran_in_two_jobs", "never_ran", "ran_in_one_build", "reference")}}))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    if not result["same_release"]:
        sys.exit("error: the jobs did not build the release one build does — see " + str(args.out))


if __name__ == "__main__":
    main()
