"""The library API: audit paths into an ``AuditReport`` and ask it whether a target is covered.

Coverage uses the registry's compatibility rule (exact processor with compatible features, a generic
target holding the device, or SPIR-V) and is decided per bundle: a binary covers a target only when every
one of its bundles has a compatible entry, because each translation unit loads its own code object.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cairn.audit.binary import audit_file
from cairn.audit.image_ref import fetched, is_reference
from cairn.audit.model import FATBIN, KPACK, SCHEMA_VERSION, BinaryAudit, Bundle, BundleGap, Coverage, FileGap
from cairn.audit.sources import audit_source
from cairn.errors import InputError
from cairn.model.targets import Match, Registry, TargetId, load_registry

_VIA_RANK = {"exact": 0, "spirv": 2}  # generic names rank 1


@dataclass(frozen=True)
class AuditReport:
    """Every audited binary plus the number of ELF files looked at to find them."""

    binaries: tuple[BinaryAudit, ...]
    elf_files: int
    registry: Registry

    @property
    def device_binaries(self) -> tuple[BinaryAudit, ...]:
        return tuple(b for b in self.binaries if b.kind == FATBIN)

    @property
    def kpack_binaries(self) -> tuple[BinaryAudit, ...]:
        return tuple(b for b in self.binaries if b.kind == KPACK)

    @property
    def targets_everywhere(self) -> tuple[str, ...]:
        """Target IDs present in every bundle of every binary with device code."""
        binaries = self.device_binaries
        if not binaries:
            return ()
        common = set(binaries[0].complete_targets)
        for binary in binaries[1:]:
            common &= set(binary.complete_targets)
        return tuple(sorted(common))

    @property
    def targets_somewhere(self) -> tuple[str, ...]:
        """Target IDs present somewhere but missing from at least one bundle."""
        every = set(self.targets_everywhere)
        return tuple(sorted({t for b in self.device_binaries for t in b.targets} - every))

    def coverage(self, target: str | TargetId) -> Coverage:
        """Can every kernel of every audited binary launch on ``target`` (e.g. ``gfx1151``, ``gfx90a:xnack+``)?"""
        device = target if isinstance(target, TargetId) else parse_device(target, self.registry)
        via: set[str] = set()
        gaps: list[FileGap] = []
        for binary in self.device_binaries:
            missing = []
            for bundle in binary.bundles:
                match = bundle_match(bundle, device, self.registry)
                if match is None:
                    missing.append(BundleGap(bundle.index, bundle.offset))
                else:
                    via.add(match.via)
            if missing:
                gaps.append(FileGap(binary.path, tuple(missing), "missing"))
        gaps.extend(FileGap(b.path, (), "kpack") for b in self.kpack_binaries)
        checked = len(self.device_binaries)
        covered = checked > 0 and not gaps
        ordered = tuple(sorted(via, key=lambda v: (_VIA_RANK.get(v, 1), v)))
        return Coverage(str(device), covered, ordered, tuple(gaps), checked)

    def family_coverage(self, family: str) -> tuple[Coverage, ...]:
        """Coverage of each target of a family (a target name is a family of itself)."""
        try:
            members = self.registry.expand(family)
        except KeyError as exc:
            raise InputError("--family", str(exc.args[0])) from None
        return tuple(self.coverage(t) for t in members)

    def to_json(self, coverage: Iterable[Coverage] = ()) -> dict[str, Any]:
        """The documented ``cairn audit --json`` document (docs/audit.md)."""
        results = list(coverage)
        return {
            "schema": SCHEMA_VERSION,
            "elf_files": self.elf_files,
            "binaries": [b.to_json() for b in self.binaries],
            "summary": {
                "device_binaries": len(self.device_binaries),
                "kpack_binaries": len(self.kpack_binaries),
                "targets_everywhere": list(self.targets_everywhere),
                "targets_somewhere": list(self.targets_somewhere),
            },
            "coverage": [c.to_json() for c in results],
            "covered": all(c.covered for c in results),
        }


def parse_device(text: str, registry: Registry) -> TargetId:
    """A device target ID from the user, checked against the registry (InputError with a hint)."""
    try:
        return registry.parse_target_id(text)
    except ValueError as exc:
        what, _, fix = str(exc).partition(" — ")
        raise InputError("--target", what, fix) from None


def bundle_match(bundle: Bundle, device: TargetId, registry: Registry) -> Match | None:
    """The best entry of ``bundle`` for ``device``: exact before generic before SPIR-V."""
    best: Match | None = None
    for entry in bundle.entries:
        if not entry.usable or entry.target is None:
            continue
        match = registry.can_run(TargetId.parse(entry.target), device)
        if match and (best is None or _VIA_RANK.get(match.via, 1) < _VIA_RANK.get(best.via, 1)):
            best = match
    return best


def audit_paths(paths: Iterable[Path | str], *, registry: Registry | None = None) -> AuditReport:
    """Audit ELF files, directories, wheels, tarballs, .debs, OCI layouts and image references into one report.

    An image reference (``registry/name:tag``, ``docker-daemon:name:tag``; ``cairn.audit.image_ref``) is copied
    by skopeo into a temporary OCI layout and audited as one; its binaries read ``reference@sha256:…:/path``.
    """
    registry = registry or load_registry()
    binaries: list[BinaryAudit] = []
    elf_files = 0

    def one(path: Path, shown: str) -> BinaryAudit:
        return audit_file(path, display=shown, registry=registry)

    for path in paths:
        if isinstance(path, str) and is_reference(path):
            with fetched(path) as layout:  # skopeo copies the image to a temporary OCI layout
                try:
                    found, seen = audit_source(layout, one)
                except InputError as exc:
                    raise InputError(path, f"{exc.where}: {exc.what}".replace(str(layout), "image"), exc.fix) from None
            prefix = str(layout) + "@"  # the layout's temporary path never reaches the output
            found = [replace(b, path=path + "@" + b.path.removeprefix(prefix)) if b.path.startswith(prefix) else b
                     for b in found]
        else:
            found, seen = audit_source(Path(path), one)
        binaries.extend(found)
        elf_files += seen
    return AuditReport(tuple(binaries), elf_files, registry)
