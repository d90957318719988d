"""The services state file: where the private Docker Engine and the local registry listen.

``cairn services start`` writes ``<dir>/state.json``; builds, gates and tests read it through
``current()`` to find ``DOCKER_HOST`` and the registry address. The directory is ``$CAIRN_SERVICES_DIR``
or ``~/.cache/cairn/services``. A state whose processes are gone is reported as stale, never trusted.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from cairn.errors import UrlError
from cairn.io import atomic_write
from cairn.remote.url import read_status

SCHEMA = "cairn.services/v1"


def services_dir() -> Path:
    env = os.environ.get("CAIRN_SERVICES_DIR")
    return Path(env).absolute() if env else Path.home() / ".cache" / "cairn" / "services"


@dataclass(frozen=True)
class ServicesState:
    """What other code needs: the engine socket, the registry address and who owns which process."""

    dir: str
    docker_host: str  # unix:///…/docker.sock
    registry: str  # 127.0.0.1:PORT
    registry_id: str  # changes whenever the registry's storage is new: part of every push key
    dockerd_pid: int
    registry_pid: int

    def to_json(self) -> dict[str, object]:
        return {"schema": SCHEMA, **asdict(self)}

    @property
    def socket(self) -> Path:
        return Path(self.docker_host.removeprefix("unix://"))

    def env(self) -> dict[str, str]:
        """Environment for tools that talk to the engine (docker CLI, the SDK's ``from_env``)."""
        return {"DOCKER_HOST": self.docker_host, "CAIRN_REGISTRY": self.registry}


def state_path(directory: Path | None = None) -> Path:
    return (directory or services_dir()) / "state.json"


def read_state(directory: Path | None = None) -> ServicesState | None:
    """The recorded state, or None when there is none (alive or not: see ``alive``)."""
    try:
        data = json.loads(state_path(directory).read_text())
    except (OSError, ValueError):
        return None
    if data.get("schema") != SCHEMA:
        return None
    data.pop("schema")
    try:
        return ServicesState(**data)
    except TypeError:
        return None


def write_state(state: ServicesState) -> Path:
    path = state_path(Path(state.dir))
    atomic_write(path, json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def pid_alive(pid: int, name: str) -> bool:
    """``pid`` runs and is the program we started (a recycled pid of another program does not count)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(Path(part.decode(errors="replace")).name == name for part in cmdline[:2])


def engine_ready(socket_path: Path, timeout: float = 2.0) -> bool:
    """The engine answers ``GET /_ping`` on its socket."""
    if not socket_path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(socket_path))
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = conn.recv(64)
    except OSError:
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply


def registry_ready(address: str, timeout: float = 2.0) -> bool:
    """The registry answers ``GET /v2/`` (the distribution API's version check)."""
    try:
        return read_status(f"http://{address}/v2/", timeout)[1] == 200
    except UrlError:
        return False


def alive(state: ServicesState) -> dict[str, bool]:
    """Which recorded service answers right now."""
    return {
        "dockerd": pid_alive(state.dockerd_pid, "dockerd") and engine_ready(state.socket),
        "registry": pid_alive(state.registry_pid, "docker-registry") and registry_ready(state.registry),
    }


def current(directory: Path | None = None) -> ServicesState | None:
    """The running services, or None when they were never started or any of them is down."""
    state = read_state(directory)
    if state is None or not all(alive(state).values()):
        return None
    return state
