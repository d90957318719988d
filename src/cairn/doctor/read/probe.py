"""Which HIP runtime files one Python process maps after importing the installed ROCm packages.

A copy of ``libamdhip64`` on disk is harmless until two of them load into one process: a wheel's grafted
``libamdhip64-<hash>.so.7`` (found through its ``$ORIGIN`` RPATH) beside the host's ``/opt/rocm/lib``
copy (found by another library through ``LD_LIBRARY_PATH``) are two runtimes, each opening the GPU on its
own. Files on disk cannot tell whether that happens; the process's own ``/proc/<pid>/maps`` can. So on a live
host the doctor starts this interpreter, imports the top-level packages of every installed ROCm
distribution that carries shared objects (in the user's environment: ``LD_LIBRARY_PATH`` counts), and reads
the maps of that process. A captured tree carries such a maps file as ``.cairn-doctor/maps.txt``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from cairn.doctor.read.files import Root, text_of
from cairn.doctor.read.tool_outputs import CAPTURE_DIR
from cairn.doctor.snapshot import Distribution, ProcessProbe
from cairn.errors import CairnError
from cairn.proc import run

PROBE_TIMEOUT = 180.0
HIP_RUNTIME = re.compile(r"^libamdhip64(?:-[0-9a-f]{8,})?\.so(?:\.\d+)*$")

# run as ``python -c PROBE module...``: import each, then list the mapped HIP runtime files, as JSON
PROBE = r"""
import importlib, json, os, re, sys
imported, failed = [], []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        imported.append(name)
    except BaseException as exc:
        text = (str(exc).strip().splitlines() or [""])[0]
        failed.append(f"{name}: {type(exc).__name__}: {text}")
pattern = re.compile(sys.stdin.readline().strip())
maps = []
with open(f"/proc/{os.getpid()}/maps") as handle:
    for line in handle:
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip().removesuffix(" (deleted)")
            if pattern.match(os.path.basename(path)) and path not in maps:
                maps.append(path)
print("CAIRN-PROBE " + json.dumps({"imported": imported, "failed": failed, "maps": maps}))
"""


def import_names(dists: Iterable[Distribution]) -> list[str]:
    """Top-level packages holding the distributions' shared objects, as ``import`` names (``llama_cpp``, ``torch``)."""
    names: list[str] = []
    for dist in dists:
        for so in dist.shared_objects:
            try:
                top = Path(so).relative_to(dist.site).parts[0]
            except (ValueError, IndexError):
                continue
            if top.isidentifier() and (Path(dist.site) / top / "__init__.py").is_file() and top not in names:
                names.append(top)
    return names


def maps_files(text: str) -> tuple[str, ...]:
    """The distinct HIP runtime files a ``/proc/<pid>/maps`` text lists."""
    out: list[str] = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].strip().removesuffix(" (deleted)")
            if HIP_RUNTIME.match(path.rsplit("/", 1)[-1]) and path not in out:
                out.append(path)
    return tuple(out)


def run_probe(modules: list[str], python: str = sys.executable) -> ProcessProbe:
    """Import ``modules`` in a fresh ``python`` and report the HIP runtime files it then maps."""
    where = f"{python} importing {', '.join(modules)}"
    try:
        done = run([python, "-c", PROBE, *modules], check=False, timeout=PROBE_TIMEOUT, input_text=HIP_RUNTIME.pattern + "\n")
    except CairnError as exc:
        return ProcessProbe((), (f"the probe process: {exc}",), (), where)
    line = next((x for x in done.stdout.splitlines() if x.startswith("CAIRN-PROBE ")), "")
    if not line:
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return ProcessProbe((), (f"the probe process died before reporting ({tail})",), (), where)
    data = json.loads(line.removeprefix("CAIRN-PROBE "))
    return ProcessProbe(tuple(data["imported"]), tuple(data["failed"]), tuple(data["maps"]), where)


def read_probe(r: Root, live: bool, dists: Iterable[Distribution], enabled: bool) -> ProcessProbe | None:
    """The live probe (when ``enabled`` and some package carries shared objects), or a captured maps file."""
    if not live:
        captured = r(f"{CAPTURE_DIR}/maps.txt")
        if not captured.is_file():
            return None
        return ProcessProbe((), (), maps_files(text_of(captured)), f"captured {CAPTURE_DIR}/maps.txt")
    modules = import_names(dists)
    if not enabled or not modules:
        return None
    return run_probe(modules)
