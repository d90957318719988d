"""Which GPU this host has, as the GPU gate needs it: the agents' gfx targets and the driver.

A GPU verdict is about one gfx target on one driver, so the gate reads both before it runs and they are
part of its key (``cairn.gates.plan``): a verdict from a gfx1100 host is never reused on a gfx1201 host, nor
after a driver update, and a "not run" from a host without a GPU is never reused on one with a GPU.

The agents come from the KFD topology (``/sys/class/kfd/kfd/topology/nodes/*/properties``: a CPU node
reports ``gfx_target_version 0``), mapped to targets by the registry; when the topology names no GPU,
``rocminfo``'s agents of ``Device Type: GPU`` are read instead. An agent list of CPUs only is no GPU, however
the list was obtained, and without ``/dev/kfd`` no container can reach a GPU at all.

The image's target must be an agent's, or a generic target the agent is a member of (an image built for
``gfx11-generic`` serves a gfx1101); otherwise the gate is recorded ``not-run: host is gfx1201, image is
gfx1100`` — neither passed nor failed. GPU gates of one host hold one lock while they run (``gpu_lock``):
two gates sharing a GPU would time each other and fight over its memory.
"""

from __future__ import annotations

import fcntl
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cairn.doctor.read.files import Root, text_of
from cairn.doctor.read.gpus import read_amdgpu, read_kfd
from cairn.doctor.tools import parse_rocminfo
from cairn.gates.container import NO_GPU
from cairn.model.targets import Registry, load_registry

HOST_ROOT_ENV = "CAIRN_HOST_ROOT"  # a captured host tree to read instead of / (tests: a stand-in topology)
NOT_RUN = "not run: "  # as every gate's "not run" reason begins (cairn.gates.container.NO_GPU)


@dataclass(frozen=True)
class GpuHost:
    """The GPU agents (gfx targets, KFD node order), where they were read, and the driver."""

    agents: tuple[str, ...]
    driver: str
    cpu_agents: int  # CPU agents seen (KFD nodes with gfx_target_version 0, rocminfo's CPU agents)
    source: str  # "kfd", "rocminfo" or "none"
    kfd: bool  # /dev/kfd exists: a container can be given the GPU

    def key(self) -> str:
        """What the GPU gate's verdict depends on about this host (its action key)."""
        return f"gpu {','.join(self.agents) or 'none'}; driver {self.driver}; kfd {'yes' if self.kfd else 'no'}"


def host_root() -> Path:
    return Path(os.environ.get(HOST_ROOT_ENV) or "/")


def _rocminfo_text(root: Path) -> str:
    """``rocminfo``'s output: captured in a host tree (``.cairn-doctor/rocminfo.txt``, as ``cairn doctor --root``
    reads it), else the tool on PATH run now ("" when there is none)."""
    captured = root / ".cairn-doctor" / "rocminfo.txt"
    if root != Path("/") and captured.is_file():
        return captured.read_text(errors="replace")
    tool = shutil.which("rocminfo")
    if tool is None:
        return ""
    try:
        return subprocess.run([tool], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def read_gpu_host(root: Path | None = None, registry: Registry | None = None,
                  rocminfo: str | None = None) -> GpuHost:
    """The host below ``root`` (default ``$CAIRN_HOST_ROOT`` or ``/``); ``rocminfo`` text may be given."""
    root = root or host_root()
    registry = registry or load_registry()
    r = Root(root)
    _, nodes = read_kfd(r)
    agents: list[str] = []
    cpus = 0
    for node in nodes:
        if node.gfx_target_version == 0:
            cpus += 1  # a CPU agent
            continue
        target = registry.target_for_kfd_version(node.gfx_target_version)
        agents.append(target.name if target else f"gfx_target_version {node.gfx_target_version}")
    source = "kfd" if agents else "none"
    if not agents:
        text = _rocminfo_text(root) if rocminfo is None else rocminfo
        for gpu in parse_rocminfo(text):
            if gpu.processor.startswith("gfx"):
                agents.append(gpu.processor)
        cpus += len(re.findall(r"^\s*Device Type:\s*CPU\s*$", text, re.M))
        source = "rocminfo" if agents else "none"
    loaded, dkms = read_amdgpu(r)
    kernel = text_of(r("proc/sys/kernel/osrelease")).strip() or (platform.release() if root == Path("/") else "")
    driver = f"amdgpu-dkms {dkms}" if dkms else (f"amdgpu (in kernel {kernel or '?'})" if loaded else "none")
    return GpuHost(tuple(agents), driver, cpus, source, r("dev/kfd").exists())


def not_run_reason(host: GpuHost, image_target: str, registry: Registry | None = None) -> str:
    """"" when ``host`` has an agent the image's code serves, else the gate's ``not-run: …`` reason."""
    if not host.agents:
        return NO_GPU + (f" (its {host.cpu_agents} agent(s) are CPUs only)" if host.cpu_agents else "")
    if not host.kfd:
        return NOT_RUN + f"host is {', '.join(host.agents)}, but /dev/kfd is absent: no container can reach the GPU"
    registry = registry or load_registry()
    for agent in host.agents:
        if agent == image_target or (agent.startswith("gfx") and registry.can_run(image_target, agent)):
            return ""
    return NOT_RUN + f"host is {', '.join(host.agents)}, image is {image_target}"


@contextmanager
def gpu_lock(log: IO[str], path: Path | None = None) -> Iterator[None]:
    """Hold this host's GPU-gate lock: GPU gates of one host run one at a time (even from two builds)."""
    path = path or Path(tempfile.gettempdir()) / "cairn-gpu-gate.lock"
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.write(f"waiting for {path}: another GPU gate is running on this host\n")
            log.flush()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
