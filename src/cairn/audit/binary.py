"""Audit one ELF file: find its device code through the section table, then walk the bundles.

The bundle magic also appears as plain data (libamdhip64 holds the string), so only ``.hip_fatbin`` is ever
parsed. A kpack-split binary (HIPK wrappers, ``.rocm_kpack_ref``, or a NOBITS ``.hip_fatbin``) is reported
as such: its device code lives in an external archive, which is different from having no targets.
The file is memory-mapped and only the pages holding headers are touched.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from cairn.audit.bundle import ELF_MAGIC, CorruptBundle, read_bundles
from cairn.audit.model import FATBIN, KPACK, NONE, BinaryAudit
from cairn.errors import InputError
from cairn.model.targets import Registry, load_registry

FATBIN_SECTION = ".hip_fatbin"
WRAPPER_SECTION = ".hipFatBinSegment"
KPACK_SECTION = ".rocm_kpack_ref"
WRAPPER_SIZE = 24
HIPF = b"FPIH"  # 0x48495046 little-endian: a classic wrapper
HIPK = b"HIPK"  # 0x4B504948 little-endian: a kpack wrapper


class NotElf(InputError):
    """A path given as a binary that is not an ELF file."""


@dataclass(frozen=True)
class _Section:
    offset: int
    size: int
    nobits: bool


def is_elf(path: Path) -> bool:
    """Cheap sniff used when walking trees and archives."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == ELF_MAGIC
    except OSError:
        return False


def audit_file(path: Path | str, *, display: str | None = None, registry: Registry | None = None) -> BinaryAudit:
    """The device code of one ELF file. Raises NotElf or CorruptBundle (both exit 2) for bad input."""
    path = Path(path)
    shown = display or str(path)
    registry = registry or load_registry()
    try:
        handle = open(path, "rb")  # noqa: SIM115 — closed by the with block below; open errors need their own message
    except OSError as exc:
        raise InputError(shown, f"cannot read: {exc.strerror}") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 64 or handle.read(4) != ELF_MAGIC:
            raise NotElf(shown, "not an ELF file", "give a shared library, executable, wheel, tarball, directory or OCI layout")
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return _audit_mapped(mapped, size, shown, registry)
        finally:
            with contextlib.suppress(BufferError):  # a view still held by an exception frame; GC closes it
                mapped.close()


def _audit_mapped(mapped: mmap.mmap, size: int, shown: str, registry: Registry) -> BinaryAudit:
    sections = _sections(mapped, size, shown)
    fatbin = sections.get(FATBIN_SECTION)
    wrapper_magics = _wrapper_magics(mapped, sections.get(WRAPPER_SECTION), shown)
    kpack_reasons = []
    if KPACK_SECTION in sections:
        kpack_reasons.append(f"has {KPACK_SECTION}")
    if HIPK in wrapper_magics:
        kpack_reasons.append(f"{wrapper_magics.count(HIPK)} HIPK wrapper(s) in {WRAPPER_SECTION}")
    if fatbin is not None and fatbin.nobits:
        kpack_reasons.append(f"{FATBIN_SECTION} is NOBITS")
    if kpack_reasons:
        note = "device code lives in an external kpack (" + "; ".join(kpack_reasons) + ")"
        return BinaryAudit(shown, KPACK, (), len(wrapper_magics), (note,))
    if fatbin is None or fatbin.size == 0:
        notes: tuple[str, ...] = (f"{len(wrapper_magics)} fat binary wrapper(s) but no {FATBIN_SECTION}",) if wrapper_magics else ()
        return BinaryAudit(shown, NONE, (), len(wrapper_magics), notes)
    with memoryview(mapped) as view:
        bundles = read_bundles(
            view, fatbin.offset, fatbin.size, path=shown, mach_name=registry.name_for_mach, release=_unmapper(mapped)
        )
    notes = ()
    if wrapper_magics and len(wrapper_magics) != len(bundles):
        notes = (f"{len(wrapper_magics)} wrappers in {WRAPPER_SECTION} but {len(bundles)} bundles",)
    if not bundles:
        notes += (f"{FATBIN_SECTION} holds only zero bytes",)
    return BinaryAudit(shown, FATBIN, bundles, len(wrapper_magics), notes, fatbin.offset + fatbin.size)


def _unmapper(mapped: mmap.mmap):
    """Drop the pages of a bundle already read: the kernel maps whole folios on a fault, so touching a few
    headers in each of 111 bundles would otherwise leave hundreds of MB resident (page cache keeps them)."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return None

    def release(start: int, end: int) -> None:
        first = start // mmap.PAGESIZE * mmap.PAGESIZE
        with contextlib.suppress(OSError, ValueError):
            mapped.madvise(mmap.MADV_DONTNEED, first, max(0, min(end, len(mapped)) - first))

    return release


def _sections(mapped: mmap.mmap, size: int, shown: str) -> dict[str, _Section]:
    """The three sections that matter, from pyelftools' reading of the section table."""
    try:
        elf = ELFFile(mapped)  # type: ignore[arg-type]  # pyelftools reads any seekable buffer; its hint says IO[bytes]
        found: dict[str, _Section] = {}
        for section in elf.iter_sections():
            if section.name in (FATBIN_SECTION, WRAPPER_SECTION, KPACK_SECTION):
                header = section.header
                found[section.name] = _Section(header.sh_offset, header.sh_size, header.sh_type == "SHT_NOBITS")
    except (ELFError, ValueError, KeyError, IndexError, OSError, AssertionError, UnicodeDecodeError) as exc:
        raise CorruptBundle(shown, f"unreadable ELF section table ({exc})") from None
    except Exception as exc:  # pyelftools raises construct errors of many kinds on damaged headers
        raise CorruptBundle(shown, f"unreadable ELF section table ({type(exc).__name__}: {exc})") from None
    for name, kept in found.items():
        if not kept.nobits and kept.offset + kept.size > size:
            raise CorruptBundle(
                shown, f"{name} at file offset {kept.offset:#x} with {kept.size} bytes runs past the end of the file ({size} bytes)"
            )
    return found


def _wrapper_magics(mapped: mmap.mmap, segment: _Section | None, shown: str) -> list[bytes]:
    """Magic of each ``__hip_fatbin_wrapper`` (24 bytes each); NOBITS or empty means none."""
    if segment is None or segment.nobits:
        return []
    return [bytes(mapped[segment.offset + at : segment.offset + at + 4]) for at in range(0, segment.size - WRAPPER_SIZE + 1, WRAPPER_SIZE)]
