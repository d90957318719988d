"""What an audit found, as frozen values every stage can read and serialise.

A binary holds bundles (one per translation unit); a bundle holds entries (one per target, plus the host
entry). Coverage is decided per bundle, because one translation unit without a target is enough for a
launch failure. ``to_json()`` is the stable format documented in docs/audit.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

# BinaryAudit.kind
FATBIN = "fatbin"  # device code in .hip_fatbin bundles
KPACK = "kpack"  # device code lives in an external .kpack archive
NONE = "none"  # an ELF file without device code


@dataclass(frozen=True)
class CodeObject:
    """What the AMDGPU ELF header of one entry says about itself."""

    processor: str | None  # name for EF_AMDGPU_MACH, None when the registry does not know the value
    mach: int
    xnack: str  # "unsupported", "any", "off", "on"
    sramecc: str
    abi_version: int
    generic_version: int

    def to_json(self) -> dict[str, Any]:
        return {
            "processor": self.processor,
            "mach": self.mach,
            "xnack": self.xnack,
            "sramecc": self.sramecc,
            "abi_version": self.abi_version,
            "generic_version": self.generic_version,
        }


@dataclass(frozen=True)
class Entry:
    """One bundle entry: its ID, where its code object sits, and whether the ID and the ELF agree."""

    id: str
    kind: str  # "host", "device" (amdgcn), "spirv", "other"
    target: str | None  # the target ID after "amdhsa--" for device and spirv entries
    offset: int  # of the code object, from the start of the (uncompressed) bundle
    size: int
    code_object: CodeObject | None = None
    mismatch: str | None = None  # set when the ELF header contradicts the ID; such entries cover nothing

    @property
    def usable(self) -> bool:
        """Counts for coverage: a device or SPIR-V entry whose ID parsed and whose ELF agrees."""
        return self.kind in ("device", "spirv") and self.target is not None and self.mismatch is None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "offset": self.offset,
            "size": self.size,
            "code_object": self.code_object.to_json() if self.code_object else None,
            "mismatch": self.mismatch,
        }


@dataclass(frozen=True)
class Bundle:
    """One translation unit's offload bundle inside ``.hip_fatbin``."""

    index: int
    offset: int  # from the start of the section
    file_offset: int  # from the start of the file
    size: int  # bytes it occupies in the section (compressed size for CCOB)
    format: str  # "plain", "ccob-v1", "ccob-v2", "ccob-v3"
    compression: str | None  # None, "zlib", "zstd"
    uncompressed_size: int
    entries: tuple[Entry, ...]
    # CRC-32 of a CCOB bundle's stored bytes as the audit read them (None when not known, e.g. read from JSON):
    # a split checks it before inflating again, where re-hashing the inflated GB with MD5 would cost seconds
    crc32: int | None = field(default=None, compare=False)

    @property
    def targets(self) -> tuple[str, ...]:
        """Target IDs of the usable entries, sorted."""
        return tuple(sorted({e.target for e in self.entries if e.usable and e.target}))

    @property
    def label(self) -> str:
        return f"bundle {self.index} at +{self.offset:#x}"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "offset": self.offset,
            "file_offset": self.file_offset,
            "size": self.size,
            "format": self.format,
            "compression": self.compression,
            "uncompressed_size": self.uncompressed_size,
            "targets": list(self.targets),
            "entries": [e.to_json() for e in self.entries],
        }


@dataclass(frozen=True)
class BinaryAudit:
    """One ELF file: its kind, its bundles and anything odd about it."""

    path: str  # as shown to the user; members of archives read "archive!member"
    kind: str  # FATBIN, KPACK or NONE
    bundles: tuple[Bundle, ...] = ()
    wrappers: int = 0  # __hip_fatbin_wrapper records in .hipFatBinSegment
    notes: tuple[str, ...] = ()
    fatbin_end: int = 0  # file offset just past .hip_fatbin: how far a split may let the last bundle grow

    @property
    def formats(self) -> tuple[str, ...]:
        """Distinct bundle formats, e.g. ``("ccob-v3+zstd",)`` or ``("plain",)``."""
        seen = {b.format + (f"+{b.compression}" if b.compression else "") for b in self.bundles}
        return tuple(sorted(seen))

    @property
    def targets(self) -> tuple[str, ...]:
        """Targets found in at least one bundle."""
        return tuple(sorted({t for b in self.bundles for t in b.targets}))

    @property
    def complete_targets(self) -> tuple[str, ...]:
        """Targets found in every bundle: the ones this binary can really launch everything on."""
        if not self.bundles:
            return ()
        common = set(self.bundles[0].targets)
        for bundle in self.bundles[1:]:
            common &= set(bundle.targets)
        return tuple(sorted(common))

    @property
    def mismatches(self) -> tuple[str, ...]:
        return tuple(
            f"{b.label}: entry {e.id}: {e.mismatch}" for b in self.bundles for e in b.entries if e.mismatch
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "wrappers": self.wrappers,
            "formats": list(self.formats),
            "targets": list(self.targets),
            "complete_targets": list(self.complete_targets),
            "notes": list(self.notes),
            "mismatches": list(self.mismatches),
            "bundles": [b.to_json() for b in self.bundles],
            "fatbin_end": self.fatbin_end,
        }


def audit_from_json(doc: dict[str, Any]) -> BinaryAudit:
    """The inverse of ``BinaryAudit.to_json`` (derived fields are recomputed, not read): how a cached layer
    scan (``cairn.audit.layers``) gives back the audits it holds."""

    def code_object(raw: dict[str, Any] | None) -> CodeObject | None:
        if raw is None:
            return None
        return CodeObject(raw["processor"], int(raw["mach"]), str(raw["xnack"]), str(raw["sramecc"]),
                          int(raw["abi_version"]), int(raw["generic_version"]))

    def entry(raw: dict[str, Any]) -> Entry:
        return Entry(str(raw["id"]), str(raw["kind"]), raw["target"], int(raw["offset"]), int(raw["size"]),
                     code_object(raw["code_object"]), raw["mismatch"])

    def bundle(raw: dict[str, Any]) -> Bundle:
        return Bundle(int(raw["index"]), int(raw["offset"]), int(raw["file_offset"]), int(raw["size"]), str(raw["format"]),
                      raw["compression"], int(raw["uncompressed_size"]), tuple(entry(e) for e in raw["entries"]))

    return BinaryAudit(str(doc["path"]), str(doc["kind"]), tuple(bundle(b) for b in doc["bundles"]), int(doc["wrappers"]),
                       tuple(str(n) for n in doc["notes"]), int(doc.get("fatbin_end", 0)))


@dataclass(frozen=True)
class BundleGap:
    """A bundle with no entry that runs the requested target."""

    index: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "offset": self.offset}


@dataclass(frozen=True)
class FileGap:
    """A binary that does not cover the requested target, and the bundles at fault."""

    path: str
    bundles: tuple[BundleGap, ...]
    reason: str  # "missing" (some bundle lacks it) or "kpack" (cannot be checked from the ELF alone)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "bundles": [b.to_json() for b in self.bundles]}


@dataclass(frozen=True)
class Coverage:
    """Whether every audited binary can launch every kernel on ``target``.

    ``via`` lists how the covering binaries match: "exact", a generic target name, or "spirv".
    A kpack binary counts as not covered: its code is elsewhere, so the ELF alone proves nothing.
    """

    target: str
    covered: bool
    via: tuple[str, ...]
    gaps: tuple[FileGap, ...]
    binaries: int  # binaries with device code that were checked

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "covered": self.covered,
            "via": list(self.via),
            "binaries": self.binaries,
            "gaps": [g.to_json() for g in self.gaps],
        }

    def message(self) -> str:
        """One line for a gate failure: which files, which bundles."""
        if self.covered:
            return f"{self.target}: covered by all {self.binaries} binaries (via {', '.join(self.via)})"
        parts = []
        for gap in self.gaps[:5]:
            if gap.reason == "kpack":
                parts.append(f"{gap.path} (device code in an external kpack; not checked)")
            else:
                where = ", ".join(f"#{b.index}@{b.offset:#x}" for b in gap.bundles[:6])
                more = f" +{len(gap.bundles) - 6} more" if len(gap.bundles) > 6 else ""
                parts.append(f"{gap.path} (bundles {where}{more})")
        more = f"; and {len(self.gaps) - 5} more files" if len(self.gaps) > 5 else ""
        return f"{self.target} is not covered: no compatible code object in " + "; ".join(parts) + more
