"""The machine a benchmark ran on, recorded in every results JSON so a figure can be traced to its hardware.

Every ``bench/*_bench.py`` script puts ``describe()`` under ``"machine"`` in the JSON it writes: CPU model,
cores, memory, kernel, OS, Python, the UTC date, the load average when it finished and the repository
commit the figures came from.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _first(path: str, prefix: str) -> str:
    """The value of the first ``prefix: value`` line of a /proc file ("" when absent)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else ""


def describe() -> dict[str, object]:
    memory_kb = _first("/proc/meminfo", "MemTotal")
    return {
        "cpu_model": _first("/proc/cpuinfo", "model name") or platform.processor(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_bytes": int(memory_kb.split()[0]) * 1024 if memory_kb else 0,
        "kernel": platform.release(),
        "os": _os_name(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "commit": _commit(),
    }
