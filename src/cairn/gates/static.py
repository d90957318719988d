"""The static gate: what can be proved about an image without running it.

1. Coverage — every ELF with device code covers the image's gfx target in every bundle (the audit).
2. Linkage — every DT_NEEDED of every ELF resolves inside the image, the way ld.so would search:
   RUNPATH/RPATH (with $ORIGIN), the image's LD_LIBRARY_PATH, /etc/ld.so.conf.d, then the default dirs.
3. Wheels — every installed framework distribution built for ROCm names the image's ROCm version.
The reason of a failure names the first file at fault and how many more there are.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cairn.audit import AuditReport
from cairn.audit.imagefs import ImageFS, image_env
from cairn.audit.layers import image_scans
from cairn.audit.sources import image_audits
from cairn.formats.oci import read_image
from cairn.model.targets import load_registry

DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/lib", "/usr/lib")


LIBRARIES_ROOT = "_rocm_sdk_libraries/"


def coverage_check(report: AuditReport, target: str, partial: tuple[str, ...] = ()) -> tuple[bool, str, dict[str, Any]]:
    """Every device-code ELF of the image (``report``: its audit) covers ``target`` — except the release
    libraries in ``partial`` (paths under ``_rocm_sdk_libraries/``), which the libraries wheel's audit showed
    were built without its code: those make the image *partial* (named in the reason and evidence), any other
    gap fails."""
    coverage = report.coverage(target)
    evidence = {"elf_files": report.elf_files, "device_binaries": len(report.device_binaries),
                "targets_everywhere": list(report.targets_everywhere), "coverage": coverage.to_json(), "partial": []}
    if not report.device_binaries and not report.kpack_binaries:
        return True, f"no device code in {report.elf_files} ELF files: nothing to cover", evidence
    if coverage.covered:
        return True, coverage.message(), evidence
    known = [g for g in coverage.gaps if g.reason == "missing" and any(g.path.endswith(LIBRARIES_ROOT + p) for p in partial)]
    unknown = tuple(g for g in coverage.gaps if g not in known)
    if unknown:
        return False, replace(coverage, gaps=unknown).message(), evidence
    names = sorted(posixpath.basename(g.path) for g in known)
    evidence["partial"] = names
    covered = coverage.binaries - len(known)
    return True, (f"{target}: covered by {covered} of {coverage.binaries} binaries; partial — the release's "
                  f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} built without {target} code"), evidence


def _ld_conf_dirs(fs: ImageFS) -> list[str]:
    dirs: list[str] = []
    for path in sorted(fs.texts):
        for line in fs.texts[path].splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("/"):
                dirs.append(line)
    return dirs


def unresolved(fs: ImageFS, env: dict[str, str], paths: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(ELF path, DT_NEEDED) for each library no search path of the image provides — of every ELF file, or of
    ``paths`` only (the files a framework's wheels add, checked before its image is built)."""
    env_dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    system = [*_ld_conf_dirs(fs), *DEFAULT_DIRS]
    elves = fs.elf_files()
    wanted = sorted(elves) if paths is None else sorted(p for p in set(paths) if p in elves)
    problems = []
    for path in wanted:
        info = elves[path]
        origin = posixpath.dirname(path)
        runpath = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in info.runpath if d]
        for lib in info.needed:
            if "/" in lib:
                found = fs.exists(lib)
            else:
                found = any(fs.exists(posixpath.join(d, lib)) for d in (*runpath, *env_dirs, *system))
                # auditwheel's vendored libraries (scipy.libs/libgfortran-….so needs libquadmath-….so beside it,
                # with no RUNPATH): the extension that links them loads both, and ld.so matches the soname
                found = found or (origin.endswith(".libs") and fs.exists(posixpath.join(origin, lib)))
            if not found:
                problems.append((path, lib))
    return problems


def unresolved_needed(fs: ImageFS, env: dict[str, str]) -> list[str]:
    """``path needs lib: not found`` for each DT_NEEDED no search path of the image provides."""
    return [f"{path} needs {lib}: not found in the image" for path, lib in unresolved(fs, env)]


_ROCM_LOCAL = re.compile(r"rocm[._]?(\d+)[._](\d+)(?:[._](\d+))?")
_ROCM_NAME = re.compile(r"rocm[-_]?(\d+)")


def wheel_rocm_versions(fs: ImageFS) -> dict[str, str]:
    """dist-info name → the ROCm version its version's local segment (or its name) says it was built for."""
    found = {}
    # a layer may hold a .dist-info's files without an entry for the directory itself
    dist_infos = {p if p.endswith(".dist-info") else p[: p.index(".dist-info/") + len(".dist-info")]
                  for p in fs.nodes if p.endswith(".dist-info") or ".dist-info/" in p}
    for path in sorted(dist_infos):
        name = posixpath.basename(path)[: -len(".dist-info")]
        dist, _, version = name.partition("-")
        local = version.split("+", 1)[1] if "+" in version else ""
        match = _ROCM_LOCAL.search(local)
        if dist.lower().startswith("rocm_sdk"):  # the SDK wheels: their version is the SDK's
            found[name] = version.split(".dev")[0].split("rc")[0].split("a")[0]
        elif match:
            found[name] = ".".join(g for g in match.groups() if g)
        elif (match := _ROCM_NAME.search(dist.lower())):
            found[name] = match.group(1)
    return found


def wheel_mismatches(fs: ImageFS, rocm: str) -> list[str]:
    out = []
    for name, built_for in sorted(wheel_rocm_versions(fs).items()):
        if rocm.split(".")[: len(built_for.split("."))] != built_for.split("."):
            out.append(f"{name} is built for ROCm {built_for}, the image's SDK is {rocm}")
    return out


def static_gate(layout: Path, target: str, rocm: str, partial: tuple[str, ...] = (),
                cache: Path | None = None) -> tuple[str, str, dict[str, Any]]:
    """(status, reason, evidence) for the image in the OCI layout ``layout``; ``partial`` as in coverage_check.
    Each layer is read once, or not at all when ``cache`` (the store's ``layer-scans/``) holds its scan."""
    manifest, config, digest = read_image(layout)
    scans = image_scans(layout, manifest, cache)
    # files are named by the image's digest, not by the layout's path: that is in a store, and every machine's
    # store is somewhere else (a gate record naming it differs between shard jobs and one build)
    binaries, elf_files = image_audits(scans, f"image@{digest[:19]}:")
    covered, coverage_reason, evidence = coverage_check(AuditReport(tuple(binaries), elf_files, load_registry()), target, partial)
    fs = ImageFS.from_scans(scans)
    missing = unresolved_needed(fs, image_env(config))
    wheels = wheel_mismatches(fs, rocm)
    elf_count = len(fs.elf_files())
    evidence = {"coverage": evidence, "elf_files_checked": elf_count, "unresolved": missing[:50],
                "unresolved_count": len(missing), "wheels": wheel_rocm_versions(fs), "wheel_mismatches": wheels}
    failures = []
    if not covered:
        failures.append(coverage_reason)
    if missing:
        failures.append(missing[0] + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""))
    if wheels:
        failures.append(wheels[0] + (f" (+{len(wheels) - 1} more)" if len(wheels) > 1 else ""))
    if failures:
        return "failed", "; ".join(failures), evidence
    return "passed", f"{coverage_reason}; all DT_NEEDED of {elf_count} ELF files resolve; " \
                     f"{len(evidence['wheels'])} ROCm wheels match {rocm}", evidence
