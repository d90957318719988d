"""What the ``user-install`` gate runs in the fresh venv on a stock host, after the cell's own install command.

Standard library only, run by the venv's Python (no Cairn code is installed on the host; this file is mounted
read-only beside the venv). It prints one line ``USER-INSTALL-REPORT {json}``:

- ``load``: every ELF file of every distribution the command installed, opened with ``ctypes`` (RTLD_NOW, as the
  package's own loader would). Libraries are retried until no more load, so the order of the RECORD never decides:
  what still fails then cannot load on this host, and the first one (by path) is named with the loader's message
  (``libfmt.so.11: cannot open shared object file``). llama.cpp's HIP backend library must be among them.
- ``import``: every top-level module the distributions declare.
- ``rocm_sdk``: ``python -m rocm_sdk test`` exits 0 and reports the device ("none — no GPU visible …" on a host
  without an AMD GPU): the runtime loaded, not a load failure.

``--refusal PROJECT…`` instead reports which of the named projects are installed: after a refused install, none.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

SKIP = {"pip", "setuptools", "wheel"}
ELF_MAGIC = b"\x7fELF"


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _dists() -> list[metadata.Distribution]:
    return sorted((d for d in metadata.distributions() if _canonical(d.metadata["Name"]) not in SKIP),
                  key=lambda d: _canonical(d.metadata["Name"]))


def _elf_files(dist: metadata.Distribution) -> list[Path]:
    found = []
    for entry in dist.files or ():
        name = entry.name
        if not (name.endswith(".so") or ".so." in name):
            continue
        path = Path(str(entry.locate()))
        try:
            with open(path, "rb") as handle:
                if handle.read(4) == ELF_MAGIC:
                    found.append(path)
        except OSError:
            continue
    return found


def load_all(paths: list[Path]) -> dict[str, str]:
    """Path → loader error of the libraries that still do not load once every other one has been tried."""
    pending = {str(p): "" for p in sorted(paths)}
    progress = True
    while pending and progress:
        progress = False
        for path in list(pending):
            try:
                ctypes.CDLL(path)
            except OSError as exc:
                pending[path] = str(exc)
                continue
            del pending[path]
            progress = True
    return pending


def _top_level(dist: metadata.Distribution) -> list[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return sorted({line.strip() for line in text.splitlines() if line.strip() and not line.startswith("_")})
    names = set()
    for entry in dist.files or ():
        parts = entry.parts
        if len(parts) > 1 and parts[1] == "__init__.py" and not parts[0].endswith((".dist-info", ".data")):
            names.add(parts[0])
        elif len(parts) == 1 and parts[0].endswith(".py"):
            names.add(parts[0][:-3])
    return sorted(n for n in names if not n.startswith("_"))


def probe() -> dict[str, object]:
    failures: list[str] = []
    dists = _dists()
    elves = {d.metadata["Name"]: _elf_files(d) for d in dists}
    every = [p for paths in elves.values() for p in paths]
    owner = {str(p): name for name, paths in elves.items() for p in paths}
    broken = load_all(every)
    for path, error in sorted(broken.items()):
        failures.append(f"load {Path(path).name} ({owner[path]}): {error}")
    if "llama_cpp_python" in {_canonical(n).replace("-", "_") for n in elves}:
        hip = [p for n, paths in elves.items() if _canonical(n) == "llama-cpp-python" for p in paths if "ggml-hip" in p.name]
        if not hip:
            failures.append("load: llama-cpp-python installed no HIP backend library (libggml-hip*)")
    imported = []
    for dist in dists:
        for module in _top_level(dist):
            try:
                importlib.import_module(module)
                imported.append(module)
            except Exception as exc:  # any import failure is the finding
                failures.append(f"import {module}: {type(exc).__name__}: {exc}".splitlines()[0])
    sdk: dict[str, object] = {}
    if any(_canonical(d.metadata["Name"]) == "rocm-sdk" for d in dists):
        run = subprocess.run([sys.executable, "-m", "rocm_sdk", "test"], capture_output=True, text=True, timeout=600)
        output = run.stdout + run.stderr
        device = next((line for line in output.splitlines() if line.startswith("device:")), "")
        sdk = {"exit": run.returncode, "device": device, "output": output[-4000:]}
        if run.returncode != 0:
            first = next((line.strip() for line in output.splitlines() if line.strip().startswith("FAIL")), output.strip()[-300:])
            failures.append(f"python -m rocm_sdk test exited {run.returncode}: {first}")
        elif "did not load" in device or not ("no GPU" in device or "visible" in device):
            failures.append(f"python -m rocm_sdk test: the HIP runtime did not report a device or no GPU ({device or 'no device line'})")
    return {"installed": [f"{d.metadata['Name']}=={d.version}" for d in dists], "elf_files": len(every),
            "loaded": len(every) - len(broken), "imported": imported, "rocm_sdk": sdk, "failures": failures}


def refusal(projects: list[str]) -> dict[str, object]:
    wanted = {_canonical(p) for p in projects}
    have = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                  if _canonical(d.metadata["Name"]) in wanted)
    return {"installed": have, "failures": [f"installed {h} on a host below its tag" for h in have]}


if __name__ == "__main__":
    report = refusal(sys.argv[2:]) if sys.argv[1:2] == ["--refusal"] else probe()
    print("USER-INSTALL-REPORT " + json.dumps(report, sort_keys=True))
