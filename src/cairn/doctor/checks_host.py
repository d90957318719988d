"""Checks of the host around the GPU: the C/C++ runtimes wheels load against, the HIP runtimes one process
maps, the kernel's boot line and minimum, and which GPUs a program sees on a host with an iGPU and a dGPU.

Same contract as ``cairn.doctor.checks``: pure functions snapshot + facts → one ``Check``.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from cairn.doctor import host as h
from cairn.doctor.checks import Check, Facts, worse
from cairn.doctor.read.abi import GLIBC_NEED, GLIBCXX_NEED, needed_versions, newest, version_key
from cairn.doctor.snapshot import Distribution, HostSnapshot
from cairn.model.targets import kernel_key

GPU_RUN = "docker run --device /dev/kfd --device /dev/dri --group-add video --group-add render"


# -- glibc and libstdc++ ----------------------------------------------------------------------------------------
def _measured(dist: Distribution) -> tuple[str, str]:
    """(newest GLIBC_, newest GLIBCXX_) version the wheel's own ELF files need (``.gnu.version_r``)."""
    glibc: list[str] = []
    glibcxx: list[str] = []
    for so in dist.shared_objects:
        glibc += needed_versions(Path(so), GLIBC_NEED)
        glibcxx += needed_versions(Path(so), GLIBCXX_NEED)
    return newest(glibc), newest(glibcxx)


def _image_hint(facts: Facts) -> str:
    """How to run the advised image on this GPU host ("" when the advice names no image)."""
    image = next((p.image for p in facts.picks if p.image), "")
    return f"use the image (`{GPU_RUN} {image}`) or " if image else "use a Cairn image of the release or "


def _advised(facts: Facts) -> list[tuple[str, str, h.WheelNeed]]:
    """(wheel name and version, cell id, need) for each wheel of each matrix cell the advice picks."""
    cells = {cell.id: cell for item in facts.matrices for cell in item.matrix.cells}
    out = []
    for pick in facts.picks:
        cell = cells.get(pick.cell_id)
        for wheel in cell.wheels if cell is not None else ():
            try:
                name, version, _build, tags = parse_wheel_filename(wheel.filename)
            except InvalidWheelFilename:
                continue
            need = h.wheel_need(tuple(str(t) for t in tags))
            if need is not None and not need.portable:
                out.append((f"{name} {version}", pick.cell_id, need))
    return out


def check_glibc(snap: HostSnapshot, facts: Facts) -> Check:
    """Installed and advised wheels against the host's glibc and libstdc++ (PEP 600 tags, auditwheel's policy)."""
    host_c = f"glibc {snap.glibc}" if snap.glibc else "glibc unknown"
    host_cxx = f"libstdc++ GLIBCXX_{snap.glibcxx}" if snap.glibcxx else "no libstdc++.so.6 found"
    evidence = [f"{host_c} ({snap.glibc_where or 'not found'})", f"{host_cxx}" + (f" ({snap.glibcxx_where})" if snap.glibcxx_where else "")]
    installed = [(f"{d.name} {d.version}", d, need) for d in snap.dists if (need := h.wheel_need(d.tags)) and not need.portable]
    advised = _advised(facts)
    if not installed and not advised:
        return Check("glibc", "ok" if snap.glibc else "skip", f"{host_c}, {host_cxx}; no installed or advised ROCm wheel to compare with", "", tuple(evidence))
    if not snap.glibc:
        return Check("glibc", "warn", "the host's glibc version could not be read: wheel tags not checked",
                     "run the doctor on the host itself (not a captured tree without lib*/libc.so.6)", tuple(evidence))
    status, problems, fixes = "ok", [], []
    for label, dist, need in installed:
        if not need.trusted:
            glibc, glibcxx = _measured(dist)
            evidence.append(f"{label}: tagged {need.tag} (claims every Linux); its libraries need "
                            f"GLIBC_{glibc or '?'}, GLIBCXX_{glibcxx or '?'} (measured)")
            if glibc and version_key(glibc) > version_key(snap.glibc):
                status = "fail"
                problems.append(f"glibc {snap.glibc} < {glibc} needed by {label} (tagged {need.tag}, which claims every Linux "
                                "and cannot be trusted: pip installed it here, it will not load)")
                fixes.append(f"{_image_hint(facts)}a host with glibc ≥ {glibc}")
            elif glibcxx and snap.glibcxx and version_key(glibcxx) > version_key(snap.glibcxx):
                status = "fail"
                problems.append(f"libstdc++ GLIBCXX_{snap.glibcxx} < GLIBCXX_{glibcxx} needed by {label} (tagged {need.tag})")
                fixes.append(f"{_image_hint(facts)}a host whose libstdc++ defines GLIBCXX_{glibcxx}")
            else:
                status = worse(status, "warn")
                problems.append(f"{label} is tagged {need.tag}: it claims every Linux and cannot be trusted (it loads here)")
                fixes.append("install the manylinux-tagged build of the release (see the advice)")
            continue
        evidence.append(f"{label}: {need.tag} (glibc ≥ {need.glibc}" + (f", GLIBCXX ≤ {need.glibcxx} by policy)" if need.glibcxx else ")"))
        status = worse(status, _compare(snap, facts, label, need, problems, fixes))
    for label, cell_id, need in advised:
        if not need.trusted:
            evidence.append(f"advised {label} ({cell_id}): tagged {need.tag}, claims every Linux and cannot be trusted")
            problems.append(f"the advised {label} is tagged {need.tag}: it claims every Linux and cannot be trusted")
            fixes.append(f"{_image_hint(facts)}check the wheel's glibc need before installing it")
            status = worse(status, "warn")
            continue
        evidence.append(f"advised {label} ({cell_id}): {need.tag}")
        status = worse(status, _compare(snap, facts, f"{label} (advised)", need, problems, fixes))
    if not problems:
        names = ", ".join(label for label, *_ in installed) or ", ".join(label for label, *_ in advised)
        return Check("glibc", "ok", f"{host_c} and {host_cxx} meet the tags of {names}", "", tuple(evidence))
    return Check("glibc", status, "; ".join(problems), "; ".join(dict.fromkeys(fixes)), tuple(evidence))


def _compare(snap: HostSnapshot, facts: Facts, label: str, need: h.WheelNeed, problems: list[str], fixes: list[str]) -> str:
    """A manylinux wheel against the host: "fail" below its glibc (pip refuses it, or it was forced in), "warn" when
    the host's libstdc++ is older than the policy lets the wheel use, else "ok"."""
    if version_key(need.glibc) > version_key(snap.glibc):
        problems.append(f"glibc {snap.glibc} < {need.glibc} required by {label}")
        fixes.append(f"{_image_hint(facts)}a host with glibc ≥ {need.glibc}")
        return "fail"
    if need.glibcxx and snap.glibcxx and version_key(need.glibcxx) > version_key(snap.glibcxx):
        problems.append(f"libstdc++ GLIBCXX_{snap.glibcxx} < GLIBCXX_{need.glibcxx} that {need.tag} lets {label} use: "
                        "its C++ libraries may not load")
        fixes.append(f"install a libstdc++ defining GLIBCXX_{need.glibcxx}{_runtime_for(need.glibcxx)}, or "
                     f"{_image_hint(facts).removesuffix(' or ')}")
        return "warn"
    return "ok"


_GCC_RUNTIME = {"3.4.29": "GCC 11", "3.4.30": "GCC 12", "3.4.32": "GCC 13", "3.4.33": "GCC 14"}  # the GCC that first ships it


def _runtime_for(glibcxx: str) -> str:
    gcc = _GCC_RUNTIME.get(glibcxx)
    return f" ({gcc} runtime)" if gcc else ""


# -- HIP runtimes in one process --------------------------------------------------------------------------------
_GRAFTED = re.compile(r"^libamdhip64-[0-9a-f]{8,}\.so")


def _owner(path: str, snap: HostSnapshot) -> str:
    dist = next((d for d in snap.dists if path in d.shared_objects), None)
    name = PurePosixPath(path).name
    grafted = " grafted" if _GRAFTED.match(name) else ""
    if dist:
        return f"{path} ({'the' if not grafted else 'a'}{grafted} copy in wheel {dist.name} {dist.version})"
    return f"{path} (host copy)"


def check_hip_process(snap: HostSnapshot, facts: Facts) -> Check:
    """Two HIP runtimes mapped by one process (a wheel's grafted copy beside the host's): each opens the GPU alone."""
    probe = snap.probe
    if probe is None:
        return Check("hip-process", "skip", "no process probe: no installed package carries shared objects, --no-probe, "
                     "or a captured tree without .cairn-doctor/maps.txt")
    evidence = [f"probe: {probe.where}", *(f"import failed: {f}" for f in probe.failed),
                *(f"mapped: {m}" for m in probe.maps)]
    imported = ", ".join(probe.imported) or "the captured process"
    if len(probe.maps) >= 2:
        listed = " and ".join(_owner(m, snap) for m in probe.maps)
        host_copies = [m for m in probe.maps if not any(m in d.shared_objects for d in snap.dists)]
        fix = "install every ROCm package from one Cairn release index so they share one HIP runtime, or use them in separate processes"
        if host_copies and snap.env.get("LD_LIBRARY_PATH"):
            fix += f"; take {PurePosixPath(host_copies[0]).parent} off LD_LIBRARY_PATH if it comes from there"
        return Check("hip-process", "fail", f"{len(probe.maps)} HIP runtimes mapped in one process after importing {imported}: {listed}",
                     fix + " — two runtimes in one process each open the GPU (hipErrorNoDevice, wrong device counts, crashes at exit)",
                     tuple(evidence))
    if probe.failed and not probe.imported and not probe.maps:
        return Check("hip-process", "warn", f"the probe could not import the installed packages: {probe.failed[0]}",
                     "see the wheels and glibc checks: a package that does not import cannot be used either", tuple(evidence))
    shown = f"one HIP runtime ({probe.maps[0]})" if probe.maps else "no HIP runtime"
    return Check("hip-process", "ok", f"{shown} mapped in one process after importing {imported}", "", tuple(evidence))


# -- boot line and kernel minimum -------------------------------------------------------------------------------
_HIDING = ("nomodeset", "amdgpu.modeset=0", "modprobe.blacklist=amdgpu", "amdgpu.blacklist=1")


def check_boot(snap: HostSnapshot, facts: Facts) -> Check:
    if not snap.cmdline:
        return Check("boot", "skip", "no kernel command line to read (/proc/cmdline)")
    hiding = [w for w in snap.cmdline if w in _HIDING or (w.startswith("modprobe.blacklist=") and "amdgpu" in w)]
    evidence = (f"/proc/cmdline: {' '.join(snap.cmdline)}",)
    if not hiding:
        return Check("boot", "ok", "the kernel command line does not keep amdgpu off the GPU", "", evidence)
    hidden = not snap.gpu_nodes
    what = ", ".join(hiding)
    summary = (f"the kernel was booted with {what}: amdgpu does not drive the GPU, so ROCm sees none"
               if hidden else f"the kernel was booted with {what}, yet the KFD shows GPUs: a later module load overrode it")
    fix = (f"remove {what} from GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, run sudo update-grub "
           "(Fedora/RHEL: sudo grub2-mkconfig -o /boot/grub2/grub.cfg) and reboot")
    return Check("boot", "fail" if hidden else "warn", summary, fix, evidence)


def check_kernel_minimum(snap: HostSnapshot, facts: Facts) -> Check:
    """The oldest kernel a GPU's target or family declares in manifests/targets.toml (``min_kernel``)."""
    gpus = [g for g in h.host_gpus(snap, facts.registry) if g.target]
    if not gpus:
        return Check("kernel-minimum", "skip", "no GPU whose kernel minimum to check")
    targets = list(dict.fromkeys(g.target.name for g in gpus if g.target))
    declared = {t: facts.registry.min_kernel(t) for t in targets}
    evidence = [f"{t}: " + (f"kernel ≥ {v} (declared for {by} in manifests/targets.toml)" if v else "no minimum declared")
                for t, (v, by) in declared.items()]
    if not snap.kernel:
        return Check("kernel-minimum", "skip", "kernel release unknown", "", tuple(evidence))
    evidence.insert(0, f"kernel {snap.kernel}")
    below = [(t, v) for t, (v, _by) in declared.items() if v and kernel_key(snap.kernel) < kernel_key(v)]
    if below:
        listed = "; ".join(f"{t} ({' / '.join(facts.registry.target(t).products)}) needs ≥ {v}" for t, v in below)
        newest = max((v for _t, v in below), key=kernel_key)
        return Check("kernel-minimum", "fail", f"kernel {snap.kernel} is too old: {listed}",
                     f"boot a kernel ≥ {newest} (your distribution's newer kernel or its backports)", tuple(evidence))
    met = [f"{t} ≥ {v}" for t, (v, _by) in declared.items() if v]
    return Check("kernel-minimum", "ok", f"kernel {snap.kernel} meets " + (", ".join(met) if met else "every declared minimum (none here)"),
                 "", tuple(evidence))


# -- iGPU beside a dGPU -----------------------------------------------------------------------------------------
def _indices(value: str, count: int) -> list[int] | None:
    """A ``*_VISIBLE_DEVICES`` value as indices into ``count`` devices; None when it uses UUIDs or is malformed."""
    out = []
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit():
            return None
        if int(part) < count:
            out.append(int(part))
        else:
            break  # ROCr and HIP stop at the first index that does not exist
    return out


def check_visible_devices(snap: HostSnapshot, facts: Facts) -> Check:
    """A host with an iGPU and a dGPU: which device index is which, and the line that hides the iGPU."""
    gpus = h.host_gpus(snap, facts.registry)
    kinds = [h.gpu_kind(g, facts.registry) for g in gpus]
    if "igpu" not in kinds or not any(k == "dgpu" for k in kinds):
        return Check("visible-devices", "skip", "not a host with an integrated and a discrete GPU")
    listing = [f"device {i}: {g.name} {kinds[i]} ({g.product}, KFD node {g.node})" for i, g in enumerate(gpus)]
    visible = list(range(len(gpus)))
    for variable in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):  # ROCr filters first, HIP indexes what is left
        if variable in snap.env:
            chosen = _indices(snap.env[variable], len(visible))
            if chosen is None:
                return Check("visible-devices", "ok", f"{variable}={snap.env[variable]} selects devices by UUID; not evaluated",
                             "", tuple(listing))
            visible = [visible[i] for i in chosen]
    discrete = [i for i, k in enumerate(kinds) if k == "dgpu"]
    line = f"export ROCR_VISIBLE_DEVICES={','.join(map(str, discrete))}"
    shown = "; ".join(listing)
    evidence = (*listing, f"visible to programs: {', '.join(map(str, visible)) or 'none'}")
    if any(kinds[i] == "igpu" for i in visible) and any(kinds[i] == "dgpu" for i in visible):
        return Check("visible-devices", "fail", f"the iGPU is visible beside the dGPU ({shown}): programs that use every "
                     "device (llama.cpp, multi-GPU torch) crash or segfault on the iGPU",
                     f"{line} (or HIP_VISIBLE_DEVICES={','.join(map(str, discrete))}) so only the dGPU is used", evidence)
    names = ", ".join(f"{i} ({gpus[i].name})" for i in visible) or "none"
    return Check("visible-devices", "ok", f"only device(s) {names} visible ({shown})", "", evidence)


HOST_CHECKS = (check_glibc, check_hip_process, check_boot, check_kernel_minimum, check_visible_devices)
