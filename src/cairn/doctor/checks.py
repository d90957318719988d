"""The doctor's checks: small pure functions from a ``HostSnapshot`` to one ``Check`` each.

Each check has a stable id, a status (``fail`` > ``warn`` > ``ok`` > ``skip``, where ``skip`` means the
check does not apply to this host and says why), a one-line summary, the fix, and evidence lines (the
facts it judged, for ``-v`` and ``--json``). No check reads the system; ``cairn.doctor.read.read_snapshot`` did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cairn.doctor import host as h
from cairn.doctor.snapshot import DeviceNode, DevicePayload, HostSnapshot, LibraryCopy
from cairn.doctor.tools import rocminfo_error
from cairn.model.targets import Registry

STATUS_ORDER = {"fail": 0, "warn": 1, "ok": 2, "skip": 3}
GROUP_FIX = "sudo usermod -aG render,video $USER, then log out and back in"


@dataclass(frozen=True)
class Check:
    id: str
    status: str
    summary: str
    fix: str = ""
    evidence: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "summary": self.summary, "fix": self.fix,
                "evidence": list(self.evidence)}


@dataclass(frozen=True)
class Facts:
    """What the checks consult besides the snapshot: the target registry and the loaded matrices."""

    registry: Registry
    matrices: tuple[Any, ...] = ()  # advice.LoadedMatrix
    install: dict[str, tuple[str, ...]] = field(default_factory=dict)  # target → the advice's exact commands
    picks: tuple[Any, ...] = ()  # advice.Pick: the cells the advice names
    nearest: dict[str, Any] = field(default_factory=dict)  # target with no build → advice.Nearest


def worse(a: str, b: str) -> str:
    return a if STATUS_ORDER[a] <= STATUS_ORDER[b] else b


def _no_gpu(snap: HostSnapshot) -> bool:
    return not snap.gpu_nodes and not snap.pci_gpus


# -- GPUs ---------------------------------------------------------------------------------------------------
def check_gpus(snap: HostSnapshot, facts: Facts) -> Check:
    gpus = h.host_gpus(snap, facts.registry)
    if not gpus:
        found = _no_gpus(snap)
        return Check(found.id, found.status, found.summary, found.fix, found.evidence + _tool_lines(snap))
    evidence = [
        f"node {g.node}: {g.target_id or g.name} (gfx_target_version {g.kfd_version}), {g.product}, PCI {g.pci_id}"
        + (f" at {g.pci_slot}" if g.pci_slot else "") + f", {h.gib(g.vram_bytes)} VRAM"
        + (f", {g.render}" if g.render else "") + (f"; families {', '.join(g.families)}" if g.families else "")
        for g in gpus
    ]
    unknown = [g for g in gpus if g.target is None]
    if unknown:
        return Check("gpus", "fail", f"{len(unknown)} GPU(s) report a gfx_target_version Cairn has no target for "
                     f"({', '.join(str(g.kfd_version) for g in unknown)})",
                     "no Cairn artifact can carry code for it; check manifests/targets.toml for newer targets", tuple(evidence))
    counts = Counter((g.target.name if g.target else "", g.product, g.vram_bytes) for g in gpus)
    summary = "; ".join(f"{n}× {target} {product} {h.gib(vram)}" for (target, product, vram), n in counts.items())
    mismatch = _tool_disagreement(snap, facts, gpus)
    evidence += mismatch[1]
    if mismatch[0]:
        return Check("gpus", "warn", f"{summary}; but {mismatch[0]}", mismatch[2], tuple(evidence))
    return Check("gpus", "ok", summary, "", tuple(evidence))


def _no_gpus(snap: HostSnapshot) -> Check:
    if snap.pci_gpus:
        listed = ", ".join(f"{p.slot} (1002:{p.device:04x}, driver {p.driver or 'none'})" for p in snap.pci_gpus)
        return Check("gpus", "fail", f"AMD GPU on PCI ({listed}) but no KFD compute agent: the amdgpu driver is not serving it",
                     "see the driver check: load amdgpu (sudo modprobe amdgpu) and read dmesg | grep -i amdgpu",
                     tuple(f"PCI {p.slot}: vendor 1002 device {p.device:04x} class {p.pci_class:06x}" for p in snap.pci_gpus))
    if snap.kfd_present:
        return Check("gpus", "fail", "the KFD is loaded but reports no GPU agent (only CPU nodes)",
                     "check dmesg | grep -i kfd; the GPU may be unsupported by this kernel's amdgpu",
                     (f"{len(snap.kfd_nodes)} KFD node(s), none with a gfx_target_version",))
    return Check("gpus", "fail", "no AMD GPU on this host: no KFD topology in /sys/class/kfd and no AMD display or accelerator on PCI",
                 "run on a machine with a supported AMD GPU (checks that need one are skipped below)",
                 ("/sys/class/kfd: absent", "PCI: no device with vendor 0x1002 and class 0x03/0x12"))


def _tool_lines(snap: HostSnapshot) -> tuple[str, ...]:
    lines = []
    for tool, reported in sorted(h.tool_gpus(snap).items()):
        error = rocminfo_error(snap.tools[tool].text) if tool == "rocminfo" else ""
        lines.append(f"{tool}: {', '.join(g.target for g in reported) or 'no GPU'}" + (f" ({error})" if error else ""))
    return tuple(lines)


def _tool_disagreement(snap: HostSnapshot, facts: Facts, gpus: tuple[h.Gpu, ...]) -> tuple[str, list[str], str]:
    """Compare each tool's GPU list with the KFD topology (rocminfo sees the overridden targets)."""
    found = h.overrides(snap, facts.registry)
    real = sorted(g.target.name for g in gpus if g.target)
    seen_by_runtime = sorted(t for g in gpus if (t := h.effective_target(g, found)))
    evidence: list[str] = []
    problem, fix = "", ""
    for tool, reported in sorted(h.tool_gpus(snap).items()):
        names = sorted(g.processor for g in reported)
        evidence.append(f"{tool}: {', '.join(names) or 'no GPU'}")
        expected = seen_by_runtime if tool == "rocminfo" else real
        if not reported:
            error = rocminfo_error(snap.tools[tool].text) if tool == "rocminfo" else ""
            problem = problem or f"{tool} sees no GPU" + (f" ({error})" if error else "")
            fix = fix or "the runtime cannot open the GPU: see the devices and access checks"
        elif names != expected:
            problem = problem or f"{tool} reports {', '.join(sorted(set(names)))} where the KFD topology says {', '.join(sorted(set(expected)))}"
            fix = fix or "a stale or mismatched ROCm user space; reinstall ROCm matching the driver"
        elif tool == "rocminfo" and expected != real:
            evidence.append("rocminfo shows the targets HSA_OVERRIDE_GFX_VERSION impersonates (see the override check)")
    if not snap.tools or not any(o.ran for o in snap.tools.values()):
        evidence.append("no rocminfo, amd-smi or rocm-smi output to cross-check")
    return problem, evidence, fix


# -- kernel driver ------------------------------------------------------------------------------------------
def check_driver(snap: HostSnapshot, facts: Facts) -> Check:
    kernel = snap.kernel or "unknown"
    if not snap.amdgpu_loaded:
        if _no_gpu(snap):
            return Check("driver", "skip", f"amdgpu not loaded, as expected without an AMD GPU (kernel {kernel})",
                         "", (f"kernel {kernel}",))
        return Check("driver", "fail", f"amdgpu kernel driver is not loaded (kernel {kernel})",
                     "sudo modprobe amdgpu; if that fails, dmesg | grep -i amdgpu names the cause (firmware, "
                     "secure boot, a kernel too old for this GPU); install amdgpu-dkms for this kernel if needed",
                     (f"kernel {kernel}", "/sys/module/amdgpu: absent"))
    driver = f"amdgpu {snap.amdgpu_version} (DKMS)" if snap.amdgpu_version else "in-tree amdgpu"
    evidence = [f"kernel {kernel}", driver]
    ranges = _requirement_ranges(snap, facts)
    if not ranges:
        evidence.append("no matrix cell for this host's ROCm and target: driver/kernel range not checked")
        return Check("driver", "ok", f"{driver} on kernel {kernel}", "", tuple(evidence))
    label, req = ranges
    evidence.append(f"{label} needs kernel {req.kernel}, {req.driver_name} {req.driver}")
    if (req.kernel.minimum or req.kernel.below) and snap.kernel and not req.kernel.contains(snap.kernel):
        return Check("driver", "fail", f"kernel {kernel} is outside {label}'s supported range {req.kernel}",
                     f"boot a kernel in {req.kernel}, or use a release whose matrix supports this kernel", tuple(evidence))
    if snap.amdgpu_version and (req.driver.minimum or req.driver.below) and not req.driver.contains(snap.amdgpu_version):
        return Check("driver", "fail", f"{driver} is outside {label}'s supported range {req.driver}",
                     f"install the amdgpu-dkms release in {req.driver} (or the in-tree driver of a supported kernel)",
                     tuple(evidence))
    return Check("driver", "ok", f"{driver} on kernel {kernel}, inside {label}'s supported range", "", tuple(evidence))


def _requirement_ranges(snap: HostSnapshot, facts: Facts) -> tuple[str, Any] | None:
    """Requirements of the matrix release matching the installed ROCm (else the newest), for this target."""
    gpus = h.host_gpus(snap, facts.registry)
    targets = {g.target.name for g in gpus if g.target}
    installed = h.reference_rocm(snap)
    candidates = []
    for item in facts.matrices:
        for cell in item.matrix.cells:
            if cell.gfx_target in targets:
                exact = installed is not None and cell.release.split("+")[0].startswith(installed.version)
                candidates.append((exact, cell.release, cell))
    if not candidates:
        return None
    exact, release, cell = max(candidates, key=lambda c: (c[0], c[1]))
    return f"cairn {release}" + ("" if exact else " (newest in the matrix)"), cell.requirements


# -- devices and access -------------------------------------------------------------------------------------
def _wanted_devices(snap: HostSnapshot, facts: Facts) -> list[str]:
    renders = [g.render for g in h.host_gpus(snap, facts.registry) if g.render]
    return ["/dev/kfd", *(renders or ["/dev/dri/renderD*"])]


def check_devices(snap: HostSnapshot, facts: Facts) -> Check:
    where = f" (inside a {snap.container} container)" if snap.container else ""
    if _no_gpu(snap):
        return Check("devices", "skip", f"no AMD GPU, so no /dev/kfd or /dev/dri render node is expected{where}")
    wanted = _wanted_devices(snap, facts)
    present = {d.path: d for d in snap.devices if d.exists}
    missing = [p for p in wanted if p not in present and not (p.endswith("*") and any("renderD" in q for q in present))]
    evidence = tuple(_describe(d, snap) for d in snap.devices if d.exists) or ("no /dev/kfd, no /dev/dri",)
    if missing and snap.container:
        return Check("devices", "fail", f"the {snap.container} container was started without the GPU devices: {', '.join(missing)} missing",
                     f"{'podman' if snap.container == 'podman' else 'docker'} run --device /dev/kfd --device /dev/dri "
                     "--group-add video --group-add render … (Kubernetes: request amd.com/gpu from the AMD device plugin)",
                     evidence)
    if missing:
        return Check("devices", "fail", f"{', '.join(missing)} missing although the GPU is there",
                     "the amdgpu driver creates them: reload it (sudo modprobe -r amdgpu && sudo modprobe amdgpu) "
                     "and check udev rules for /dev/kfd", evidence)
    renders = [p for p in wanted if p != "/dev/kfd"]
    shown = f"/dev/kfd and {len(renders)} render nodes" if len(renders) > 2 else ", ".join(wanted)
    return Check("devices", "ok", f"{shown} present{where}", "", evidence)


def _describe(dev: DeviceNode, snap: HostSnapshot) -> str:
    group = snap.group_names.get(dev.gid, "no name here")
    kind = "char device" if dev.is_char else "not a char device"
    return f"{dev.path}: {kind}, mode {dev.mode:04o}, owner uid {dev.uid}, group {dev.gid} ({group})"


def can_open(dev: DeviceNode, uid: int, groups: tuple[int, ...]) -> bool:
    """Read-write permission by the mode bits, as the kernel decides it (root always may)."""
    if uid == 0:
        return True
    if dev.uid == uid:
        return dev.mode & 0o600 == 0o600
    if dev.gid in groups:
        return dev.mode & 0o060 == 0o060
    return dev.mode & 0o006 == 0o006


def check_access(snap: HostSnapshot, facts: Facts) -> Check:
    ident = snap.identity
    who = ident.name or f"uid {ident.uid}"
    wanted = [d for d in snap.devices if d.exists and (d.path == "/dev/kfd" or "renderD" in d.path)]
    if not wanted:
        return Check("access", "skip", "no GPU device nodes to open" + ("" if _no_gpu(snap) else " (see the devices check)"))
    groups_text = ", ".join(f"{g} ({snap.group_names.get(g, '?')})" for g in ident.groups)
    evidence = [f"running as {who} (uid {ident.uid}), groups {groups_text}"]
    evidence += [_describe(d, snap) for d in wanted]
    blocked = [d for d in wanted if not can_open(d, ident.uid, ident.groups)]
    if not blocked:
        how = "as root" if ident.uid == 0 else "through group membership"
        shown = f"/dev/kfd and {len(wanted) - 1} render nodes" if len(wanted) > 3 else ", ".join(d.path for d in wanted)
        return Check("access", "ok", f"{who} can open {shown} {how}", "", tuple(evidence))
    need = sorted({d.gid for d in blocked})
    names = [snap.group_names.get(g, "") for g in need]
    shown = ", ".join(f"{n or 'unnamed'} (gid {g})" for n, g in zip(names, need, strict=True))
    paths = ", ".join(d.path for d in blocked)
    if snap.container:
        adds = " ".join(f"--group-add {g}" for g in need)
        unnamed = [g for g, n in zip(need, names, strict=True) if not n]
        if unnamed:
            evidence.append(f"gid {', '.join(map(str, unnamed))} has no name in this container's /etc/group: host and image group ids differ")
        return Check("access", "fail", f"{who} cannot open {paths}: not in {shown}",
                     f"start the container with {adds} (numeric ids: group names differ between host and image)",
                     tuple(evidence))
    listed = [g for g in need if who in snap.group_members.get(g, ())]
    if listed and len(listed) == len(need):
        return Check("access", "fail", f"{who} was added to {shown} but this login session predates it",
                     "log out and back in (or run `newgrp render`) so the new groups apply", tuple(evidence))
    fix = GROUP_FIX.replace("render,video", ",".join(n for n in names if n) or "render,video").replace("$USER", ident.name or "$USER")
    return Check("access", "fail", f"{who} cannot open {paths}: not in {shown}", fix, tuple(evidence))


# -- installed ROCm and wheels ------------------------------------------------------------------------------
def check_rocm(snap: HostSnapshot, facts: Facts) -> Check:
    evidence = tuple(f"{i.source}: ROCm {i.version} from {i.where} ({i.raw})" for i in snap.rocm)
    if not snap.rocm:
        return Check("rocm", "warn", "no ROCm user space found (no /opt/rocm*, no ROCm packages, no rocm-sdk wheel)",
                     "install the release the advice names (image or pip index); frameworks that bundle ROCm still work",
                     ("looked in /opt/rocm*, /var/lib/dpkg/status, site-packages",))
    versions = sorted({i.version for i in snap.rocm})
    reference = h.reference_rocm(snap)
    shown = f"ROCm {reference.version} ({reference.source}: {reference.where})" if reference else "ROCm"
    if len(versions) > 1:
        return Check("rocm", "warn", f"{len(versions)} ROCm versions installed ({', '.join(versions)}); programs load whichever "
                     "their RPATH or LD_LIBRARY_PATH finds first", "remove the ones you do not use, or keep each in its own "
                     "venv/container", evidence)
    return Check("rocm", "ok", shown, "", evidence)


def check_wheels(snap: HostSnapshot, facts: Facts) -> Check:
    reference = h.reference_rocm(snap)
    declared = [(d, *h.declared_rocm(d)) for d in snap.dists]
    declared = [(d, v, why) for d, v, why in declared if v]
    python = f"Python {snap.python}" if snap.python else "Python"
    if not declared:
        return Check("wheels", "ok", f"no framework wheel built for ROCm in {python}'s site-packages", "",
                     tuple(f"{d.name} {d.version}" for d in snap.dists))
    evidence = [f"{d.name} {d.version}: built for ROCm {v} ({why})" for d, v, why in declared]
    if reference is None:
        bundled = [d.name for d, _, _ in declared if h.bundles_rocm(d)]
        if len(bundled) == len(declared):
            return Check("wheels", "ok", f"{', '.join(bundled)} bring their own ROCm libraries", "", tuple(evidence))
        return Check("wheels", "warn", f"{', '.join(d.name for d, _, _ in declared)} need ROCm, and none is installed",
                     "install the ROCm they were built for, or the release the advice names", tuple(evidence))
    evidence.append(f"installed: ROCm {reference.version} ({reference.source}: {reference.where})")
    wrong: list[str] = []
    patch: list[str] = []
    for dist, version, _ in declared:
        verdict = h.same_rocm(version, reference.version)
        if verdict == "different":
            (patch if h.bundles_rocm(dist) else wrong).append(f"{dist.name} {dist.version} (ROCm {version})")
        elif verdict == "patch":
            patch.append(f"{dist.name} {dist.version} (ROCm {version})")
    if wrong:
        return Check("wheels", "fail", f"built for another ROCm than the installed {reference.version}: {'; '.join(wrong)}",
                     f"reinstall them from the index for ROCm {reference.version} (see the advice): "
                     f"pip install --force-reinstall --index-url <index> {' '.join(w.split()[0] for w in wrong)}", tuple(evidence))
    if patch:
        return Check("wheels", "warn", f"close but not exact ROCm match with {reference.version}: {'; '.join(patch)}",
                     "prefer the wheel built for exactly this ROCm (see the advice)", tuple(evidence))
    names = ", ".join(f"{d.name} {d.version}" for d, _, _ in declared)
    return Check("wheels", "ok", f"{names} match ROCm {reference.version}", "", tuple(evidence))


# -- device code --------------------------------------------------------------------------------------------
def check_device_code(snap: HostSnapshot, facts: Facts) -> Check:
    gpus = h.host_gpus(snap, facts.registry)
    if not gpus:
        return Check("device-code", "skip", "no GPU to check installed device code against")
    if not snap.audited:
        return Check("device-code", "skip", "device-code audit not run (--no-audit)")
    found = h.overrides(snap, facts.registry)
    targets = sorted({t for g in gpus if (t := h.effective_target(g, found))})
    real = sorted({g.target.name for g in gpus if g.target})
    with_code = [a for a in snap.audits if a.report is not None and (a.report.device_binaries or a.report.kpack_binaries)]
    errors = [a for a in snap.audits if a.error]
    evidence = [f"audit error in {a.name}: {a.error}" for a in errors]
    if not with_code:
        status = "warn" if errors else "ok"
        return Check("device-code", status, "no installed package or SDK library carries device code to check",
                     "", tuple(evidence) or (f"{len(snap.audits)} package(s) audited",))
    missing: list[str] = []
    kpack: list[str] = []
    for audit in with_code:
        assert audit.report is not None  # with_code holds only audits that have a report
        for target in targets:
            cov = audit.report.coverage(target)
            files = f"{len(cov.gaps)} of {cov.binaries + len(audit.report.kpack_binaries)} libraries"
            evidence.append(f"{audit.name} {audit.version} for {target}: "
                            + ("covered via " + ", ".join(cov.via) if cov.covered else cov.message()))
            if cov.covered:
                continue
            if all(g.reason == "kpack" for g in cov.gaps):
                kpack.append(f"{audit.name} ({target})")
            else:
                missing.append(f"{audit.name} has no {target} code ({files})")
        if targets != real:
            for target in real:
                cov = audit.report.coverage(target)
                evidence.append(f"{audit.name} without the override, for {target}: " + ("covered" if cov.covered else "not covered"))
    if missing:
        absent = [t for t in real if facts.matrices and not _has_build(t, facts)]  # never point at a build that does not exist
        what = (f"there is no build for {', '.join(absent)} in the matrix: the advice names the nearest (unsupported)"
                if absent else f"install the build for {', '.join(real)} (see the advice)")
        return Check("device-code", "fail", "; ".join(missing),
                     f"{what}; without it the first kernel launch fails with 'invalid device function'", tuple(evidence))
    if kpack or errors:
        what = f"device code in external kpack archives not checked: {', '.join(kpack)}" if kpack else "some libraries could not be audited"
        return Check("device-code", "warn", what, "check that the rocm-sdk-device / amd-torch-device wheel for your target is installed",
                     tuple(evidence))
    return Check("device-code", "ok", f"{len(with_code)} package(s) carry code for {', '.join(targets)}", "", tuple(evidence))


# -- copies of the runtime libraries ------------------------------------------------------------------------
def check_libraries(snap: HostSnapshot, facts: Facts) -> Check:
    """Two copies of the HIP runtime (or amd-smi) mean two runtimes in one process, each with its own devices."""
    evidence = tuple(f"{c.library}: {c.path}" + (f" → {c.real}" if c.real != c.path else "") + f" ({c.where}"
                     + (f", search order {c.rank + 1}" if c.rank is not None else ", not on the loader's search path") + ")"
                     for c in snap.libraries)
    if not snap.libraries:
        return Check("libraries", "ok", "no libamdhip64 or libamd_smi on the library path, in /opt/rocm* or in ROCm wheels", "",
                     ("looked in LD_LIBRARY_PATH, /etc/ld.so.conf, the default loader directories, /opt/rocm*/lib, "
                      "ROCm wheels' site-packages",))
    problems, fixes = [], []
    for library in sorted({c.library for c in snap.libraries}):
        copies = [c for c in snap.libraries if c.library == library]
        if len(copies) < 2:
            continue
        listed = ", ".join(f"{c.path} ({c.where})" for c in copies)
        on_path = sorted((c for c in copies if c.rank is not None), key=lambda c: c.rank or 0)
        if on_path:
            winner = on_path[0]
            wins = f"{winner.path} wins for a program without an RPATH"
            losers = [c for c in copies if c is not winner]
            fixes.append(f"keep {winner.path}: " + ", ".join(_remove(c) for c in losers))
        else:
            wins = "none is on the loader's search path: each loads through the RPATH of the package beside it"
            fixes.append(f"keep one {library}: uninstall the ROCm you do not use, or give each its own venv or container")
        problems.append(f"{len(copies)} copies of {library}: {listed}; {wins}")
    if not problems:
        found = ", ".join(c.path for c in snap.libraries)
        return Check("libraries", "ok", f"one copy of each ROCm runtime library: {found}", "", evidence)
    return Check("libraries", "warn", "; ".join(problems), "; ".join(fixes) + " — two HIP runtimes in one process "
                 "each open the GPU on their own (hipErrorNoDevice, crashes at exit)", evidence)


def _remove(copy: LibraryCopy) -> str:
    """How to get rid of one copy, by how it is found."""
    directory = copy.path.rsplit("/", 1)[0]
    if copy.where.startswith("wheel "):
        return f"pip uninstall {copy.where.split()[1]} (it brings {copy.path})"
    if copy.where == "LD_LIBRARY_PATH":
        return f"take {directory} off LD_LIBRARY_PATH"
    if copy.where.startswith("/etc/ld.so.conf"):
        return f"remove {directory} from {copy.where} and run ldconfig"
    return f"remove {copy.path} ({copy.where})"


# -- device payloads ----------------------------------------------------------------------------------------
def payload_targets(payload: DevicePayload, registry: Registry) -> tuple[str, ...]:
    """The targets a device payload carries: its own list, else its family's targets in the registry."""
    if payload.targets:
        return payload.targets
    family = next((f for f in registry.family_names() if f.lower() == payload.family.lower()), None)
    return registry.expand(family) if family else ()


def install_hint(target: str, facts: Facts) -> str:
    """What to install for ``target``: the advice's exact commands, else the wheel to look for."""
    commands = facts.install.get(target)
    if commands:
        return " and ".join(commands)
    families = [f for f in facts.registry.families_of(target) if f != target]
    return (f"the device payload for {target} (rocm-sdk-libraries-<family> of a family holding it: "
            f"{', '.join([target, *families])}; no matrix cell gives its exact command)")


def check_payloads(snap: HostSnapshot, facts: Facts) -> Check:
    gpus = [g for g in h.host_gpus(snap, facts.registry) if g.target]
    if not snap.payloads:
        return Check("device-payload", "skip", "no per-target device payload installed (rocm-sdk-libraries-*, rocm-sdk-device-*, "
                     "amd-torch-device-*)")
    carried = {p.name: payload_targets(p, facts.registry) for p in snap.payloads}
    evidence = tuple(f"{p.name} {p.version} in {p.site}: {', '.join(carried[p.name]) or 'no target known'}" for p in snap.payloads)
    if not gpus:
        return Check("device-payload", "skip", "no GPU to match the installed device payloads against", "", evidence)
    real = list(dict.fromkeys(g.target.name for g in gpus if g.target))
    missing = [t for t in real if not any(t in targets for targets in carried.values())]
    foreign = [p for p in snap.payloads if not set(carried[p.name]) & set(real)]
    shown = {p.name: f"{p.name} {p.version} (carries {', '.join(carried[p.name]) or 'no known target'})" for p in snap.payloads}
    if missing:
        names = "; ".join(shown[p.name] for p in foreign) or "; ".join(shown.values())
        return Check("device-payload", "fail", f"installed device payload is for other targets than this host's "
                     f"{', '.join(missing)}: {names}",
                     "; ".join(f"for {t} install {install_hint(t, facts)}" for t in missing)
                     + (f", then pip uninstall {' '.join(p.name for p in foreign)}" if foreign else ""), evidence)
    if foreign:
        return Check("device-payload", "warn", f"{'; '.join(shown[p.name] for p in foreign)}: code for no GPU on this host "
                     f"({', '.join(real)})", f"pip uninstall {' '.join(p.name for p in foreign)}", evidence)
    return Check("device-payload", "ok", f"device payload for {', '.join(real)} installed: "
                 f"{', '.join(p.name for p in snap.payloads)}", "", evidence)


# -- overrides ----------------------------------------------------------------------------------------------
def check_override(snap: HostSnapshot, facts: Facts) -> Check:
    reg = facts.registry
    found = h.overrides(snap, reg)
    if not found:
        return Check("override", "ok", f"{h.OVERRIDE_VAR} not set: every GPU runs code for its own target")
    explain = (f"{h.OVERRIDE_VAR} makes the runtime report another gfx target, so every library loads that target's "
               "code; it only works where the real ISA can execute it")
    evidence = [explain]
    bad = [o for o in found if o.kfd_version is None or o.target is None]
    for o in bad:
        why = "not major.minor.stepping within 63.255.255" if o.kfd_version is None else f"gfx_target_version {o.kfd_version} is no known target"
        evidence.append(f"{o.variable}={o.value}: {why}")
    if bad:
        o = bad[0]
        return Check("override", "fail", f"{o.variable}={o.value} is invalid: the runtime fails with HSA_STATUS_ERROR_INVALID_ISA "
                     "(\"The GPU node has an unrecognized id\")", f"unset {o.variable}", tuple(evidence))
    gpus = h.host_gpus(snap, reg)
    if not gpus:
        return Check("override", "warn", f"{', '.join(f'{o.variable}={o.value}' for o in found)} set but there is no GPU for it to act on",
                     f"unset {found[0].variable}", tuple(evidence))
    worst, lines, fixes = "ok", [], []
    node_ids = {g.node for g in gpus}
    for o in found:
        if o.node is not None and o.node not in node_ids:
            lines.append(f"{o.variable} names KFD node {o.node}, which is not a GPU here (GPU nodes: {sorted(node_ids)})")
            worst = worse(worst, "warn")
    for gpu in gpus:
        override = h.override_for(gpu.node, found)
        if override is None or override.target is None or gpu.target is None:
            continue
        real, spoof = gpu.target.name, override.target.name
        if real == spoof:
            lines.append(f"node {gpu.node}: {override.variable}={override.value} is {real} itself: it does nothing")
            fixes.append(f"unset {override.variable}")
            worst = worse(worst, "warn")
            continue
        generic = h.shared_generic(reg, real, spoof)
        if generic:
            lines.append(f"node {gpu.node}: {real} impersonates {spoof} via {override.variable}={override.value} (both {generic}: usually runs, "
                         f"but {spoof}-tuned kernels may be wrong or slow on {real})")
            worst = worse(worst, "warn")
        else:
            lines.append(f"node {gpu.node}: {real} impersonates {spoof} via {override.variable}={override.value}: incompatible ISA — expect "
                         "'invalid device function', hangs or GPU memory faults")
            worst = "fail"
        if facts.matrices and not _has_build(real, facts):  # never send anyone to a build that does not exist
            fixes.append(_no_build_fix(real, override, facts))
            continue
        masked = _masked_target(snap, facts, real, spoof)
        if masked:
            lines[-1] += f"; it masks a missing {real}: {masked}"
            worst = "fail"
            fixes.append(f"unset {override.variable} and install the build for {real}: {install_hint(real, facts)} "
                         f"({real}'s own value would be {gpu.target.override_version})")
            continue
        known = "see the advice" if facts.matrices else "if a release has one: no matrix was loaded to tell"
        fixes.append(f"unset {override.variable} and install the build for {real} ({known}; "
                     f"{real}'s own value would be {gpu.target.override_version})")
    evidence += lines
    if worst == "ok":
        return Check("override", "ok", "override set but does not apply to any GPU here", "", tuple(evidence))
    return Check("override", worst, lines[0] if len(lines) == 1 else "; ".join(lines[:2]), fixes[0] if fixes else f"unset {found[0].variable}",
                 tuple(evidence))


def _has_build(target: str, facts: Facts) -> bool:
    """Whether a loaded matrix has a cell for ``target`` itself."""
    return any(cell.gfx_target == target for item in facts.matrices for cell in item.matrix.cells)


def _no_build_fix(real: str, override: h.Override, facts: Facts) -> str:
    """The fix for an override on a target the matrices have no build for: the same-generation build's exact
    override, or that there is none — never "install the build for <real>"."""
    nearest = facts.nearest.get(real)
    releases = ", ".join(sorted({item.matrix.release.version for item in facts.matrices}))
    if nearest is None:
        return (f"there is no {real} build in {releases}, nor one of its ISA generation: unset {override.variable}; "
                f"no release here serves {real}")
    if not nearest.override:
        return f"unset {override.variable}: the {nearest.target} build runs on {real} without it (there is no {real} build in {releases})"
    wanted = nearest.override.split()
    if f"{override.variable}={override.value}" in wanted:
        return (f"there is no {real} build in {releases}: {override.variable}={override.value} runs the {nearest.target} build "
                f"(same {nearest.generic} ISA generation) — unsupported, keep it only for that build")
    return (f"there is no {real} build in {releases}; the nearest is {nearest.target} (same {nearest.generic} ISA generation): "
            f"set {nearest.override} instead — unsupported")


def _masked_target(snap: HostSnapshot, facts: Facts, real: str, spoof: str) -> str:
    """What the override hides: installed device code that has the impersonated target but not the real one."""
    payloads = [p for p in snap.payloads if spoof in payload_targets(p, facts.registry)]
    if payloads and not any(real in payload_targets(p, facts.registry) for p in snap.payloads):
        return f"no installed device payload carries {real}, only {spoof}'s ({', '.join(p.name for p in payloads)})"
    audits = [a for a in snap.audits if a.report is not None and (a.report.device_binaries or a.report.kpack_binaries)
              and a.report.coverage(spoof).covered and not a.report.coverage(real).covered]
    if audits:
        return f"{', '.join(a.name for a in audits)} carry {spoof} code and none for {real}"
    return ""


CHECKS: tuple[Callable[[HostSnapshot, Facts], Check], ...] = (
    check_gpus, check_driver, check_devices, check_access, check_rocm, check_wheels, check_device_code, check_override,
    check_libraries, check_payloads,
)


def exit_code(checks: list[Check]) -> int:
    statuses = {c.status for c in checks}
    return 2 if "fail" in statuses else 1 if "warn" in statuses else 0
