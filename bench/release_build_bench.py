"""Cold build benchmark: what `nox -s build` does for the default release, from an empty store, timed per step.

    python bench/release_build_bench.py --out bench/results/release_build.json [--store DIR] [--manifest NAME]
                                        [--resume EARLIER_JSON]

Runs the front door's steps one after another, each as its own `cairn` process, exactly as `noxfile.py`'s
build session does: `cairn build` (into an empty `--store`: every pinned input fetched, the build image made
with mmdebstrap, every compile, wheel, image and gate), `cairn gate`, `cairn publish --dev-keys`,
`cairn verify` and `cairn matrix`; then `cairn build` a second time, which must run 0 actions. The JSON records
each step's wall seconds, the action counts of both builds, the ten slowest actions, the seconds of what ran by
action kind, the llama.cpp compile and its per-family cuts, the sharded workflow's critical path with these
seconds (``cairn ci github --timings``) and the machine. Needs the
services (`cairn services start`: DOCKER_HOST and CAIRN_REGISTRY in the environment, or its state file).
``--resume`` keeps the store and the steps an earlier run of it passed, runs the rest, and records which figures
are kept from which run; it makes no second build (see ``main``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parents[1]


def run(step: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and exit status of one `cairn` step (its output goes to this terminal, progress included)."""
    started = time.monotonic()
    status = subprocess.run([sys.executable, "-m", "cairn.cli", *step], cwd=ROOT, env=env).returncode
    return round(time.monotonic() - started, 1), status


def summary(store: Path) -> dict[str, object]:
    report = json.loads((store / "last-build.json").read_text())
    actions = report["actions"]
    counts: dict[str, int] = {}
    for entry in actions.values():
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    slowest = sorted(((entry.get("seconds") or 0.0, name) for name, entry in actions.items() if entry["status"] == "ran"),
                     reverse=True)[:10]
    failed = {name: entry.get("detail") for name, entry in actions.items() if entry["status"] == "failed"}
    by_kind: dict[str, float] = {}
    for name, entry in actions.items():
        if entry["status"] == "ran":  # where the time went: fetch, build, package, image, gate, …
            kind = name.partition(":")[0]
            by_kind[kind] = by_kind.get(kind, 0.0) + (entry.get("seconds") or 0.0)
    llama = {name: round(entry.get("seconds") or 0.0, 1) for name, entry in sorted(actions.items())
             if name.startswith("build:llama.cpp") and entry["status"] == "ran"}
    return {"counts": dict(sorted(counts.items())), "slowest": [{"action": n, "seconds": round(s, 1)} for s, n in slowest],
            "failed": failed, "action_seconds_sum": round(sum(e.get("seconds") or 0.0 for e in actions.values()), 1),
            "ran_seconds_by_kind": {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
            "llama_cpp_builds": llama}


def critical_path(store: Path, env: dict[str, str]) -> dict[str, object] | None:
    """The sharded workflow's critical path with this build's per-action seconds (``cairn ci github --timings``):
    the wall time of the release's CI with a runner per job, and the jobs that bound it."""
    out = store.parent / f".{store.name}-workflow"
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "ci", "github", "--timings", str(store / "last-build.json"),
                             "--out", str(out / "release.yml"), "--pr-out", str(out / "pull-request.yml"), "--json"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    if result.returncode != 0:
        return {"error": result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]}
    data = json.loads(result.stdout)
    path = data["critical_path"]
    by_name = {s["name"]: s for s in data["shards"]}
    return {"seconds": path["seconds"], "jobs": [{"job": n, "seconds": by_name[n]["seconds"]} for n in path["shards"]]}


def plan_names(plan: list[tuple[str, list[str]]]) -> list[str]:
    return [name for name, _ in plan]


def _ran(earlier: dict[str, object], steps: dict[str, float]) -> list[str]:
    """Steps of this run that were not kept from the earlier one."""
    status = earlier["steps_exit_status"]
    assert isinstance(status, dict)
    return [name for name in steps if status.get(name) != 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path("/tmp/cairn-cold-build"))
    parser.add_argument("--manifest", default="default")
    parser.add_argument("--resume", type=Path, default=None, metavar="JSON",
                        help="keep --store and the steps this earlier result of it recorded as passed; run the rest "
                             "(a step after a failure, once the failure is fixed)")
    args = parser.parse_args()
    earlier = json.loads(args.resume.read_text()) if args.resume else None
    if args.store.exists() and earlier is None:
        shutil.rmtree(args.store)
    store = str(args.store)
    env = {**os.environ, "CAIRN_ROOT": str(ROOT)}
    jobs = str(os.cpu_count() or 2)
    keys = args.store / "keys" / "dev"
    steps: dict[str, float] = {}
    exits: dict[str, int] = {}
    plan = [
        ("cairn build (cold)", ["build", args.manifest, "--store", store, "--jobs", jobs]),
        ("cairn gate", ["gate", args.manifest, "--store", store]),
        ("cairn publish --dev-keys", ["publish", "--dev-keys", "--store", store, "--to", (args.store / "publish").as_uri()]),
        ("cairn verify", ["verify", str(args.store / "publish"), "--root", str(keys / "root.json")]),
        ("cairn matrix", ["matrix", "--store", store, "--root", str(keys / "root.json"), "--format", "html",
                          "--out", str(args.store / "matrix.html")]),
    ]
    for name, step in plan:  # a failed step is recorded, and the steps after it (which need its output) not run
        if earlier and earlier["steps_exit_status"].get(name) == 0:
            steps[name], exits[name] = earlier["steps_seconds"][name], 0  # passed in the earlier run, kept
            continue
        steps[name], exits[name] = run(step, env)
        if exits[name] != 0:
            break
    first = earlier["first_build"] if earlier and "cairn build (cold)" not in _ran(earlier, steps) else summary(args.store)
    workflow = critical_path(args.store, env) if exits.get("cairn build (cold)") == 0 else None
    # resumed: the fix that let the later steps pass changed code the action keys cover, so a second build
    # would rerun what that code makes — the 0-action check needs both builds from one revision
    if all(code == 0 for code in exits.values()) and earlier is None:
        steps["cairn build (second run)"], exits["cairn build (second run)"] = run(plan[0][1], env)
    second = summary(args.store)
    result = {
        "benchmark": "release_build",
        "command": " ".join(["python", "bench/release_build_bench.py", *sys.argv[1:]]),
        "manifest": args.manifest,
        "machine": describe(),
        "steps_seconds": steps,
        "steps_exit_status": exits,
        "completed": all(code == 0 for code in exits.values()) and len(exits) == len(plan) + (earlier is None),
        "cold_total_seconds": round(sum(v for k, v in steps.items() if k != "cairn build (second run)"), 1),
        "first_build": first,
        "second_build": second,
        "second_build_ran": second["counts"].get("ran", 0) if "cairn build (second run)" in exits else None,
        "sharded_workflow_critical_path": workflow,
    }
    if earlier:  # which steps' figures come from the earlier run, on which machine and revision
        result["resumed"] = {"kept_steps": [k for k in steps if earlier["steps_exit_status"].get(k) == 0 and k in plan_names(plan)],
                             "earlier_machine": earlier["machine"], "earlier_steps_exit_status": earlier["steps_exit_status"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: result[k] for k in ("steps_seconds", "steps_exit_status", "cold_total_seconds", "second_build_ran")}, indent=2))
    return 0 if result["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
