"""The one way a test runs the command line: ``python -m cairn.cli …`` in its own process, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path


def cairn(*args: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], env: Mapping[str, str] | None = None,
          extra_env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
          check: bool = False, code: int | None = None, timeout: float = 300,
          input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``cairn *args`` in a subprocess, its output captured as text.

    ``args`` may be given one by one or as lists (they are joined), so a test can keep a command in a variable.
    ``env`` is the whole environment (default: this process's) and ``extra_env`` is laid over it; ``cwd`` is
    where it runs (default: here). ``check`` raises unless it exited 0, ``code`` unless it exited with that code —
    either way with its output in the message, so a failure says why."""
    argv: list[str] = []
    for arg in args:
        if isinstance(arg, (str, os.PathLike)):
            argv.append(os.fspath(arg))
        else:
            argv.extend(os.fspath(part) for part in arg)
    environ = {**(os.environ if env is None else env), **(extra_env or {})}
    proc = subprocess.run([sys.executable, "-m", "cairn.cli", *argv], env=environ, cwd=Path(cwd) if cwd else None,
                          capture_output=True, text=True, timeout=timeout, input=input)
    expected = 0 if check else code
    if expected is not None and proc.returncode != expected:
        raise AssertionError(f"cairn {' '.join(argv)} exited {proc.returncode}, not {expected}: "
                             f"{proc.stderr}{proc.stdout}")
    return proc


def one_line(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The one line a refused command printed: exit ``code``, no traceback, nothing else on stderr."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.returncode == code, proc.stderr
    return lines[0]


def files_under(path: Path) -> set[str]:
    """Every path under ``path`` (relative), so a test can say a refused command wrote nothing."""
    return {str(p.relative_to(path)) for p in path.rglob("*")} if path.exists() else set()

