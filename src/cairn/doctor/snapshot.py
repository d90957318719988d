"""What ``cairn doctor`` judges: a frozen ``HostSnapshot`` of one host, and the records it is made of.

Pure data, no I/O: ``cairn.doctor.read`` fills it from a root directory (``/`` or a captured tree), and the
checks, the host interpretation and the advice are pure functions of it — so each can be tested against a
snapshot read from a captured tree, or built by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the audit is imported lazily by the reader; only its report's type is needed here
    from cairn.audit.report import AuditReport


@dataclass(frozen=True)
class HostSnapshot:
    """Everything the doctor knows about one host; ``live`` is True when ``root`` is this very host (``/``)."""

    root: str
    live: bool
    kernel: str = ""
    os_release: dict[str, str] = field(default_factory=dict)
    kfd_present: bool = False
    kfd_nodes: tuple[KfdNode, ...] = ()
    drm: tuple[DrmDevice, ...] = ()
    pci_gpus: tuple[PciDevice, ...] = ()
    amdgpu_loaded: bool = False
    amdgpu_version: str = ""  # /sys/module/amdgpu/version: only the DKMS module has one
    devices: tuple[DeviceNode, ...] = ()
    identity: Identity = field(default_factory=lambda: Identity(0, 0, ()))
    group_names: dict[int, str] = field(default_factory=dict)
    group_members: dict[int, tuple[str, ...]] = field(default_factory=dict)
    container: str = ""  # "docker", "podman", "kubernetes", "containerd", "lxc" or ""
    env: dict[str, str] = field(default_factory=dict)
    python: str = ""  # "3.11"
    rocm: tuple[RocmInstall, ...] = ()
    dists: tuple[Distribution, ...] = ()
    tools: dict[str, ToolOutput] = field(default_factory=dict)
    audits: tuple[CodeAudit, ...] = ()
    audited: bool = False  # False: the device-code audit did not run (no GPU, or --no-audit)
    indexes: tuple[IndexSource, ...] = ()  # the package indexes pip and uv install from, in their precedence
    libraries: tuple[LibraryCopy, ...] = ()  # every copy of the HIP runtime and amd-smi library
    payloads: tuple[DevicePayload, ...] = ()  # installed per-target device-code wheels
    glibc: str = ""  # "2.41": the running C library (live) or the newest GLIBC_ version libc.so.6 defines
    glibc_where: str = ""
    glibcxx: str = ""  # "3.4.33": the newest GLIBCXX_ version the host's libstdc++.so.6 defines
    glibcxx_where: str = ""
    probe: ProcessProbe | None = None  # what one process importing the installed ROCm packages maps
    cmdline: tuple[str, ...] = ()  # /proc/cmdline, one boot parameter each

    @property
    def gpu_nodes(self) -> tuple[KfdNode, ...]:
        return tuple(n for n in self.kfd_nodes if n.is_gpu)

    def device(self, path: str) -> DeviceNode:
        return next((d for d in self.devices if d.path == path), DeviceNode(path, False))


@dataclass(frozen=True)
class KfdNode:
    """One KFD topology node; ``gfx_target_version`` is 0 for CPU nodes."""

    id: int
    gfx_target_version: int
    vendor_id: int
    device_id: int
    drm_render_minor: int | None
    location_id: int
    domain: int
    simd_count: int
    vram_bytes: int
    name: str = ""

    @property
    def is_gpu(self) -> bool:
        return self.gfx_target_version != 0


@dataclass(frozen=True)
class DrmDevice:
    """A ``/sys/class/drm`` entry and the PCI device behind it."""

    name: str  # card1, renderD128
    vendor: int
    device: int
    pci_slot: str
    driver: str
    vram_bytes: int


@dataclass(frozen=True)
class PciDevice:
    """An AMD display or accelerator PCI function, found whether or not a driver is bound to it."""

    slot: str
    vendor: int
    device: int
    pci_class: int
    driver: str  # "" when no driver is bound


@dataclass(frozen=True)
class DeviceNode:
    """A device file as seen from the root: ``exists`` False means not there at all."""

    path: str  # absolute path on the host, e.g. /dev/kfd
    exists: bool
    uid: int = 0
    gid: int = 0
    mode: int = 0
    is_char: bool = False


@dataclass(frozen=True)
class Identity:
    """The user the doctor (and so the user's programs) runs as."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str = ""


@dataclass(frozen=True)
class RocmInstall:
    """One place ROCm user space was found: ``source`` says how it was found."""

    source: str  # "opt", "cairn-sdk", "dpkg", "wheel"
    version: str  # normalised X.Y.Z
    where: str  # path or package name
    raw: str = ""  # the version as written there


@dataclass(frozen=True)
class Distribution:
    """An installed Python distribution that might carry or need ROCm."""

    name: str  # canonical (lower case, dashes)
    version: str
    site: str  # site-packages directory
    requires: tuple[str, ...] = ()
    shared_objects: tuple[str, ...] = ()  # absolute paths of the .so files its RECORD lists
    tags: tuple[str, ...] = ()  # its WHEEL file's Tag lines, e.g. cp312-cp312-manylinux_2_39_x86_64


@dataclass(frozen=True)
class ToolOutput:
    """What a diagnostic tool printed (``ran`` False: not installed or not captured)."""

    tool: str
    ran: bool
    text: str = ""
    exit_code: int = 0


@dataclass(frozen=True)
class CodeAudit:
    """The device-code audit of one installed package or SDK: ``report`` is a cairn.audit AuditReport."""

    name: str
    version: str
    report: AuditReport | None
    error: str = ""


@dataclass(frozen=True)
class IndexSource:
    """A package index pip or uv is configured to install from, and where that is configured."""

    url: str
    where: str  # "PIP_INDEX_URL", "/etc/pip.conf [global] index-url", …


@dataclass(frozen=True)
class LibraryCopy:
    """One copy of a ROCm runtime library: its host path, the file it resolves to, and how it is found.

    ``rank`` is its directory's place in the dynamic loader's search order (LD_LIBRARY_PATH, ld.so.conf,
    the default directories); None when the loader never looks there (a wheel's or /opt tree's own
    directory, reached only through the RPATH of the libraries next to it).
    """

    library: str  # libamdhip64, libamd_smi
    path: str
    real: str
    where: str
    rank: int | None


@dataclass(frozen=True)
class ProcessProbe:
    """One process that imported the installed ROCm packages, and the HIP runtime files it then had mapped.

    ``maps`` are the distinct files of ``/proc/<pid>/maps`` whose name is a HIP runtime's (``libamdhip64*``,
    a wheel's grafted ``libamdhip64-<hash>.so.N`` included), as host paths; ``where`` says how it was read.
    """

    imported: tuple[str, ...]
    failed: tuple[str, ...]  # "module: error" for imports that failed
    maps: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class DevicePayload:
    """An installed wheel that carries device code for some gfx targets only."""

    name: str  # rocm-sdk-libraries-gfx110X-dgpu, rocm-sdk-device-gfx1100, amd-torch-device-gfx942
    version: str
    family: str  # the family or target its name carries (lower case unless its metadata spelled it)
    targets: tuple[str, ...]  # as its own metadata lists them; () when it lists none
    site: str


_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def release_of(text: str) -> str:
    """``6.4.1-120`` / ``6.4.1.60401-83~24.04`` / ``10.1.0a20260811`` → ``6.4.1``; "" when none.

    The one normalisation of a ROCm version as an install, a Debian package or a wheel writes it.
    """
    match = _VERSION_RE.search(text)
    if not match:
        return ""
    return f"{match[1]}.{match[2]}.{match[3] or 0}"
