"""Measure one unpacked component: audit its libraries, read per-target data files and the package label."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from cairn import proc
from cairn.audit import audit_paths
from cairn.audit.model import FATBIN
from cairn.coverage.model import ComponentCoverage, data_file_target

_DATA_SUFFIXES = (".hsaco", ".co", ".dat", ".kdb", ".fdb.txt", ".db")


def declared_targets(deb: Path | None, log: IO[str]) -> tuple[str, ...]:
    """The package's own ``X-Rocm-Gpu-Architecture`` control field (empty when it states none)."""
    if deb is None:
        return ()
    text = proc.run(["dpkg-deb", "-f", str(deb), "X-Rocm-Gpu-Architecture"], log=log, check=False).stdout
    return tuple(text.split())


def measure_component(component: str, package: str, tree: Path, deb: Path | None, log: IO[str]) -> ComponentCoverage:
    elf_report = audit_paths([tree])
    libraries = {}
    for binary in elf_report.binaries:
        if binary.kind == FATBIN and binary.bundles:
            shown = Path(binary.path)
            rel = shown.relative_to(tree).as_posix() if shown.is_absolute() and shown.is_relative_to(tree) else str(shown)
            libraries[rel] = binary.complete_targets
    data = sorted({t for p in tree.rglob("*") if p.is_file() and p.name.endswith(_DATA_SUFFIXES)
                   and "library" in p.parts and (t := data_file_target(p.name))})
    notes = tuple(f"{b.path}: {n}" for b in elf_report.binaries for n in b.notes)
    log.write(f"{component}: {len(libraries)} libraries with device code, data targets {data or '-'}\n")
    return ComponentCoverage(component=component, package=package, declared=declared_targets(deb, log),
                             libraries=libraries, data_targets=tuple(data), notes=notes)
