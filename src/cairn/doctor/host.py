"""What the snapshot's raw facts mean: GPUs as registry targets, overrides decoded, wheels' ROCm versions.

Pure functions shared by the checks and the advice. Every gfx fact comes from the target registry
(``manifests/targets.toml``) through ``cairn.model.targets``; nothing here spells out a gfx list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

from cairn.doctor.snapshot import Distribution, HostSnapshot, RocmInstall, release_of
from cairn.doctor.tools import PARSERS, ToolGpu
from cairn.model.targets import Registry, Target

OVERRIDE_VAR = "HSA_OVERRIDE_GFX_VERSION"
_OVERRIDE_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_OVERRIDE_LIMITS = (63, 255, 255)  # libhsakmt's limits for major, minor, stepping


@dataclass(frozen=True)
class Gpu:
    """One GPU agent: KFD node, registry target (None when unknown), what a person calls it."""

    node: int
    kfd_version: int
    target: Target | None
    product: str
    families: tuple[str, ...]
    vram_bytes: int
    pci_id: str  # 1002:74a1
    pci_slot: str
    render: str  # /dev/dri/renderD128, "" when unknown
    target_id: str  # with the features the runtime reports when a tool said so, e.g. gfx942:sramecc+:xnack-

    @property
    def name(self) -> str:
        return self.target.name if self.target else f"unknown (gfx_target_version {self.kfd_version})"


def gib(size: int) -> str:
    return f"{size / 2**30:.0f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def tool_gpus(snap: HostSnapshot) -> dict[str, tuple[ToolGpu, ...]]:
    """GPUs each tool that ran reported (a tool that ran and found none maps to ``()``)."""
    return {name: PARSERS[name](out.text) for name, out in snap.tools.items() if out.ran}


def host_gpus(snap: HostSnapshot, registry: Registry) -> tuple[Gpu, ...]:
    by_minor = {int(d.name[7:]): d for d in snap.drm if d.name.startswith("renderD")}
    reported = tool_gpus(snap)
    gpus = []
    for index, node in enumerate(snap.gpu_nodes):
        target = registry.target_for_kfd_version(node.gfx_target_version)
        drm = by_minor.get(node.drm_render_minor) if node.drm_render_minor is not None else None
        product, target_id = "", target.name if target else ""
        for tool in ("amd-smi", "rocminfo", "rocm-smi"):
            match = _tool_match(reported.get(tool, ()), node.id, index)
            if match:
                product = product or match.name
                if target and match.processor == target.name and ":" in match.target:
                    target_id = match.target
        if not product and target:
            product = " / ".join(target.products)
        gpus.append(
            Gpu(
                node=node.id,
                kfd_version=node.gfx_target_version,
                target=target,
                product=product,
                families=registry.families_of(target.name) if target else (),
                vram_bytes=node.vram_bytes or (drm.vram_bytes if drm else 0),
                pci_id=f"{node.vendor_id:04x}:{node.device_id:04x}",
                pci_slot=drm.pci_slot if drm else "",
                render=f"/dev/dri/renderD{node.drm_render_minor}" if node.drm_render_minor is not None else "",
                target_id=target_id,
            )
        )
    return tuple(gpus)


def _tool_match(found: tuple[ToolGpu, ...], node: int, index: int) -> ToolGpu | None:
    by_node = [g for g in found if g.node == node]
    if by_node:
        return by_node[0]
    return found[index] if index < len(found) and found[index].node is None else None


# -- HSA_OVERRIDE_GFX_VERSION ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Override:
    """One override variable and what it decodes to."""

    variable: str  # HSA_OVERRIDE_GFX_VERSION or HSA_OVERRIDE_GFX_VERSION_<node>
    value: str
    node: int | None  # None: applies to every GPU node
    kfd_version: int | None  # None: not a valid value
    target: Target | None


def decode_override(value: str, registry: Registry) -> tuple[int | None, Target | None]:
    """``11.0.0`` → (110000, gfx1100); invalid syntax or limits → (None, None)."""
    match = _OVERRIDE_RE.match(value.strip())
    if not match:
        return None, None
    parts = [int(p) for p in match.groups()]
    if any(p > limit for p, limit in zip(parts, _OVERRIDE_LIMITS, strict=True)):
        return None, None
    version = parts[0] * 10000 + parts[1] * 100 + parts[2]
    return version, registry.target_for_kfd_version(version)


def overrides(snap: HostSnapshot, registry: Registry) -> tuple[Override, ...]:
    out = []
    for key, value in snap.env.items():
        if key == OVERRIDE_VAR:
            node = None
        elif key.startswith(OVERRIDE_VAR + "_") and key[len(OVERRIDE_VAR) + 1:].isdigit():
            node = int(key[len(OVERRIDE_VAR) + 1:])
        else:
            continue
        version, target = decode_override(value, registry)
        out.append(Override(key, value, node, version, target))
    return tuple(out)


def override_for(node: int, found: tuple[Override, ...]) -> Override | None:
    """The override that applies to a KFD node: the per-node variable wins over the global one."""
    return next((o for o in found if o.node == node), None) or next((o for o in found if o.node is None), None)


def effective_target(gpu: Gpu, found: tuple[Override, ...]) -> str | None:
    """The target the runtime (and so every library's code lookup) sees for this GPU."""
    override = override_for(gpu.node, found)
    if override and override.target:
        return override.target.name
    return gpu.target.name if gpu.target else None


def shared_generic(registry: Registry, a: str, b: str) -> str | None:
    """A generic target holding both processors: code for one then mostly runs on the other."""
    return next((g.name for g in registry.generics.values() if a in g.members and b in g.members), None)


# -- ROCm versions ------------------------------------------------------------------------------------------
_LOCAL_ROCM = re.compile(r"rocm[._-]?(\d+(?:\.\d+)*)", re.I)
_NAME_ROCM = re.compile(r"rocm-?(\d+)(?:-(\d+))?(?:-|$)", re.I)
_PIN_ROCM = re.compile(r"^(rocm|rocm-sdk[-a-z0-9]*)\s*(?:\[[^\]]*\])?\s*==\s*([0-9][^\s;,]*)", re.I)


def declared_rocm(dist: Distribution) -> tuple[str, str]:
    """The ROCm a wheel says it was built for, and where it says so; ("", "") when it doesn't.

    Sources, most exact first: an ``==`` pin on a ``rocm``/``rocm-sdk*`` wheel (TheRock builds), the local
    version label (``2.12.0+rocm7.14.0``, ``+rocm.10.1.0``, vLLM's ``+rocm721``), the project name
    (``jax-rocm7-plugin``, ``cupy-rocm-7-0``).
    """
    for req in dist.requires:
        match = _PIN_ROCM.match(req)
        if match:
            return release_of(match[2]), f"Requires-Dist {req}"
    _, plus, local = dist.version.partition("+")
    match = _LOCAL_ROCM.search(local) if plus else None
    if match:
        digits = match[1]
        if "." not in digits:
            digits = _undotted(digits)
        return digits, f"version {dist.version}"
    match = _NAME_ROCM.search(dist.name)
    if match and dist.name not in ("rocm-sdk-core", "rocm-sdk", "rocm"):
        return ".".join(p for p in match.groups() if p), f"name {dist.name}"
    return "", ""


def _undotted(digits: str) -> str:
    """vLLM's ``721`` → 7.2.1, ``72`` → 7.2, ``100`` → 10.0, ``1000`` → 10.0.0."""
    major_len = 2 if len(digits) >= 3 and digits[:2] in ("10", "11", "12") else 1
    return ".".join([digits[:major_len], *digits[major_len:]])


def same_rocm(declared: str, installed: str) -> str:
    """"same", "patch" (only the patch level differs) or "different", at the precision declared."""
    want = declared.split(".")
    have = installed.split(".")
    if want[:2] != have[: len(want[:2])]:
        return "different"
    if len(want) > 2 and want[2] != (have[2] if len(have) > 2 else "0"):
        return "patch"
    return "same"


def reference_rocm(snap: HostSnapshot) -> RocmInstall | None:
    """The ROCm a framework in this Python environment loads: the rocm wheel, else the system install."""
    for source in ("wheel", "cairn-sdk", "opt", "dpkg"):
        found = next((i for i in snap.rocm if i.source == source and i.version), None)
        if found:
            return found
    return None


def bundles_rocm(dist: Distribution) -> bool:
    """Fat wheels (ROCm ≤ 7.2 torch) carry their own HIP runtime next to their code."""
    return any(re.search(r"/libamdhip64\.so", p) for p in dist.shared_objects)


# -- integrated and discrete GPUs ------------------------------------------------------------------------------
def gpu_kind(gpu: Gpu, registry: Registry) -> str:
    """"igpu", "dgpu" (discrete and data-centre cards) or "" for a target no such family holds."""
    if gpu.target is None:
        return ""
    families = set(registry.families_of(gpu.target.name))
    if "igpu-all" in families:
        return "igpu"
    return "dgpu" if families & {"dgpu-all", "dcgpu-all"} else ""


# -- glibc and libstdc++ needs of wheels ------------------------------------------------------------------------
_LEGACY = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_")


@dataclass(frozen=True)
class WheelNeed:
    """What a wheel's platform tags promise about the host it loads on.

    ``glibc`` is the lowest glibc any of its manylinux tags admits (pip installs a wheel when one tag fits);
    ``trusted`` is False for a wheel tagged only ``linux_*``, which claims every Linux and says nothing;
    ``glibcxx`` the newest GLIBCXX_ version auditwheel's policy for that tag lets it use ("" when unknown)."""

    glibc: str
    tag: str
    trusted: bool
    glibcxx: str = ""
    portable: bool = False  # a pure (``any``) wheel: no native code, no need


def platform_tags(tags: tuple[str, ...]) -> list[str]:
    """The platform parts of ``py3-none-manylinux_2_39_x86_64`` Tag lines (compressed sets split)."""
    out: list[str] = []
    for tag in tags:
        parts = tag.split("-")
        for platform in (parts[2].split(".") if len(parts) == 3 else ()):
            if platform not in out:
                out.append(platform)
    return out


def wheel_need(tags: tuple[str, ...]) -> WheelNeed | None:
    """The host a wheel with these tags needs; None when it has no tags (not installed from a wheel)."""
    platforms = platform_tags(tags)
    if not platforms:
        return None
    if "any" in platforms:
        return WheelNeed("", "any", True, portable=True)
    levels: list[tuple[tuple[int, int], str]] = []
    for platform in platforms:
        match = _MANYLINUX.match(platform)
        if match:
            levels.append(((int(match[1]), int(match[2])), platform))
        elif platform.split("_", 1)[0] in _LEGACY:
            legacy = _LEGACY[platform.split("_", 1)[0]].split(".")
            levels.append(((int(legacy[0]), int(legacy[1])), platform))
    if not levels:
        linux = next((p for p in platforms if p.startswith("linux_")), platforms[0])
        return WheelNeed("", linux, False)
    (glibc_major, glibc_minor), tag = min(levels)
    return WheelNeed(f"{glibc_major}.{glibc_minor}", tag, True, policy_glibcxx(glibc_major, glibc_minor))


def policy_glibcxx(major: int, minor: int) -> str:
    """The newest GLIBCXX_ version auditwheel's manylinux_<major>_<minor> policy allows on x86_64 ("" unknown)."""
    try:
        policies = json.loads(resources.files("auditwheel").joinpath("policy/manylinux-policy.json").read_text())
    except (ModuleNotFoundError, OSError, ValueError):
        return ""
    for policy in policies:
        names = [policy.get("name", ""), *policy.get("aliases", [])]
        if f"manylinux_{major}_{minor}" in names:
            versions = policy.get("symbol_versions", {}).get("x86_64", {}).get("GLIBCXX", [])
            return max(versions, key=lambda v: tuple(int(p) for p in v.split("."))) if versions else ""
    return ""
