"""Where the llama.cpp HIP build's time goes: per translation unit CPU seconds, from the build's own log.

The ``cmake`` build kind runs every compile and link under a launcher that records the compiler's CPU
seconds (user + system, all its subprocesses) and wall seconds, and writes them to the action's log. This
reads that log for one llama.cpp compile of a store (``build:llama.cpp``, every family's code objects, or a
per-family ``build:llama.cpp@<family>`` without ``compile_once``) and writes the summary:

    python bench/llama_build_bench.py --store .cairn --action build:llama.cpp \\
        --out bench/results/llama_build.json

CPU seconds are what a budget is made of (a shared host stretches wall time, not CPU time): the sums say how
long the build takes on N idle cores (≈ CPU seconds / N), the slowest units say what bounds it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from machine import describe

LINE = re.compile(r"^(\d+(?:\.\d+)?) (\d+(?:\.\d+)?) (\S+)$")
WALL = re.compile(r"^# build wall seconds: (\d+)$")


def summarise(log: str) -> dict[str, object]:
    units = [(float(m[1]), float(m[2]), m[3]) for line in log.splitlines() if (m := LINE.match(line.strip()))]
    wall = next((int(m[1]) for line in log.splitlines() if (m := WALL.match(line.strip()))), None)
    if not units:
        raise SystemExit("error: the log has no per-unit lines — was it built by the cmake kind with the CPU-seconds launcher?")

    def group(pred: object) -> dict[str, object]:
        chosen = [u for u in units if pred(u[2])]  # type: ignore[operator]
        cpu = [u[0] for u in chosen]
        return {"count": len(chosen), "cpu_seconds": round(sum(cpu), 1),
                "min": min(cpu, default=0.0), "median": sorted(cpu)[len(cpu) // 2] if cpu else 0.0, "max": max(cpu, default=0.0)}

    hip = group(lambda name: name.endswith(".cu.o"))
    return {
        "all": group(lambda name: True), "hip_units": hip,
        "host_units": group(lambda name: name.endswith((".cpp.o", ".c.o"))),
        "links": group(lambda name: not name.endswith(".o")),
        "fattn_units": group(lambda name: "fattn" in name and name.endswith(".cu.o")),
        "mmq_units": group(lambda name: "/mmq" in name and name.endswith(".cu.o")),
        "slowest": [{"cpu_seconds": c, "wall_seconds": w, "output": o} for c, w, o in sorted(units, reverse=True)[:15]],
        "build_wall_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path(".cairn"))
    parser.add_argument("--action", default="build:llama.cpp")
    parser.add_argument("--log", type=Path, default=None,
                        help="summarise this action log instead (one kept from a store since removed, e.g. a test run's)")
    parser.add_argument("--note", default="", help="what else the machine ran meanwhile, recorded as it is")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.log is not None:
        log = args.log.read_text()
        action = log.splitlines()[0].removeprefix("# ").strip() if log else ""
        record: dict[str, object] = {"status": "ran", "seconds": None}
    else:
        actions = json.loads((args.store / "last-build.json").read_text())["actions"]
        if args.action not in actions or not actions[args.action].get("log"):
            sys.exit(f"error: {args.store}/last-build.json has no log for {args.action} — build it first")
        action, record = args.action, actions[args.action]
        log = Path(str(record["log"])).read_text()
    doc = {"machine": describe(), "command": "python bench/llama_build_bench.py " + " ".join(sys.argv[1:]),
           "action": action, "status": record.get("status"), "seconds": record.get("seconds"),
           **({"note": args.note} if args.note else {}), **summarise(log)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("hip_units", "host_units", "links", "build_wall_seconds")}, indent=1))


if __name__ == "__main__":
    main()
