"""Start and stop the private Docker Engine and the loopback registry a local build needs.

The engine stores layers with overlay2 where this kernel lets us mount overlayfs on the services directory
(each layer once, shared by every image and container that has it), and with vfs otherwise (correct
everywhere, but a full copy per layer and per container: tens of GB for ROCm images); no iptables and no
bridge (builds use the host network),
with its own data root, exec root, pid file and socket under the services directory, so it never touches
a system engine or another user's. The registry is Debian's ``docker-registry`` on a free 127.0.0.1 port.
Both are detached from the caller's session: they outlive ``cairn services start``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from cairn.errors import CairnError
from cairn.proc import require_tool, run, spawn
from cairn.services.state import (
    ServicesState,
    alive,
    engine_ready,
    pid_alive,
    read_state,
    registry_ready,
    services_dir,
    write_state,
)

READY_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(directory: Path | None = None, *, die_with_parent: bool = False, registry_at: str = "") -> tuple[ServicesState, list[str]]:
    """Start whatever is not running; returns the state and the names of the services started now.
    ``die_with_parent``: the services end when this process does (``proc.spawn``), for a test session's own.
    ``registry_at``: the registry's loopback address (default a free port). A fixed address keeps the records of
    pushes the same from one start to the next, and on every machine that uses it, so what depends on the build
    image stays cached (``push.json`` names the address; the emitted workflow uses ``localhost:5000`` for this)."""
    registry_at = loopback_address(registry_at) if registry_at else ""
    root = (directory or services_dir()).absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CairnError(f"{root}: not a directory — give --dir a directory for the services' state and data") from None
    previous = read_state(root)
    up = alive(previous) if previous else {"dockerd": False, "registry": False}
    started: list[str] = []
    if previous and up["dockerd"]:
        docker_host, dockerd_pid = previous.docker_host, previous.dockerd_pid
    else:
        docker_host, dockerd_pid = _start_dockerd(root, die_with_parent)
        started.append("dockerd")
    if previous and up["registry"]:
        if registry_at and previous.registry != registry_at:
            raise CairnError(f"the registry of {root} already runs at {previous.registry}, not {registry_at} — "
                             f"stop the services first (cairn services stop), then start them with --registry {registry_at}")
        registry, registry_pid = previous.registry, previous.registry_pid
    else:
        registry, registry_pid = start_registry(root, registry_at, die_with_parent=die_with_parent)
        started.append("registry")
    state = ServicesState(str(root), docker_host, registry, _registry_id(root), dockerd_pid, registry_pid)
    write_state(state)
    return state, started


def _wait(ready: Callable[[], bool], child: subprocess.Popen[bytes], name: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if ready():
            return
        if child.poll() is not None:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise CairnError(f"{name} exited while starting: {tail} — see {log}")
        time.sleep(0.3)
    raise CairnError(f"{name} did not become ready in {READY_TIMEOUT:.0f}s — see {log}")


def storage_driver(root: Path) -> str:
    """``overlay2`` when an overlayfs mount works on ``root``'s filesystem (root can mount, the kernel has it,
    the filesystem supports it), else ``vfs``; ``CAIRN_DOCKER_STORAGE_DRIVER`` overrides. Layer digests do not
    depend on it: every layer is normalized after the engine builds it (cairn.formats.oci)."""
    chosen = os.environ.get("CAIRN_DOCKER_STORAGE_DRIVER", "")
    if chosen:
        return chosen
    probe = root / "overlay-probe"
    try:
        for name in ("lower", "upper", "work", "merged"):
            (probe / name).mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
        mounted = run(["mount", "-t", "overlay", "overlay", "-o", options, str(probe / "merged")],
                      check=False, timeout=30).returncode == 0
        if mounted:
            run(["umount", str(probe / "merged")], check=False, timeout=30)
        return "overlay2" if mounted else "vfs"
    except (OSError, CairnError):
        return "vfs"
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _start_dockerd(root: Path, die_with_parent: bool) -> tuple[str, int]:
    dockerd = require_tool("dockerd", "docker.io")
    sock = root / "docker.sock"
    if len(str(sock)) > 100:
        raise CairnError(f"socket path {sock} is too long for a unix socket — set CAIRN_SERVICES_DIR to a shorter directory")
    sock.unlink(missing_ok=True)
    (root / "daemon.json").write_text("{}\n")
    argv = [
        dockerd, "--storage-driver", storage_driver(root), "--iptables=false", "--ip6tables=false", "--bridge=none",
        "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "--pidfile", str(root / "docker.pid"),
        "--config-file", str(root / "daemon.json"), "-H", f"unix://{sock}",
    ]
    log = root / "dockerd.log"
    child = spawn(argv, log, die_with_parent=die_with_parent)
    _wait(lambda: engine_ready(sock), child, "dockerd", log)
    return f"unix://{sock}", child.pid


def loopback_address(text: str) -> str:
    """``127.0.0.1:5000`` or ``localhost:5000`` as given, else one line: the registry serves this machine alone."""
    host, _, port = text.rpartition(":")
    if host not in ("127.0.0.1", "localhost") or not port.isdigit() or not 0 < int(port) < 65536:
        raise CairnError(f"--registry {text!r}: give a loopback address with a port, e.g. 127.0.0.1:5000 or localhost:5000 "
                         "(the private registry serves this machine alone)")
    return text


def start_registry(root: Path, address: str = "", *, die_with_parent: bool = False) -> tuple[str, int]:
    """Debian's docker-registry with its storage under ``root`` (new storage = an empty registry), at
    ``address`` or a free loopback port; returns the address and the process id once it answers."""
    binary = require_tool("docker-registry", "docker-registry")
    storage = root / "registry"
    storage.mkdir(parents=True, exist_ok=True)
    address = address or f"127.0.0.1:{free_port()}"
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": address},
    }
    (root / "registry.yml").write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
    log = root / "registry.log"
    child = spawn([binary, "serve", str(root / "registry.yml")], log, die_with_parent=die_with_parent)
    _wait(lambda: registry_ready(address), child, "docker-registry", log)
    return address, child.pid


def _registry_id(root: Path) -> str:
    """A random id stored with the registry's data: new storage → new id → pushes are not cached."""
    marker = root / "registry" / "cairn-registry-id"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(uuid.uuid4().hex + "\n")
    return marker.read_text().strip()


def stop(directory: Path | None = None, timeout: float = 30.0) -> list[str]:
    """Stop the recorded services (only the processes we started); returns the names stopped."""
    root = (directory or services_dir()).absolute()
    state = read_state(root)
    if state is None:
        return []
    stopped = []
    for name, pid in (("docker-registry", state.registry_pid), ("dockerd", state.dockerd_pid)):
        if _terminate(pid, name, timeout):
            stopped.append("registry" if name == "docker-registry" else name)
    _unmount_below(root)
    (root / "state.json").unlink(missing_ok=True)
    return stopped


def _unmount_below(root: Path) -> None:
    """Unmount what the engine left mounted under ``root``. Once a container has run with the host's network (an
    image build does), dockerd exits with that namespace still bound at ``exec/netns/default``, and a mount point
    cannot be deleted: the directory, whose data is GBs of images, could not be removed whole."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    inside = str(root).rstrip("/") + "/"
    points = [fields[1].replace("\\040", " ") for fields in (line.split() for line in mounts) if len(fields) > 1]
    for point in sorted((p for p in points if p.startswith(inside)), key=len, reverse=True):  # the deepest first
        run(["umount", point], check=False, timeout=30)


def _terminate(pid: int, name: str, timeout: float) -> bool:
    if not pid_alive(pid, name):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid, name) or _zombie(pid):
            return True
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    return True


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
