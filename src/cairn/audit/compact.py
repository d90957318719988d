"""Lay a split library out without the removed bundles' bytes: the file shrinks, every address stays.

Why not zero-fill: a split keeps one target's code of a dozen, so a library rewritten in place is mostly
zero pages (gfx1100's librocsolver: 707 MB on disk, 87 % zeros). Why not move what follows ``.hip_fatbin``:
GNU ld puts ``.eh_frame_hdr``/``.eh_frame`` (and in C++ libraries ``.gcc_except_table``) behind it in the same
read-only segment, and those hold PC-relative references to ``.text``: moving their addresses means rewriting
unwind tables. Nothing needs to move in memory, only in the file.

The layout (docs/audit.md, "Compacted layout"):

* The kept bundles are packed at the start of ``.hip_fatbin``, each at the next 4096-aligned offset as the
  linker places them; the section's size becomes the end of the last one. Each ``__hip_fatbin_wrapper``
  pointer — the only reference to a bundle, an ``R_X86_64_RELATIVE`` addend in a shared library (a RELR
  entry's in-place value, or the in-place value of an executable) — is rewritten to its bundle's new address,
  as are ``__hip_fatbin`` symbols.
* The segment holding ``.hip_fatbin`` ends at the last kept bundle. What followed it in that segment gets a
  PT_LOAD of its own at its original address, so ``.eh_frame`` and the rest keep their addresses. That needs
  one more program header than the table at the file's start has room for, so the table moves behind the
  kept bundles, inside the shortened segment (PT_PHDR, when present, follows it).
* Every file byte behind the removed range moves down by a multiple of the largest alignment of the segments
  and sections that follow, so each keeps ``p_offset ≡ p_vaddr (mod p_align)``; their addresses, and so
  every relocation, symbol, dynamic entry and unwind table, are unchanged. Section and program headers name
  the new offsets.

Nothing here is guessed: a pointer into ``.hip_fatbin`` that is not a bundle's start, a section or segment
in the range to drop, a machine or ELF class this does not know — each makes ``plan`` return the reason, and
the caller keeps the in-place (zero-filled) layout and says why.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

PAGE = 4096
EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
PHDR = struct.Struct("<IIQQQQQQ")
SHDR = struct.Struct("<IIQQQQIIQQ")
SYM = struct.Struct("<IBBHQQ")
RELA = struct.Struct("<QQq")
DYN = struct.Struct("<qQ")
PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_PHDR = 1, 2, 3, 6
SHT_SYMTAB, SHT_NOBITS, SHT_DYNSYM = 2, 8, 11
SHF_ALLOC = 2
SHN_LORESERVE = 0xFF00
STT_SECTION = 3
DT_NULL, DT_PLTRELSZ, DT_RELA, DT_RELASZ, DT_RELAENT, DT_REL, DT_RELSZ, DT_JMPREL = 0, 2, 7, 8, 9, 17, 18, 23
DT_RELRSZ, DT_RELR = 35, 36
RELATIVE = {62: 8, 183: 1027}  # e_machine -> its R_*_RELATIVE: x86-64, AArch64
WRAPPER = 24


class NotCompactable(Exception):
    """Why this file keeps the in-place layout (one line, for the report)."""


@dataclass(frozen=True)
class _Seg:
    index: int
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int

    def pack(self) -> bytes:
        return PHDR.pack(self.type, self.flags, self.offset, self.vaddr, self.paddr, self.filesz, self.memsz, self.align)

    def holds_file(self, start: int, end: int) -> bool:
        return self.offset <= start and end <= self.offset + self.filesz


@dataclass
class _Sec:
    index: int
    name: str
    fields: list[int]  # SHDR fields, patched in place

    type = property(lambda self: self.fields[1])
    flags = property(lambda self: self.fields[2])
    addr = property(lambda self: self.fields[3])
    offset = property(lambda self: self.fields[4])
    size = property(lambda self: self.fields[5])
    align = property(lambda self: self.fields[8])


@dataclass
class Plan:
    """What ``write`` needs: new bundle offsets come later (``place``), everything else is known up front."""

    ehdr: list[int]
    segs: list[_Seg]
    secs: list[_Sec]
    fatbin: _Sec
    home: _Seg | None  # the PT_LOAD holding .hip_fatbin; None when it is not loaded (objcopy-added sections)
    next_vaddr: int | None  # first allocated address behind .hip_fatbin in ``home``
    bundle_offsets: tuple[int, ...]  # old section-relative offsets, in order
    pointers: list[tuple[str, int, int]] = field(default_factory=list)  # (kind, file offset, old value)
    symbols: list[tuple[int, int, int]] = field(default_factory=list)  # (file offset of the Sym, value, size)
    table_inside: bool = False  # the program header table already sits behind .hip_fatbin in ``home``


@dataclass(frozen=True)
class Layout:
    """The placed result: new offsets and sizes, and the byte ranges of the source to drop."""

    new_offsets: tuple[int, ...]
    new_size: int
    cut_start: int  # source file offset where the kept head (with the new phdr table) ends
    cut_end: int  # source file offset where the moved tail starts
    delta: int  # bytes the tail moves down
    table_offset: int | None  # new program header table (source-coordinate offset inside the head), or None
    phdrs: tuple[bytes, ...]
    junk: tuple[int, int] | None  # source range copied with the tail that must read as zeros


def plan(mapped: mmap.mmap | bytes, bundle_offsets: Iterable[int]) -> Plan:
    """Read the headers and every pointer into ``.hip_fatbin``; raise NotCompactable with the reason."""
    data = memoryview(mapped)
    try:
        return _plan(data, tuple(bundle_offsets))
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise NotCompactable(f"ELF headers do not read as ELF64 little-endian ({exc})") from None
    finally:
        data.release()


def _plan(data: memoryview, bundle_offsets: tuple[int, ...]) -> Plan:
    if bytes(data[:6]) != b"\x7fELF\x02\x01":
        raise NotCompactable("not an ELF64 little-endian file")
    ehdr = list(EHDR.unpack_from(data, 0))
    e_type, machine, phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx = (
        ehdr[1], ehdr[2], ehdr[5], ehdr[6], ehdr[9], ehdr[10], ehdr[11], ehdr[12], ehdr[13])
    if e_type not in (2, 3) or machine not in RELATIVE:
        raise NotCompactable(f"ELF type {e_type} / machine {machine}: only x86-64 and AArch64 executables and shared objects")
    if phentsize != PHDR.size or shentsize != SHDR.size or phnum in (0, 0xFFFF) or shnum == 0 or shstrndx >= SHN_LORESERVE:
        raise NotCompactable("unusual ELF header (extended numbering or entry sizes)")
    segs = [_Seg(i, *PHDR.unpack_from(data, phoff + i * PHDR.size)) for i in range(phnum)]
    raw = [list(SHDR.unpack_from(data, shoff + i * SHDR.size)) for i in range(shnum)]
    names = raw[shstrndx]
    secs = [_Sec(i, _cstr(data, names[4] + f[0]), f) for i, f in enumerate(raw)]
    fatbins = [s for s in secs if s.name == ".hip_fatbin"]
    if len(fatbins) != 1 or fatbins[0].type == SHT_NOBITS:
        raise NotCompactable("no single .hip_fatbin section with contents")
    fatbin = fatbins[0]
    loads = [s for s in segs if s.type == PT_LOAD]
    homes = [s for s in loads if s.filesz and s.holds_file(fatbin.offset, fatbin.offset + fatbin.size)]
    home = homes[0] if homes and fatbin.flags & SHF_ALLOC else None
    result = Plan(ehdr, segs, secs, fatbin, home, None, bundle_offsets)
    if home is None:
        if any(s.filesz and s.offset < fatbin.offset + fatbin.size and fatbin.offset < s.offset + s.filesz for s in segs):
            raise NotCompactable(".hip_fatbin straddles a segment")
        return result
    if fatbin.addr - home.vaddr != fatbin.offset - home.offset:
        raise NotCompactable(".hip_fatbin's address and file offset disagree with its segment")
    if home.memsz != home.filesz:
        raise NotCompactable("the segment of .hip_fatbin has zero-fill (bss) of its own")
    behind = [s for s in secs if s.flags & SHF_ALLOC and s.size and s is not fatbin
              and home.vaddr <= s.addr < home.vaddr + home.memsz and s.addr >= fatbin.addr]
    if any(s.addr < fatbin.addr + fatbin.size for s in behind):
        raise NotCompactable(f"{behind[0].name} overlaps .hip_fatbin")
    result.next_vaddr = min((s.addr for s in behind), default=None)
    result.table_inside = fatbin.offset < phoff < home.offset + home.filesz
    _find_pointers(data, result, machine)
    return result


def _cstr(data: memoryview, at: int) -> str:
    end = bytes(data[at : at + 4096]).find(b"\0")
    return bytes(data[at : at + max(end, 0)]).decode("ascii")


def file_offset(segs: list[_Seg], vaddr: int, size: int = 8) -> int | None:
    for s in segs:
        if s.type == PT_LOAD and s.vaddr <= vaddr and vaddr + size <= s.vaddr + s.filesz:
            return s.offset + vaddr - s.vaddr
    return None


def _find_pointers(data: memoryview, p: Plan, machine: int) -> None:
    """Every place that holds an address inside ``.hip_fatbin``: relocation addends (RELA), in-place values
    (RELR, and each wrapper's ``binary`` field), and symbols. Each must be a bundle start (or the section's
    start or end, for symbols), or the file is not compacted."""
    lo, hi = p.fatbin.addr, p.fatbin.addr + p.fatbin.size
    starts = {lo + off for off in p.bundle_offsets}
    inside = lambda value: lo <= value < hi  # noqa: E731
    dynamic = next((s for s in p.segs if s.type == PT_DYNAMIC), None)
    tags: dict[int, int] = {}
    if dynamic is not None:
        for at in range(dynamic.offset, dynamic.offset + dynamic.filesz - DYN.size + 1, DYN.size):
            tag, value = DYN.unpack_from(data, at)
            if tag == DT_NULL:
                break
            tags.setdefault(tag, value)
    if DT_REL in tags and tags.get(DT_RELSZ):
        raise NotCompactable("REL relocations (implicit addends) are not handled")
    covered: set[int] = set()
    for table, size in ((DT_RELA, DT_RELASZ), (DT_JMPREL, DT_PLTRELSZ)):
        if table not in tags or not tags.get(size):
            continue
        found = file_offset(p.segs, tags[table], tags[size])
        if found is None:
            raise NotCompactable("a relocation table lies outside the loaded segments")
        at = found
        for n, (r_offset, r_info, addend) in enumerate(RELA.iter_unpack(data[at : at + tags[size]])):
            if inside(addend):
                if r_info & 0xFFFFFFFF != RELATIVE[machine] or addend not in starts:
                    raise NotCompactable(f"relocation at {r_offset:#x} points into .hip_fatbin at +{addend - lo:#x}, not at a bundle")
                p.pointers.append(("addend", at + n * RELA.size + 16, addend))
                covered.add(r_offset)
    if tags.get(DT_RELRSZ):
        relr = file_offset(p.segs, tags[DT_RELR], tags[DT_RELRSZ])
        if relr is None:
            raise NotCompactable("the RELR table lies outside the loaded segments")
        for where in _relr(data[relr : relr + tags[DT_RELRSZ]]):
            _in_place(data, p, where, starts, inside, covered)
    wrappers = next((s for s in p.secs if s.name == ".hipFatBinSegment" and s.type != SHT_NOBITS), None)
    if wrappers is not None and wrappers.flags & SHF_ALLOC:
        for n in range(wrappers.size // WRAPPER):
            where = wrappers.addr + n * WRAPPER + 8
            if where not in covered:
                _in_place(data, p, where, starts, inside, covered)
    for sec in p.secs:
        if sec.type not in (SHT_SYMTAB, SHT_DYNSYM):
            continue
        for n, (_, info, _, shndx, value, size) in enumerate(SYM.iter_unpack(data[sec.offset : sec.offset + sec.size])):
            if shndx != p.fatbin.index or info & 0xF == STT_SECTION:
                continue
            if value not in starts and value != hi:
                raise NotCompactable(f"symbol {n} of {sec.name} points into .hip_fatbin at +{value - lo:#x}, not at a bundle")
            p.symbols.append((sec.offset + n * SYM.size, value, size))


def _in_place(data: memoryview, p: Plan, where: int, starts: set[int], inside, covered: set[int]) -> None:
    at = file_offset(p.segs, where)
    if at is None:
        return
    (value,) = struct.unpack_from("<Q", data, at)
    if inside(value):
        if value not in starts:
            raise NotCompactable(f"the pointer at {where:#x} points into .hip_fatbin at +{value - p.fatbin.addr:#x}, not at a bundle")
        p.pointers.append(("value", at, value))
        covered.add(where)


def _relr(table: memoryview) -> Iterator[int]:
    """The addresses a DT_RELR table relocates (an address, then bitmaps of the 63 words after it)."""
    base = 0
    for (entry,) in struct.iter_unpack("<Q", table):
        if entry & 1 == 0:
            yield entry
            base = entry + 8
        else:
            bits, at = entry >> 1, base
            while bits:
                if bits & 1:
                    yield at
                bits >>= 1
                at += 8
            base += 63 * 8


def place(p: Plan, new_sizes: list[int]) -> Layout:
    """Pack bundles of ``new_sizes`` and lay the file out; NotCompactable when nothing is gained or the kept
    bundles do not fit in front of what follows them."""
    offsets, cursor = [], 0
    for size in new_sizes:
        cursor = _up(cursor, PAGE)
        offsets.append(cursor)
        cursor += size
    new_size = cursor
    fat, home = p.fatbin, p.home
    phnum = p.ehdr[10]
    segs = list(p.segs)
    table = None
    junk = None
    if home is None:
        cut_start = fat.offset + new_size
        cut_end = fat.offset + fat.size
    else:
        split = p.next_vaddr is not None
        move_table = split or p.table_inside
        count = phnum + (1 if split else 0)
        end_v = fat.addr + new_size
        if move_table:
            table_v = _up(end_v, 8)
            table = fat.offset + table_v - fat.addr
            end_v = table_v + count * PHDR.size
        first = next(s for s in p.segs if s.type == PT_LOAD)
        if move_table and any(s.type == PT_INTERP for s in p.segs) and home.vaddr - home.offset != first.vaddr - first.offset:
            # kernels before 5.18 give a program AT_PHDR = first segment's bias + e_phoff
            raise NotCompactable("an executable whose program headers would move where old kernels do not find them")
        cut_start = home.offset + end_v - home.vaddr
        head = _Seg(home.index, home.type, home.flags, home.offset, home.vaddr, home.paddr, end_v - home.vaddr,
                    end_v - home.vaddr, home.align)
        segs[home.index] = head
        page = max(home.align, PAGE)
        if split:
            assert p.next_vaddr is not None
            tail_v = p.next_vaddr // page * page
            if _up(end_v, page) > tail_v:
                raise NotCompactable("the kept bundles leave no whole page free before the sections that follow them")
            cut_end = home.offset + tail_v - home.vaddr
            tail = _Seg(-1, PT_LOAD, home.flags, cut_end, tail_v, home.paddr + tail_v - home.vaddr,
                        home.offset + home.filesz - cut_end, home.vaddr + home.memsz - tail_v, home.align)
            segs.insert(segs.index(head) + 1, tail)
            junk = (cut_end, home.offset + p.next_vaddr - home.vaddr)
        else:
            cut_end = home.offset + home.filesz
    after_align = [s.align for s in segs if s.filesz and s.offset >= cut_end]
    after_align += [s.align for s in p.secs if s.type != SHT_NOBITS and s.size and s.offset >= cut_end]
    step = max([1, *after_align])
    step = max(step, PAGE) if home is not None else step
    delta = (cut_end - cut_start) // step * step
    if delta <= 0:
        raise NotCompactable("the removed bundles free less than one page")
    _no_strangers(p, cut_start, cut_end, table)
    for kind_at in [*(at for _, at, _ in p.pointers), *(at for at, _, _ in p.symbols)]:
        if fat.offset <= kind_at < cut_end:
            raise NotCompactable(f"a pointer into .hip_fatbin is stored at file offset {kind_at:#x}, inside the range to rewrite")
    phdrs = []
    for s in segs:
        if s.type == PT_PHDR and table is not None:
            assert home is not None
            vaddr = home.vaddr + table - home.offset
            size = len(segs) * PHDR.size
            s = _Seg(s.index, s.type, s.flags, table, vaddr, vaddr, size, size, s.align)
        elif s.offset >= cut_end:
            s = _Seg(s.index, s.type, s.flags, s.offset - delta, s.vaddr, s.paddr, s.filesz, s.memsz, s.align)
        phdrs.append(s.pack())
    return Layout(tuple(offsets), new_size, cut_start, cut_end, delta, table, tuple(phdrs), junk)


def _no_strangers(p: Plan, cut_start: int, cut_end: int, table: int | None) -> None:
    """Only .hip_fatbin (and a program header table about to be rewritten) may lie in the bytes dropped."""
    for s in p.secs:
        if s is p.fatbin or s.type == SHT_NOBITS or not s.size:
            continue
        if s.offset < cut_end and cut_start < s.offset + s.size:
            raise NotCompactable(f"section {s.name} lies in the range to drop")
    for g in p.segs:
        if (g.type == PT_PHDR and table is not None) or g is p.home or not g.filesz:
            continue
        if g.offset < cut_end and cut_start < g.offset + g.filesz:
            raise NotCompactable(f"program header {g.index} (type {g.type:#x}) covers the range to drop")
    phoff, phsize = p.ehdr[5], p.ehdr[10] * PHDR.size
    if table is None and phoff < cut_end and cut_start < phoff + phsize:
        raise NotCompactable("the program header table lies in the range to drop")


def moved(layout: Layout, offset: int) -> int:
    """Where a source file offset outside ``.hip_fatbin`` and the dropped range lands."""
    return offset - layout.delta if offset >= layout.cut_end else offset


def _up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


def patch(out, p: Plan, layout: Layout, new_sizes: list[int]) -> None:
    """Rewrite, in the written file ``out`` (opened r+b), every header and pointer ``p`` found."""
    fat = p.fatbin
    old_to_new = {fat.addr + old: fat.addr + new for old, new in zip(p.bundle_offsets, layout.new_offsets, strict=True)}
    size_of = {fat.addr + new: size for new, size in zip(layout.new_offsets, new_sizes, strict=True)}
    old_to_new[fat.addr + fat.size] = fat.addr + layout.new_size
    ehdr = list(p.ehdr)
    old_phoff = ehdr[5]
    if layout.table_offset is not None:
        ehdr[5] = layout.table_offset
        if old_phoff < fat.offset or old_phoff >= layout.cut_end:  # a table inside the rewritten range is gone already
            out.seek(moved(layout, old_phoff))
            out.write(bytes(p.ehdr[10] * PHDR.size))  # stale: no reader may take it for the real one
    else:
        ehdr[5] = moved(layout, old_phoff)
    ehdr[10] = len(layout.phdrs)
    ehdr[6] = moved(layout, ehdr[6])
    out.seek(0)
    out.write(EHDR.pack(*ehdr))
    out.seek(ehdr[5])
    out.write(b"".join(layout.phdrs))
    table = bytearray()
    for s in p.secs:
        fields = list(s.fields)
        if s is fat:
            fields[5] = layout.new_size
        elif fields[4] >= layout.cut_end:
            fields[4] -= layout.delta
        elif fields[4] > layout.cut_start:  # an empty or NOBITS section in the dropped range: where the range was
            fields[4] = layout.cut_start
        table += SHDR.pack(*fields)
    out.seek(ehdr[6])
    out.write(table)
    if p.home is None:
        return
    for kind, at, value in p.pointers:
        out.seek(moved(layout, at))
        out.write(struct.pack("<q" if kind == "addend" else "<Q", old_to_new[value]))
    for at, value, size in p.symbols:
        new = old_to_new[value]
        out.seek(moved(layout, at) + 8)
        out.write(struct.pack("<QQ", new, size_of.get(new, 0) if size else 0))


def write(mapped: mmap.mmap, out, p: Plan, bundles: Iterable[bytes]) -> Layout:
    """Write the compacted file to ``out`` (a new file opened w+b): the head up to ``.hip_fatbin``, then
    ``bundles`` (each bundle's bytes, in order) packed, then the moved tail; then patch the headers.
    NotCompactable (after a partial write: the caller discards ``out``) when the placed bundles do not fit."""
    fat = p.fatbin
    _copy(mapped, out, 0, fat.offset)
    sizes = []
    for blob in bundles:
        out.write(bytes(_up(out.tell() - fat.offset, PAGE) - (out.tell() - fat.offset)))
        out.write(blob)
        sizes.append(len(blob))
    layout = place(p, sizes)
    out.write(bytes(layout.cut_end - layout.delta - out.tell()))
    _copy(mapped, out, layout.cut_end, len(mapped))
    if layout.junk is not None:
        out.seek(layout.junk[0] - layout.delta)
        out.write(bytes(layout.junk[1] - layout.junk[0]))
    patch(out, p, layout, sizes)
    return layout


def _copy(mapped: mmap.mmap, out, start: int, end: int, chunk: int = 8 << 20) -> None:
    for at in range(start, end, chunk):
        out.write(mapped[at : min(at + chunk, end)])
