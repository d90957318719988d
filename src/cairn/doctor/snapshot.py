"""Read everything ``cairn doctor`` judges from one root directory into a frozen ``HostSnapshot``.

The checks never touch the system: they are pure functions of this snapshot. Reading from a root
directory (``/`` on a real host, a captured tree in tests) keeps every check testable against real sysfs
layouts. Paths read, relative to the root:

- ``sys/class/kfd/kfd/topology/nodes/*/properties`` and ``mem_banks/*/properties``: KFD agents (CPU nodes
  report ``gfx_target_version 0``), ``sys/class/drm/{card*,renderD*}/device``: DRM devices,
  ``sys/bus/pci/devices/*``: AMD display controllers even when no driver bound to them.
- ``sys/module/amdgpu`` (``version`` exists only for the DKMS module), ``proc/sys/kernel/osrelease``.
- ``dev/kfd``, ``dev/dri/*``: existence, owner, group and mode.
- ``proc/self/status`` (Uid/Gid/Groups) and ``proc/self/environ``: who runs the doctor, with which
  environment. On a live host that is this very process, which is exactly what the user's programs get.
- ``etc/group``, ``etc/passwd``, ``etc/os-release``, ``.dockerenv``, ``run/.containerenv``, ``proc/1/cgroup``.
- ROCm installs: ``opt/rocm*/.info/version``, ``opt/rocm*/share/cairn/manifest.json``,
  ``var/lib/dpkg/status``, and ``rocm``/``rocm-sdk*`` wheels in site-packages.
- Python distributions (``*.dist-info``) in site-packages: the interpreter's own on a live host,
  ``usr/lib/python3*/``, ``usr/local/lib/python3*/``, ``opt/*/lib/python3*/``, ``home/*/.local/lib/python3*/``
  in a captured tree.
- Tool outputs: on a live host ``rocminfo``, ``amd-smi static`` and ``rocm-smi --showproductname`` are run
  when installed; a captured tree keeps them in ``.cairn-doctor/{rocminfo,amd-smi,rocm-smi}.txt``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the audit is imported lazily (see audit_installed); only its report's type is needed here
    from cairn.audit.report import AuditReport

CAPTURE_DIR = ".cairn-doctor"
AMD_PCI_VENDOR = 0x1002
# PCI base classes that hold GPUs: 0x03 display controller, 0x12 processing accelerator (Instinct parts)
GPU_PCI_CLASSES = (0x03, 0x12)
# environment variables the doctor keeps (nothing else leaves the host in --json output)
ENV_PREFIXES = ("HSA_", "HIP_", "ROCR_", "ROCM_", "GPU_DEVICE_ORDINAL", "AMD_", "PYTORCH_ROCM_ARCH", "LD_LIBRARY_PATH")
TOOL_TIMEOUT = 20.0


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
class HostSnapshot:
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
    identity: Identity = Identity(0, 0, ())
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

    @property
    def gpu_nodes(self) -> tuple[KfdNode, ...]:
        return tuple(n for n in self.kfd_nodes if n.is_gpu)

    def device(self, path: str) -> DeviceNode:
        return next((d for d in self.devices if d.path == path), DeviceNode(path, False))


# -- small readers ---------------------------------------------------------------------------------------
def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _int(text: str, default: int = 0) -> int:
    text = text.strip()
    try:
        return int(text, 0)
    except ValueError:
        return default


def _properties(path: Path) -> dict[str, str]:
    """A sysfs ``properties`` file: one ``key value`` pair per line."""
    out: dict[str, str] = {}
    for line in _text(path).splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out[key] = value.strip()
    return out


def _numbered(parent: Path, prefix: str = "") -> list[Path]:
    try:
        entries = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()]
    except OSError:
        return []
    return sorted(entries, key=lambda p: int(p.name[len(prefix):]))


class _Root:
    def __init__(self, root: Path) -> None:
        self.base = root

    def __call__(self, path: str) -> Path:
        return self.base / path.lstrip("/")


# -- GPUs -----------------------------------------------------------------------------------------------
FB_HEAPS = (1, 2)  # HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC / _PRIVATE


def read_kfd(r: _Root) -> tuple[bool, tuple[KfdNode, ...]]:
    topology = r("sys/class/kfd/kfd/topology/nodes")
    present = r("sys/class/kfd/kfd").exists()
    nodes = []
    for node_dir in _numbered(topology):
        props = _properties(node_dir / "properties")
        if not props:
            continue
        vram = 0
        for bank in _numbered(node_dir / "mem_banks"):
            bank_props = _properties(bank / "properties")
            if _int(bank_props.get("heap_type", "0")) in FB_HEAPS:
                vram += _int(bank_props.get("size_in_bytes", "0"))
        minor = props.get("drm_render_minor")
        nodes.append(
            KfdNode(
                id=int(node_dir.name),
                gfx_target_version=_int(props.get("gfx_target_version", "0")),
                vendor_id=_int(props.get("vendor_id", "0")),
                device_id=_int(props.get("device_id", "0")),
                drm_render_minor=_int(minor) if minor not in (None, "", "0") else None,
                location_id=_int(props.get("location_id", "0")),
                domain=_int(props.get("domain", "0")),
                simd_count=_int(props.get("simd_count", "0")),
                vram_bytes=vram,
                name=_text(node_dir / "name").strip(),
            )
        )
    return present, tuple(nodes)


def _uevent(device_dir: Path) -> dict[str, str]:
    out = {}
    for line in _text(device_dir / "uevent").splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def read_drm(r: _Root) -> tuple[DrmDevice, ...]:
    drm = r("sys/class/drm")
    found = []
    entries = sorted(_numbered(drm, "card") + _numbered(drm, "renderD"), key=lambda p: p.name)
    for entry in entries:
        device = entry / "device"
        if not device.exists():
            continue
        uevent = _uevent(device)
        found.append(
            DrmDevice(
                name=entry.name,
                vendor=_int(_text(device / "vendor")),
                device=_int(_text(device / "device")),
                pci_slot=uevent.get("PCI_SLOT_NAME", ""),
                driver=uevent.get("DRIVER", ""),
                vram_bytes=_int(_text(device / "mem_info_vram_total")),
            )
        )
    return tuple(found)


def read_pci_gpus(r: _Root) -> tuple[PciDevice, ...]:
    """AMD display/accelerator PCI functions, with or without a bound driver."""
    base = r("sys/bus/pci/devices")
    try:
        slots = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return ()
    found = []
    for slot in slots:
        vendor = _int(_text(slot / "vendor"))
        pci_class = _int(_text(slot / "class"))
        if vendor != AMD_PCI_VENDOR or (pci_class >> 16) not in GPU_PCI_CLASSES:
            continue
        driver = _uevent(slot).get("DRIVER", "")
        found.append(PciDevice(slot.name, vendor, _int(_text(slot / "device")), pci_class, driver))
    return tuple(found)


def read_amdgpu(r: _Root) -> tuple[bool, str]:
    module = r("sys/module/amdgpu")
    modules = _text(r("proc/modules"))
    loaded = module.is_dir() or any(line.split(" ", 1)[0] == "amdgpu" for line in modules.splitlines())
    return loaded, _text(module / "version").strip()


# -- devices and identity ---------------------------------------------------------------------------------
def read_devices(r: _Root) -> tuple[DeviceNode, ...]:
    paths = ["/dev/kfd"]
    dri = r("dev/dri")
    with contextlib.suppress(OSError):
        paths += sorted(f"/dev/dri/{p.name}" for p in dri.iterdir() if p.name.startswith(("card", "renderD")))
    out = []
    for shown in paths:
        try:
            st = os.stat(r(shown))
        except OSError:
            out.append(DeviceNode(shown, False))
            continue
        out.append(DeviceNode(shown, True, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), stat.S_ISCHR(st.st_mode)))
    return tuple(out)


def read_identity(r: _Root) -> Identity:
    """Real uid/gid and supplementary groups from ``proc/self/status``."""
    fields: dict[str, list[int]] = {}
    for line in _text(r("proc/self/status")).splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [_int(v) for v in value.split()]
    uid = (fields.get("Uid") or [os.getuid() if str(r.base) == "/" else 0])[0]
    gid = (fields.get("Gid") or [0])[0]
    groups = tuple(sorted(set(fields.get("Groups", [])) | {gid}))
    name = ""
    for line in _text(r("etc/passwd")).splitlines():
        parts = line.split(":")
        if len(parts) > 3 and _int(parts[2], -1) == uid:
            name = parts[0]
            break
    return Identity(uid, gid, groups, name)


def read_groups(r: _Root) -> tuple[dict[int, str], dict[int, tuple[str, ...]]]:
    names: dict[int, str] = {}
    members: dict[int, tuple[str, ...]] = {}
    for line in _text(r("etc/group")).splitlines():
        parts = line.split(":")
        if len(parts) < 4 or not parts[2].isdigit():
            continue
        gid = int(parts[2])
        names.setdefault(gid, parts[0])
        members[gid] = tuple(m for m in parts[3].split(",") if m)
    return names, members


def read_env(r: _Root) -> dict[str, str]:
    raw = _text(r("proc/self/environ"))
    env = {}
    for item in raw.split("\0"):
        key, sep, value = item.partition("=")
        if sep and key.startswith(ENV_PREFIXES):
            env[key] = value
    return dict(sorted(env.items()))


def read_container(r: _Root) -> str:
    if r(".dockerenv").exists():
        return "docker"
    if r("run/.containerenv").exists():
        return "podman"
    cgroup = _text(r("proc/1/cgroup"))
    for marker, name in (("kubepods", "kubernetes"), ("libpod", "podman"), ("docker", "docker"),
                         ("containerd", "containerd"), ("lxc", "lxc")):
        if marker in cgroup:
            return name
    return ""


def read_os_release(r: _Root) -> dict[str, str]:
    out = {}
    for line in _text(r("etc/os-release")).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


# -- ROCm installs ----------------------------------------------------------------------------------------
_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# Debian and AMD packages whose version is the ROCm version they ship
DPKG_ROCM_PACKAGES = ("rocm-core", "hip-runtime-amd", "libamdhip64-5", "libamdhip64-6", "libhsa-runtime64-1")


def release_of(text: str) -> str:
    """``6.4.1-120`` / ``6.4.1.60401-83~24.04`` / ``10.1.0a20260811`` → ``6.4.1``; "" when none."""
    match = _VERSION_RE.search(text)
    if not match:
        return ""
    return f"{match[1]}.{match[2]}.{match[3] or 0}"


def read_rocm(r: _Root, dists: Iterable[Distribution]) -> tuple[RocmInstall, ...]:
    found: list[RocmInstall] = []
    seen_opt: set[str] = set()
    for opt in sorted(r("opt").glob("rocm*")) if r("opt").is_dir() else []:
        real = os.path.realpath(opt)
        if real in seen_opt:
            continue
        seen_opt.add(real)
        shown = "/" + str(opt.relative_to(r.base))
        manifest = opt / "share" / "cairn" / "manifest.json"
        if manifest.is_file():
            with contextlib.suppress(OSError, ValueError):
                doc = json.loads(manifest.read_text())
                version = str(doc.get("release", {}).get("version", "") or doc.get("version", ""))
                found.append(RocmInstall("cairn-sdk", release_of(version), shown, version))
                continue
        raw = _text(opt / ".info" / "version").strip()
        if raw:
            found.append(RocmInstall("opt", release_of(raw), shown, raw))
    status = _text(r("var/lib/dpkg/status"))
    for block in status.split("\n\n"):
        fields = dict(
            (line.split(":", 1)[0], line.split(":", 1)[1].strip()) for line in block.splitlines() if ":" in line and not line.startswith(" ")
        )
        if fields.get("Package") in DPKG_ROCM_PACKAGES and "installed" in fields.get("Status", ""):
            raw = fields.get("Version", "")
            upstream = raw.split(":", 1)[-1]
            found.append(RocmInstall("dpkg", release_of(upstream), fields["Package"], raw))
            break
    for dist in dists:
        if dist.name in ("rocm-sdk-core", "rocm-sdk", "rocm"):
            found.append(RocmInstall("wheel", release_of(dist.version), f"{dist.name} in {dist.site}", dist.version))
            break
    return tuple(found)


# -- Python distributions ---------------------------------------------------------------------------------
def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def site_dirs(r: _Root, live: bool) -> list[Path]:
    if live:
        candidates = [Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        candidates += [Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")]
    else:
        candidates = []
        for pattern in ("usr/lib/python3*/*-packages", "usr/local/lib/python3*/*-packages",
                        "opt/*/lib/python3*/site-packages", "home/*/.local/lib/python3*/site-packages",
                        "root/.local/lib/python3*/site-packages"):
            candidates += sorted(r.base.glob(pattern))
    out: list[Path] = []
    for path in candidates:
        if path.is_dir() and path not in out:
            out.append(path)
    return out


def _metadata(dist_info: Path) -> tuple[str, str, tuple[str, ...]]:
    name = version = ""
    requires = []
    for line in _text(dist_info / "METADATA").splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    return name, version, tuple(requires)


def rocm_relevant(name: str, version: str, requires: Iterable[str]) -> bool:
    """A distribution worth a look: it names ROCm, or is a framework with ROCm builds."""
    canonical = _canonical(name)
    if "rocm" in canonical or "rocm" in version.lower() or any("rocm" in req.lower() for req in requires):
        return True
    return canonical in FRAMEWORKS or canonical.startswith(("amd-torch-device-", "rocm-sdk"))


# frameworks whose ROCm builds the doctor checks (names only; their ROCm version comes from their metadata)
FRAMEWORKS = ("torch", "torchvision", "torchaudio", "pytorch-triton-rocm", "triton", "jax", "jaxlib", "vllm",
              "sglang", "sgl-kernel", "onnxruntime-rocm", "cairn-smoke", "aiter")


def read_dists(sites: Iterable[Path]) -> tuple[Distribution, ...]:
    out: dict[str, Distribution] = {}
    for site in sites:
        for dist_info in sorted(site.glob("*.dist-info")):
            name, version, requires = _metadata(dist_info)
            if not name or not rocm_relevant(name, version, requires):
                continue
            canonical = _canonical(name)
            if canonical in out:
                continue  # the first site on the path wins, like the import system
            shared = []
            for line in _text(dist_info / "RECORD").splitlines():
                rel = line.split(",", 1)[0]
                if re.search(r"\.so(\.\d+)*$", rel):
                    path = (site / rel).resolve()
                    if path.is_file():
                        shared.append(str(path))
            out[canonical] = Distribution(canonical, version, str(site), requires, tuple(sorted(shared)))
    return tuple(sorted(out.values(), key=lambda d: d.name))


def python_version(sites: list[Path], live: bool) -> str:
    if live:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    for site in sites:
        match = re.search(r"python(3\.\d+)", str(site))
        if match:
            return match[1]
    return ""


# -- tools ------------------------------------------------------------------------------------------------
TOOL_COMMANDS = {
    "rocminfo": ["rocminfo"],
    "amd-smi": ["amd-smi", "static", "--asic", "--driver"],
    "rocm-smi": ["rocm-smi", "--showproductname"],
}


def read_tools(r: _Root, live: bool) -> dict[str, ToolOutput]:
    out = {}
    for tool, cmd in TOOL_COMMANDS.items():
        if not live:
            captured = r(f"{CAPTURE_DIR}/{tool}.txt")
            out[tool] = ToolOutput(tool, captured.is_file(), _text(captured))
            continue
        if not shutil.which(cmd[0]):
            out[tool] = ToolOutput(tool, False)
            continue
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=TOOL_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            out[tool] = ToolOutput(tool, True, str(exc), -1)
            continue
        out[tool] = ToolOutput(tool, True, _strip_ansi(proc.stdout + proc.stderr), proc.returncode)
    return out


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# -- device code ------------------------------------------------------------------------------------------
def audit_installed(dists: Iterable[Distribution], rocm: Iterable[RocmInstall], r: _Root) -> tuple[CodeAudit, ...]:
    """Audit every installed package's shared objects and each SDK tree's lib/ (cairn.audit, lazily)."""
    from cairn.audit import audit_paths  # the audit is heavy and optional for most checks
    from cairn.errors import CairnError

    out = []
    subjects: list[tuple[str, str, list[Path]]] = [(d.name, d.version, [Path(p) for p in d.shared_objects])
                                                   for d in dists if d.shared_objects]
    for install in rocm:
        if install.source in ("opt", "cairn-sdk"):
            lib = r(install.where) / "lib"
            if lib.is_dir():
                subjects.append((f"ROCm SDK {install.where}", install.version, [lib]))
    for name, version, paths in subjects:
        try:
            out.append(CodeAudit(name, version, audit_paths(paths)))
        except CairnError as exc:
            out.append(CodeAudit(name, version, None, str(exc)))
    return tuple(out)


# -- the snapshot -----------------------------------------------------------------------------------------
def read_snapshot(root: Path | str = "/", *, audit: bool = True) -> HostSnapshot:
    """Everything the checks need, read from ``root``; the device-code audit runs only when a GPU exists."""
    base = Path(root)
    live = base.resolve() == Path("/")
    r = _Root(base)
    kfd_present, nodes = read_kfd(r)
    loaded, version = read_amdgpu(r)
    names, members = read_groups(r)
    sites = site_dirs(r, live)
    dists = read_dists(sites)
    rocm = read_rocm(r, dists)
    has_gpu = any(n.is_gpu for n in nodes)
    return HostSnapshot(
        root=str(base),
        live=live,
        kernel=_text(r("proc/sys/kernel/osrelease")).strip(),
        os_release=read_os_release(r),
        kfd_present=kfd_present,
        kfd_nodes=nodes,
        drm=read_drm(r),
        pci_gpus=read_pci_gpus(r),
        amdgpu_loaded=loaded,
        amdgpu_version=version,
        devices=read_devices(r),
        identity=read_identity(r),
        group_names=names,
        group_members=members,
        container=read_container(r),
        env=read_env(r),
        python=python_version(sites, live),
        rocm=rocm,
        dists=dists,
        tools=read_tools(r, live),
        audits=audit_installed(dists, rocm, r) if audit and has_gpu else (),
        audited=audit and has_gpu,
    )
