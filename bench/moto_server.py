"""moto's S3 server in a process of its own, for the benchmarks that talk to S3 over real HTTP.

Its own process so that the server, the client under test and the peer each get a core, and so that the
objects it holds (unlinked temporary files under its TMPDIR) go away with it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(stderr: IO[bytes] | int = subprocess.DEVNULL, spool: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start moto on a free loopback port and wait until it answers; its process and endpoint. ``stderr`` takes
    its werkzeug access log (one line per request); objects past its key buffer are spooled under ``spool``."""
    port = free_port()
    env = {**os.environ, "TMPDIR": str(spool)} if spool else None
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
            return proc, endpoint
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start")
