"""Split a fat ROCm library per GPU target: keep, in every bundle of ``.hip_fatbin``, the host entry and only
the device entries that run on one target; everything else in the file stays byte for byte.

Why in place: the HIP runtime finds each bundle through a ``__hip_fatbin_wrapper`` whose pointer is a
relocation into ``.hip_fatbin``, so a bundle may not move. Each rewritten bundle is written at its original
offset and zero-padded to its original size; the section, its address, the section and program headers
and every byte outside the rewritten bundles are unchanged, so the dynamic linker sees the same file.

Which entries stay: those ``Registry.can_run`` accepts for the target — the exact processor with
compatible xnack/sramecc settings (a bare ``gfx90a`` keeps both ``xnack+`` and ``xnack-``), a generic target
holding it (``gfx11-generic`` for gfx1151), and SPIR-V (it runs everywhere). Entries are chosen by their ID,
as the runtime chooses them. ``exact=True`` keeps only entries whose ID is one of the named code objects
(a compile of several families cut into each family's own code objects: ``gfx1151`` alone, not also the
``gfx11-generic`` another family's build asked for). A bundle left with no device entry keeps only its host entry: its translation
unit then has no code for the target, exactly as in the original, and the runtime reports that at the first
launch of one of its kernels ("No compatible code objects found" / ``hipErrorNoBinaryForGpu``).

Bundles keep their format: plain stays plain, CCOB keeps its version and method with a fresh size and MD5
hash. A bundle whose entries all stay is not rewritten at all. The result is read back with the audit's
parser and compared with what was meant before it replaces ``dest``; nothing half-written is left behind.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cairn.audit import compact
from cairn.audit.binary import audit_file
from cairn.audit.bundle import entry_bytes
from cairn.audit.bundle_write import alignment_of, write_like, write_plain
from cairn.audit.model import FATBIN, KPACK, BinaryAudit, Bundle, Entry
from cairn.audit.report import parse_device
from cairn.errors import CairnError, InputError
from cairn.model.targets import Registry, TargetId, load_registry

COMPACT = "compact"
IN_PLACE = "in-place"


@dataclass(frozen=True)
class BundleSplit:
    """What happened to one bundle."""

    index: int
    offset: int  # in .hip_fatbin, before
    format: str
    compression: str | None
    size_before: int  # bytes it occupies in the section (compressed for CCOB)
    size_after: int  # zero padding follows it; it may be larger (into the padding before the next bundle)
    uncompressed_before: int
    uncompressed_after: int
    kept: tuple[str, ...]  # entry IDs, host entry included
    dropped: tuple[str, ...]
    offset_after: int = -1  # in .hip_fatbin, after: packed when compacted, the same as ``offset`` in place

    @property
    def host_only(self) -> bool:
        return not any(not entry_id.startswith("host-") for entry_id in self.kept)

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "offset": self.offset,
            "offset_after": self.offset_after,
            "format": self.format,
            "compression": self.compression,
            "size_before": self.size_before,
            "size_after": self.size_after,
            "uncompressed_before": self.uncompressed_before,
            "uncompressed_after": self.uncompressed_after,
            "kept": list(self.kept),
            "dropped": list(self.dropped),
            "host_only": self.host_only,
        }


@dataclass(frozen=True)
class SplitReport:
    """One split file: targets and device-code bytes before and after."""

    source: str
    dest: str
    target: str
    file_size: int  # of dest
    targets_before: tuple[str, ...]
    targets_after: tuple[str, ...]
    bundles: tuple[BundleSplit, ...]
    seconds: float
    # the rewritten file's own audit, read back to check it: callers that record it need not read it again
    after: BinaryAudit = field(compare=False, repr=False)
    file_size_before: int = 0
    layout: str = COMPACT  # COMPACT: the removed bytes are gone from the file; IN_PLACE: zero-filled (layout_note: why)
    layout_note: str | None = None

    @property
    def device_bytes_before(self) -> int:
        return sum(b.size_before for b in self.bundles)

    @property
    def device_bytes_after(self) -> int:
        return sum(b.size_after for b in self.bundles)

    @property
    def host_only_bundles(self) -> tuple[int, ...]:
        return tuple(b.index for b in self.bundles if b.host_only)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dest": self.dest,
            "target": self.target,
            "file_size": self.file_size,
            "file_size_before": self.file_size_before,
            "layout": self.layout,
            "layout_note": self.layout_note,
            "targets_before": list(self.targets_before),
            "targets_after": list(self.targets_after),
            "device_bytes_before": self.device_bytes_before,
            "device_bytes_after": self.device_bytes_after,
            "uncompressed_before": sum(b.uncompressed_before for b in self.bundles),
            "uncompressed_after": sum(b.uncompressed_after for b in self.bundles),
            "host_only_bundles": list(self.host_only_bundles),
            "seconds": round(self.seconds, 3),
            "bundles": [b.to_json() for b in self.bundles],
        }


def parse_devices(target: str, registry: Registry) -> tuple[TargetId, ...]:
    """``gfx1100`` or a comma-separated set (``gfx1100,gfx1101,gfx1102``: a family's targets) as device IDs."""
    names = [t.strip() for t in target.split(",") if t.strip()]
    if not names:
        raise InputError("--target", "names no gfx target", "give one, e.g. --target gfx1100 (or a comma-separated set)")
    return tuple(dict.fromkeys(parse_device(name, registry) for name in names))


def devices_text(devices: tuple[TargetId, ...]) -> str:
    return ",".join(str(d) for d in devices)


def split_file(src: Path | str, dest: Path | str, target: str, *, registry: Registry | None = None,
               compacted: bool = True, exact: bool = False) -> SplitReport:
    """Write ``dest``: ``src`` with only the device code that runs on ``target`` (e.g. ``gfx1100``, or a set
    such as ``gfx1100,gfx1101``: then an entry stays when it runs on any of them).

    ``dest`` may be an existing directory (the file keeps its name there). Bad input raises InputError
    (NotElf, CorruptBundle, a kpack binary, no device code, an unknown target) before anything is written.
    ``compacted=False`` keeps the in-place, zero-filled layout (for comparison: bench/payload_bench.py);
    ``exact`` keeps only the code objects ``target`` names.
    """
    started = time.monotonic()
    registry = registry or load_registry()
    devices = parse_devices(target, registry)
    src = Path(src)
    audit = audit_file(src, registry=registry)
    report = split_audited(src, Path(dest), devices, audit, registry, compacted=compacted, exact=exact)
    return replace(report, seconds=time.monotonic() - started)


def split_audited(src: Path, dest: Path, devices: tuple[TargetId, ...], audit: BinaryAudit,
                  registry: Registry, *, display: str | None = None, compacted: bool = True,
                  exact: bool = False) -> SplitReport:
    """``split_file`` for a file already audited (``split_tree`` audits each ELF once to know its kind);
    ``seconds`` counts the rewrite and its check, not that first audit. The check's audit of the copy, named
    ``display`` (default: the destination path), is the report's ``after``.

    The file is compacted (``cairn.audit.compact``) unless ``compacted`` is False or its layout does not allow
    it; then the bundles are rewritten in place and zero-padded, and ``layout_note`` says why. ``exact``: keep
    only the entries built for one of ``devices`` as named, not every entry that runs on them."""
    started = time.monotonic()
    if audit.kind == KPACK:
        raise InputError(src, "kpack-split binary: its device code is in an external .kpack, not in .hip_fatbin",
                         "split the .kpack archives instead")
    if audit.kind != FATBIN or not audit.bundles:
        raise InputError(src, "has no .hip_fatbin device code to split", "copy it as it is")
    if dest.is_dir():
        dest = dest / src.name
    if dest.exists() and dest.resolve() == src.resolve():
        raise InputError(dest, "is the input file", "give --out a different path")
    plans = [(bundle, [e for e in bundle.entries if _runs(e, devices, registry, exact)]) for bundle in audit.bundles]
    tmp = dest.with_name(f".{dest.name}.cairn-split-{os.getpid()}")
    note: str | None = "not asked for (compacted=False)"
    try:
        results = None
        if compacted:
            try:
                results = _rewrite_compact(src, tmp, plans)
                note = None
            except compact.NotCompactable as why:
                note = str(why)
        if results is None:
            shutil.copyfile(src, tmp)
            results = _rewrite(src, tmp, plans, _slots(audit))
        shutil.copymode(src, tmp)
        after = audit_file(tmp, display=display or str(dest), registry=registry)
        _check(after, plans, results, src)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return SplitReport(str(src), str(dest), devices_text(devices), dest.stat().st_size, audit.targets, after.targets,
                       tuple(results), time.monotonic() - started, after, src.stat().st_size,
                       IN_PLACE if note else COMPACT, note)


def _rewrite_compact(src: Path, tmp: Path, plans: list[tuple[Bundle, list[Entry]]]) -> list[BundleSplit]:
    """Write ``tmp`` compacted: each bundle (rewritten when it loses entries) packed at the start of
    ``.hip_fatbin``, the removed bytes gone. Raises NotCompactable (``tmp`` then holds nothing useful)."""
    results: list[BundleSplit] = []
    with open(src, "rb") as source, mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        layout_plan = compact.plan(mapped, [bundle.offset for bundle, _ in plans])

        def bundles():
            for bundle, kept in plans:
                blob, usize = _new_bundle(mapped, bundle, kept, src)
                kept_ids = {id(e) for e in kept}
                results.append(BundleSplit(
                    bundle.index, bundle.offset, bundle.format, bundle.compression, bundle.size, len(blob),
                    bundle.uncompressed_size, usize, tuple(e.id for e in kept),
                    tuple(e.id for e in bundle.entries if id(e) not in kept_ids),
                ))
                yield blob

        with open(tmp, "w+b") as out:
            layout = compact.write(mapped, out, layout_plan, bundles())
        with contextlib.suppress(OSError):
            mapped.madvise(mmap.MADV_DONTNEED)
    return [replace(r, offset_after=new) for r, new in zip(results, layout.new_offsets, strict=True)]


def _new_bundle(mapped: mmap.mmap, bundle: Bundle, kept: list[Entry], src: Path) -> tuple[bytes, int]:
    """The bundle's bytes with only ``kept`` (its stored bytes when nothing is dropped), and its inflated size."""
    if len(kept) == len(bundle.entries):
        return bytes(mapped[bundle.file_offset : bundle.file_offset + bundle.size]), bundle.uncompressed_size
    with memoryview(mapped) as view:
        region = view[bundle.file_offset : bundle.file_offset + bundle.size]
        try:
            blobs = entry_bytes(region, bundle, kept, str(src))
        finally:
            region.release()
    new_plain = write_plain([(e.id, blob) for e, blob in zip(kept, blobs, strict=True)], alignment_of(bundle))
    return write_like(bundle, new_plain), len(new_plain)


def _slots(audit: BinaryAudit) -> dict[int, int]:
    """Bundle index → the bytes it may take: up to the next bundle, the last one up to the end of ``.hip_fatbin``.
    A split copy keeps its bundles where they were, zero-padded; cutting that copy again (a family's libraries
    to one target) may recompress a bundle a few bytes larger than the family's cut, and the padding the first
    cut left behind it takes them (the runtime reads a bundle's size from its own header)."""
    ordered = sorted(audit.bundles, key=lambda b: b.file_offset)
    limits = [b.file_offset for b in ordered[1:]] + [audit.fatbin_end]
    return {b.index: max(limit - b.file_offset, b.size) for b, limit in zip(ordered, limits, strict=True)}


def _runs(entry: Entry, devices: tuple[TargetId, ...], registry: Registry, exact: bool = False) -> bool:
    """Keep host entries, and device/SPIR-V entries whose ID runs on one of ``devices`` (the runtime picks by ID);
    ``exact``: only those whose ID is one of ``devices``."""
    if entry.kind == "host":
        return True
    if entry.kind not in ("device", "spirv") or entry.target is None:
        return False
    code = TargetId.parse(entry.target)
    if exact:
        return code in devices
    return any(registry.can_run(code, device) is not None for device in devices)


def _rewrite(src: Path, tmp: Path, plans: list[tuple[Bundle, list[Entry]]], slots: dict[int, int]) -> list[BundleSplit]:
    """Overwrite each bundle that loses entries in ``tmp`` (a copy of ``src``), at its offset, zero-padded within
    its slot: the in-place layout."""
    results = []
    with open(src, "rb") as source, mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as mapped, \
            open(tmp, "r+b") as out:
        for bundle, kept in plans:
            size_after, usize_after = bundle.size, bundle.uncompressed_size
            if len(kept) != len(bundle.entries):
                new, usize = _new_bundle(mapped, bundle, kept, src)
                room = slots[bundle.index]
                if len(new) > room or any(mapped[bundle.file_offset + bundle.size : bundle.file_offset + len(new)]):
                    raise InputError(src, f"{bundle.label}: the rewritten bundle ({len(new)} bytes) does not fit in "
                                          f"the original's {bundle.size} bytes and the zero padding after them",
                                     "keep this file fat")
                out.seek(bundle.file_offset)
                out.write(new + bytes(max(bundle.size - len(new), 0)))
                size_after, usize_after = len(new), usize
            kept_ids = {id(e) for e in kept}
            results.append(BundleSplit(
                bundle.index, bundle.offset, bundle.format, bundle.compression, bundle.size, size_after,
                bundle.uncompressed_size, usize_after, tuple(e.id for e in kept),
                tuple(e.id for e in bundle.entries if id(e) not in kept_ids), bundle.offset,
            ))
        with contextlib.suppress(OSError):
            mapped.madvise(mmap.MADV_DONTNEED)  # the page cache keeps what a second split would want
    return results


def _check(after: BinaryAudit, plans: list[tuple[Bundle, list[Entry]]], results: list[BundleSplit], src: Path) -> None:
    """The audit's parser must read back exactly the bundles meant: same places, formats, kept IDs."""
    meant = [(r.offset_after, b.format, b.compression, tuple(e.id for e in kept))
             for (b, kept), r in zip(plans, results, strict=True)]
    found = [(b.offset, b.format, b.compression, tuple(e.id for e in b.entries)) for b in after.bundles]
    if meant != found:
        first = next((i for i, (m, f) in enumerate(zip(meant, found, strict=False)) if m != f), min(len(meant), len(found)))
        raise CairnError(f"{src}: internal error: the rewritten .hip_fatbin reads back differently at bundle {first} "
                         f"({len(found)} bundles read, {len(meant)} meant); nothing was written")
