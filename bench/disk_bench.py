"""Disk a README command needs: its peak and what it leaves behind, so the README can say what to have free.

    python bench/disk_bench.py --out bench/results/disk_tests.json --watch DIR [--watch DIR ...] -- COMMAND...

Runs COMMAND (for example ``nox -s tests`` or ``.ci/run`` in a fresh clone) and every ``--interval`` seconds
adds up the bytes held under each ``--watch`` directory (``du -sb``: the store, the nox virtualenvs, the
private engine's data, the test run's temporary trees) and reads the file system's used bytes (``df``). The
JSON records the peak and the leftover of both, the command's exit status and wall seconds, and the machine.

Why both figures: ``du`` over the watched trees is the command's own footprint, but it misses what it writes
elsewhere; ``df`` sees everything, but also whatever else the machine did meanwhile. A run with nothing else
on the machine makes them agree; the JSON says which is which so a reader can judge.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from machine import describe


def tree_bytes(paths: list[Path]) -> int:
    """Bytes held under ``paths`` (hard links counted once per ``du`` call, as the disk holds them)."""
    present = [str(p) for p in paths if p.exists()]
    if not present:
        return 0
    out = subprocess.run(["du", "-sbc", *present], capture_output=True, text=True).stdout.splitlines()
    return int(out[-1].split()[0]) if out else 0


def used_bytes(path: Path) -> int:
    usage = shutil.disk_usage(path)
    return usage.total - usage.free


class Sampler(threading.Thread):
    """Samples both figures until stopped; keeps the peaks and the series (seconds since start, du, df)."""

    def __init__(self, watch: list[Path], interval: float) -> None:
        super().__init__(daemon=True)
        self.watch, self.interval = watch, interval
        self.started = time.monotonic()
        self.series: list[tuple[float, int, int]] = []
        self.stopping = threading.Event()

    def sample(self) -> None:
        self.series.append((round(time.monotonic() - self.started, 1), tree_bytes(self.watch), used_bytes(Path("/"))))

    def run(self) -> None:
        while not self.stopping.is_set():
            self.sample()
            self.stopping.wait(self.interval)


def gb(n: int) -> float:
    return round(n / 1e9, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--watch", type=Path, action="append", default=[], help="a tree the command writes")
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--cwd", type=Path, default=Path.cwd())
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    before_df = used_bytes(Path("/"))
    before_du = tree_bytes(args.watch)
    sampler = Sampler(args.watch, args.interval)
    sampler.start()
    status = subprocess.run(command, cwd=args.cwd, env=os.environ.copy()).returncode
    sampler.stopping.set()
    sampler.join()
    sampler.sample()
    seconds = sampler.series[-1][0]
    peak_du = max(s[1] for s in sampler.series)
    peak_df = max(s[2] for s in sampler.series)
    result = {
        "benchmark": "disk",
        "command": "python bench/disk_bench.py " + " ".join(sys.argv[1:]),
        "measured": command,
        "cwd": str(args.cwd),
        "watched": [str(p) for p in args.watch],
        "exit_status": status,
        "wall_seconds": seconds,
        "interval_seconds": args.interval,
        "watched_trees_gb": {"before": gb(before_du), "peak": gb(peak_du), "left": gb(sampler.series[-1][1])},
        "filesystem_used_gb": {"before": gb(before_df), "peak_above_before": gb(peak_df - before_df),
                               "left_above_before": gb(sampler.series[-1][2] - before_df)},
        "series": [{"s": s, "du_gb": gb(d), "df_gb": gb(f)} for s, d, f in sampler.series],
        "machine": describe(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"disk: peak {gb(peak_du)} GB in the watched trees, {gb(peak_df - before_df)} GB above the start on the file "
          f"system; left {gb(sampler.series[-1][1])} GB; exit {status}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
