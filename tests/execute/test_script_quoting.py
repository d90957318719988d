"""Names from a manifest reach the shell scripts run in the build image as one argument each: a HIP source or a
CMake ``source_subdir`` named with a space or ``;`` is never split, and never runs a second command.

The scripts are run by a real ``bash``; only the tools they call (hipcc, cmake — which need the build image) are
shell functions that write down the arguments they were given.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cairn.execute.cmake import cmake_script
from cairn.execute.hip import in_image_script

NASTY = ["a b.hip", "x;touch pwned.hip", "$(touch pwned).hip", "q'uote.hip"]


def _run(script: str, cwd: Path, tools: tuple[str, ...]) -> list[list[str]]:
    """Run ``script`` in bash with each of ``tools`` a function that records its argv (one call per line, NUL
    separated); the calls in order."""
    bash = shutil.which("bash")
    assert bash
    record = cwd / "calls"
    prelude = "".join(f'{tool}() {{ printf "%s\\0" {tool} "$@" >> {record}; printf "\\n" >> {record}; }}\n' for tool in tools)
    proc = subprocess.run([bash, "-c", prelude + script], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = record.read_text() if record.exists() else ""
    return [line.rstrip("\0").split("\0") for line in text.splitlines() if line]


def test_hip_source_names_are_one_argument_each(tmp_path: Path) -> None:
    script = in_image_script(sorted(NASTY), ["gfx90a"], "libk.so", "/usr/lib/bitcode dir")
    calls = _run(script, tmp_path, ("hipcc", "mkdir", "rm"))
    compiles = [c for c in calls if c[:2] == ["hipcc", "-c"]]
    assert [c[c.index("-o") - 1] for c in compiles] == [f"/src/{n}" for n in sorted(NASTY)]
    assert all("--rocm-device-lib-path=/usr/lib/bitcode dir" in c for c in compiles)
    link = next(c for c in calls if c[:2] == ["hipcc", "-shared"])
    assert [c[c.index("-o") + 1] for c in compiles] == [a for a in link if a.startswith("/out/obj/")]
    assert not (tmp_path / "pwned").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["calls"]


def test_plain_hip_names_leave_the_script_as_it_was() -> None:
    """Quoting changes nothing for the names every existing manifest uses: no build's script, so no key, moves."""
    script = in_image_script(["k.hip", "util.cpp"], ["gfx90a", "gfx1030"], "libk.so", "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")
    assert "'" not in script and "hipcc -c -O2 -fPIC" in script and " /src/k.hip -o /out/obj/k.o" in script


@pytest.mark.parametrize("subdir", ["my src", "src;touch pwned", "$(touch pwned)"])
def test_cmake_source_subdir_is_one_argument(tmp_path: Path, subdir: str) -> None:
    script = cmake_script({"source_subdir": subdir}, ["gfx90a"], 0, 2)
    line = next(line for line in script.splitlines() if line.startswith("cmake -S "))
    calls = _run(line, tmp_path, ("cmake",))
    assert len(calls) == 1 and calls[0][1:4] == ["-S", f"/src/{subdir}", "-B"], calls
    assert not (tmp_path / "pwned").exists()
