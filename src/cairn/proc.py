"""The one subprocess wrapper: echo the command, pass env and cwd explicitly, capture into a log.

Every stage runs external tools through ``run`` so that each action's log shows exactly what ran, with
which environment changes, and a failure names the command and the log instead of raising a traceback.
The services' daemons, which outlive the command that starts them, are started through ``spawn``.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from cairn.errors import ActionFailed, ToolMissing


def require_tool(name: str, package: str = "") -> str:
    """Absolute path of a host tool, or a ToolMissing that says which Debian package to install."""
    found = shutil.which(name)
    if not found:
        hint = f"apt-get install {package or name}"
        raise ToolMissing(f"'{name}' is not installed — {hint}")
    return found


# environment variables whose values a log must not keep (credentials handed to a tool)
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|ACCESS_KEY", re.IGNORECASE)


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: IO[str] | None = None,
    check: bool = True,
    input_text: str | None = None,
    timeout: float | None = None,
    die_with_parent: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with ``env`` layered over a clean copy of the environment.

    Output is captured; when ``log`` is given the command line (``+ cmd``), the environment overrides and
    the output are appended to it. A non-zero exit raises ActionFailed with the tail of the output.
    ``die_with_parent``: the command gets SIGTERM when this process dies, however it dies (see ``spawn``).
    """
    argv = [os.fspath(part) for part in cmd]
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    if log is not None:
        for key in sorted(env or {}):
            shown = "<redacted>" if _SECRET_NAME.search(key) else shlex.quote(str(env[key]))  # type: ignore[index]
            log.write(f"+ export {key}={shown}\n")
        log.write(f"+ {shlex.join(argv)}" + (f"  (in {cwd})" if cwd else "") + "\n")
        log.flush()
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=full_env,
            input=input_text,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            preexec_fn=_term_with_parent if die_with_parent else None,
        )
    except FileNotFoundError as exc:
        raise ToolMissing(f"'{argv[0]}' is not installed — install it and retry") from exc
    except subprocess.TimeoutExpired as exc:
        raise ActionFailed(f"'{shlex.join(argv)}' timed out after {timeout}s") from exc
    if log is not None:
        if proc.stdout:
            log.write(proc.stdout)
        if proc.stderr:
            log.write(proc.stderr)
        log.flush()
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        detail = " | ".join(tail)
        raise ActionFailed(f"'{shlex.join(argv[:4])}{' …' if len(argv) > 4 else ''}' exited {proc.returncode}: {detail}")
    return proc


def spawn(argv: Sequence[str], log: Path, *, die_with_parent: bool = False) -> subprocess.Popen[bytes]:
    """Start a daemon (dockerd, the registry) in its own session, detached from the terminal, its output
    appended to ``log``: it keeps running after this process exits, and its log says why when it did not.

    ``die_with_parent``: the kernel sends it SIGTERM when this process dies, however it dies (Linux
    ``PR_SET_PDEATHSIG``) — for daemons that belong to one run, such as a test session's, which a SIGKILL or
    the OOM killer would otherwise leave running with their data."""
    with open(log, "ab") as out:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True,
                                preexec_fn=_term_with_parent if die_with_parent else None)


def _term_with_parent() -> None:
    """In the child, before exec: ask for SIGTERM when the parent dies (prctl option 1, PR_SET_PDEATHSIG)."""
    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
