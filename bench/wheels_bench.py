"""Wheels benchmark: wheel build time for the legacy Debian 12 release (rocm-5.2.3), index generation time, rebuild reproducibility.

    python bench/wheels_bench.py --out bench/results/wheels.json [--store DIR] [--family F ...]

Builds that release's SDK and wheels stage (with the frameworks it publishes: SGLang from its sdist,
the mirrored JAX plugin; no images) into ``--store``, then forgets the cache records of every wheel, mirror
and index action and builds them again: the figure ``reproducible`` is true only when every rebuilt output
tree has the same digest. The JSON records each rebuilt action's seconds, every wheel's size and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parents[1]
STAGE_KINDS = ("package", "mirror", "index", "fetch-sdist")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn")
    parser.add_argument("--family", action="append", default=[])
    args = parser.parse_args()
    os.environ.setdefault("CAIRN_ROOT", str(ROOT))

    from cairn.execute.executor import execute
    from cairn.model.manifest import load_manifest
    from cairn.model.targets import load_registry
    from cairn.plan.prepare import make_plan
    from cairn.stages import RUNNERS, chosen
    from cairn.store.local import LocalStore

    registry = load_registry()
    # the SDK and the wheels stage only: images, gates and the bundle are the containers and publish benches' part
    plan = make_plan(load_manifest(ROOT / "manifests" / "releases" / "rocm-5.2.3.toml", registry), registry, args.family,
                     stages=chosen(["wheels"]))
    store = LocalStore(args.store)
    stage = [a for a in plan.actions if a.kind in STAGE_KINDS and not a.blocked]
    store.lock()
    try:
        started = time.monotonic()
        first = execute(plan, store, runners=RUNNERS, jobs=os.cpu_count() or 2)
        first_seconds = time.monotonic() - started
        for action in stage:
            outcome = first.outcomes[action.id]
            if outcome.key:
                (store.root / "ac" / f"{outcome.key}.json").unlink(missing_ok=True)
        started = time.monotonic()
        second = execute(plan, store, runners=RUNNERS, jobs=os.cpu_count() or 2)
        rebuild_seconds = time.monotonic() - started
    finally:
        store.unlock()
    failed = {a: o.detail for a, o in second.outcomes.items() if o.status == "failed"}
    seconds = {a.id: round(second.outcomes[a.id].seconds, 3) for a in stage}
    differing = sorted(a.id for a in stage if first.outcomes[a.id].output != second.outcomes[a.id].output)
    result = {
        "schema": "cairn.bench.wheels/v1",
        "command": "python bench/wheels_bench.py " + " ".join(sys.argv[1:]),
        "machine": describe(),
        "first_build_wall_seconds": round(first_seconds, 3),
        "families": sorted({a.family for a in stage if a.family}),
        "wheel_build_seconds": round(sum(s for a, s in seconds.items() if a.startswith("package:")), 3),
        "mirror_seconds": round(sum(s for a, s in seconds.items() if a.startswith("mirror:")), 3),
        "index_seconds": round(sum(s for a, s in seconds.items() if a.startswith("index:")), 3),
        "rebuild_wall_seconds": round(rebuild_seconds, 3),
        "action_seconds": seconds,
        "wheel_bytes": {w.name: w.stat().st_size for a in stage if a.kind in ("package", "mirror") and second.outcomes[a.id].output
                        for w in sorted((store.root / "trees" / second.outcomes[a.id].output / "wheels").glob("*.whl"))},
        "reproducible": not differing and not failed,
        "differing": differing,
        "failed": failed,
        "blocked": {a.id: a.blocked for a in plan.actions if a.kind in STAGE_KINDS and a.blocked},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: result[k] for k in ("wheel_build_seconds", "index_seconds", "reproducible", "differing")}))
    return 0 if result["reproducible"] else 1


if __name__ == "__main__":
    sys.exit(main())
