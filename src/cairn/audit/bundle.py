"""Walk the offload bundles of one ``.hip_fatbin`` section, by their headers, without scanning bytes.

Bundles start at 4096-aligned offsets with zero padding between (one per translation unit). A plain bundle
is ``__CLANG_OFFLOAD_BUNDLE__`` + entry table + code objects; its end is the furthest entry end. A
compressed bundle (``CCOB`` v1/v2/v3, zlib or zstd) wraps a whole plain bundle; v2/v3 store their total
size, v1 ends where its compressed stream ends. Every offset and size is checked against what is really
there; anything that does not add up raises ``CorruptBundle`` naming the file offset — never a guess.

Cost grows with the number of bundles, not the section size: plain bundles are read at their table and at
the 64-byte ELF header of each code object. Compressed bundles must be inflated to check their hash; that
is streamed in 1 MiB pieces, keeping only the table and the ELF headers.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import zstandard

from cairn.audit.model import Bundle, CodeObject, Entry
from cairn.errors import InputError
from cairn.model.targets import TargetId

PAGE = 4096
PLAIN_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224
ELF_HEADER = 64
ENTRY_RECORD = 24  # offset, size, id_len (u64 each), then the id
MAX_ID = 1024  # longer IDs are corruption, not targets
MAX_TABLE_PREFIX = 16 << 20  # how much inflated output may precede a complete entry table
CHUNK = 1 << 20
METHODS = {0: "zlib", 1: "zstd"}
CCOB_LAYOUT = {  # version -> (header size, struct of the fields after magic/version/method)
    1: (20, "<IQ"),  # uncompressed size, hash
    2: (24, "<IIQ"),  # total size, uncompressed size, hash
    3: (32, "<QQQ"),
}
_FEATURE_BITS = {0x000: "unsupported", 0x100: "any", 0x200: "off", 0x300: "on"}

MachNamer = Callable[[int], "str | None"]


class CorruptBundle(InputError):
    """A ``.hip_fatbin`` section that cannot be read as written (truncated, bad magic, bad sizes)."""


class _Bad(Exception):
    """Internal: something wrong at ``offset`` (relative to whatever is being parsed)."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(what)
        self.offset = offset
        self.what = what


class _Short(_Bad):
    """Internal: the data ends before ``what`` does (maybe more inflated output would fix it)."""


@dataclass(frozen=True)
class _RawEntry:
    offset: int
    size: int
    id: str


def read_bundles(
    data: memoryview,
    section_offset: int,
    section_size: int,
    *,
    path: str,
    mach_name: MachNamer,
    release: Callable[[int, int], None] | None = None,
) -> tuple[Bundle, ...]:
    """Every bundle of the section at ``data[section_offset : section_offset + section_size]``.

    ``release(start, end)`` is called with each bundle's file range once it is read, so a caller reading
    from a memory map can drop those pages and keep resident memory to one bundle's worth.
    """
    section = data[section_offset : section_offset + section_size]
    if len(section) < section_size:
        raise CorruptBundle(path, f".hip_fatbin at file offset {section_offset:#x} runs past the end of the file")
    bundles: list[Bundle] = []
    pos = 0
    while pos < section_size:
        head = bytes(section[pos : pos + len(PLAIN_MAGIC)])
        where = section_offset + pos
        try:
            if head.startswith(PLAIN_MAGIC):
                bundle, end = _plain(section, pos, len(bundles), mach_name)
            elif head.startswith(CCOB_MAGIC):
                bundle, end = _compressed(section, pos, len(bundles), mach_name)
            elif not head.strip(b"\0"):
                pos = _align(pos + 1)  # zero padding: bundles only start on page boundaries
                continue
            else:
                raise _Bad(0, f"no bundle magic (found {head[:8].hex(' ')}; expected __CLANG_OFFLOAD_BUNDLE__ or CCOB)")
        except _Bad as bad:
            raise CorruptBundle(
                path, f"bundle {len(bundles)} at file offset {where:#x} (.hip_fatbin+{pos:#x}): {bad.what}"
            ) from None
        bundles.append(_placed(bundle, pos, section_offset + pos))
        if release is not None:
            release(section_offset + pos, section_offset + end)
        pos = _align(end)
    return tuple(bundles)


def _align(value: int) -> int:
    return (value + PAGE - 1) // PAGE * PAGE


def _placed(bundle: Bundle, offset: int, file_offset: int) -> Bundle:
    return Bundle(
        bundle.index, offset, file_offset, bundle.size, bundle.format, bundle.compression,
        bundle.uncompressed_size, bundle.entries, bundle.crc32,
    )


# -- plain bundles --------------------------------------------------------------------------------------
def _plain(section: memoryview, pos: int, index: int, mach_name: MachNamer) -> tuple[Bundle, int]:
    """A ``__CLANG_OFFLOAD_BUNDLE__`` read in place; returns it and its section-relative end."""
    view = section[pos:]
    try:
        raw, table_end = _parse_table(view, len(view))
    except _Short as short:
        raise _Bad(short.offset, f"truncated: {short.what} runs past the end of .hip_fatbin") from None
    size = max([table_end, *(r.offset + r.size for r in raw)])
    entries = tuple(_entry(r, _header_in(view, r), mach_name) for r in raw)
    return Bundle(index, pos, 0, size, "plain", None, size, entries), pos + size


def _header_in(view: memoryview, raw: _RawEntry) -> Callable[[], bytes]:
    """Reads ``raw``'s ELF header out of ``view`` only when :func:`_entry` asks (host entries never do)."""
    return lambda: bytes(view[raw.offset : raw.offset + ELF_HEADER])


def _header_from(headers: dict[int, bytes], raw: _RawEntry) -> Callable[[], bytes]:
    """Looks ``raw``'s ELF header up among those kept while inflating (empty when none was kept)."""
    return lambda: headers.get(raw.offset, b"")


def _parse_table(data: memoryview | bytes | bytearray, limit: int) -> tuple[list[_RawEntry], int]:
    """The entry table of a plain bundle; every entry must lie inside ``limit`` bytes."""
    if len(data) < 32:
        raise _Short(0, "bundle header")
    if bytes(data[:24]) != PLAIN_MAGIC:
        raise _Bad(0, "inflated data is not a __CLANG_OFFLOAD_BUNDLE__")
    (count,) = struct.unpack_from("<Q", data, 24)
    if count == 0 or count > (limit - 32) // ENTRY_RECORD:
        raise _Bad(24, f"entry count {count} does not fit in {limit} bytes")
    pos = 32
    raw: list[_RawEntry] = []
    for number in range(count):
        if pos + ENTRY_RECORD > len(data):
            raise _Short(pos, f"entry {number} of {count}")
        offset, size, id_len = struct.unpack_from("<QQQ", data, pos)
        if not 0 < id_len <= MAX_ID:
            raise _Bad(pos + 16, f"entry {number}: ID length {id_len} is not plausible")
        if pos + ENTRY_RECORD + id_len > len(data):
            raise _Short(pos, f"entry {number} ID")
        try:
            entry_id = bytes(data[pos + ENTRY_RECORD : pos + ENTRY_RECORD + id_len]).decode("ascii")
        except UnicodeDecodeError:
            raise _Bad(pos + ENTRY_RECORD, f"entry {number}: ID is not ASCII") from None
        if not entry_id.isprintable():
            raise _Bad(pos + ENTRY_RECORD, f"entry {number}: ID {entry_id!r} has control characters")
        raw.append(_RawEntry(offset, size, entry_id))
        pos += ENTRY_RECORD + id_len
    for number, entry in enumerate(raw):
        if entry.offset + entry.size > limit:
            raise _Bad(32, f"entry {number} ({entry.id}) at +{entry.offset:#x} size {entry.size} ends past the bundle ({limit} bytes)")
        if entry.size and entry.offset < pos:
            raise _Bad(32, f"entry {number} ({entry.id}) at +{entry.offset:#x} overlaps the entry table")
    return raw, pos


# -- entries and code objects ---------------------------------------------------------------------------
def _entry(raw: _RawEntry, header: Callable[[], bytes], mach_name: MachNamer) -> Entry:
    kind, target = classify(raw.id)
    if kind != "device":
        return Entry(raw.id, kind, target, raw.offset, raw.size)
    if target is None:
        return Entry(raw.id, kind, None, raw.offset, raw.size, None, "the target ID does not parse")
    if raw.size < ELF_HEADER:
        return Entry(raw.id, kind, target, raw.offset, raw.size, None, f"code object of {raw.size} bytes is no ELF file")
    code_object, problem = decode_code_object(header(), mach_name)
    if problem is None and code_object is not None:
        problem = _disagreement(TargetId.parse(target), code_object)
    return Entry(raw.id, kind, target, raw.offset, raw.size, code_object, problem)


def classify(entry_id: str) -> tuple[str, str | None]:
    """``(kind, target ID)`` of a bundle entry ID; target IDs are everything after ``amdhsa--``.

    Generic names contain dashes (``gfx9-4-generic``), so the ID is never split on ``-``.
    """
    if entry_id.startswith("host-"):
        return "host", None
    head, sep, tail = entry_id.partition("-amdhsa-")
    if not sep:
        return "other", None
    kind = "spirv" if "spirv" in head else "device" if "amdgcn" in head else "other"
    target = tail.lstrip("-")
    try:
        TargetId.parse(target)
    except ValueError:
        return kind, None
    return kind, target


def decode_code_object(header: bytes, mach_name: MachNamer) -> tuple[CodeObject | None, str | None]:
    """Read an AMDGPU ELF header: ``(code object, None)`` or ``(None, why it is not one)``."""
    if len(header) < ELF_HEADER or header[:4] != ELF_MAGIC:
        return None, "code object is not an ELF file"
    if header[4] != 2 or header[5] != 1:
        return None, "code object is not a little-endian ELF64 file"
    (machine,) = struct.unpack_from("<H", header, 18)
    if machine != EM_AMDGPU:
        return None, f"code object e_machine is {machine}, not {EM_AMDGPU} (AMDGPU)"
    (flags,) = struct.unpack_from("<I", header, 48)
    abi = header[8]
    mach = flags & 0xFF
    if abi >= 2:  # code object v4+: two-bit feature settings
        xnack, sramecc = _FEATURE_BITS[flags & 0x300], _FEATURE_BITS[(flags & 0xC00) >> 2]
    else:  # v3: one bit each, on or off
        xnack = "on" if flags & 0x100 else "off"
        sramecc = "on" if flags & 0x200 else "off"
    return CodeObject(mach_name(mach), mach, xnack, sramecc, abi, flags >> 24), None


def _disagreement(target: TargetId, co: CodeObject) -> str | None:
    """How the ELF header contradicts the entry ID, or None when they agree."""
    if co.processor is None:
        return None  # a processor the registry does not list: nothing to compare against
    if co.processor != target.processor:
        return f"ELF header is for {co.processor} (EF_AMDGPU_MACH {co.mach:#x}), not {target.processor}"
    if co.abi_version < 2:
        return None
    for name in ("sramecc", "xnack"):
        pinned = target.feature(name)
        actual = getattr(co, name)
        if pinned is None and actual in ("on", "off"):
            return f"ELF header pins {name}{'+' if actual == 'on' else '-'} but the ID leaves it open"
        if pinned is not None and actual != ("on" if pinned else "off"):
            return f"ID says {name}{'+' if pinned else '-'} but the ELF header says {name} {actual}"
    return None


# -- compressed bundles ---------------------------------------------------------------------------------
def _compressed(section: memoryview, pos: int, index: int, mach_name: MachNamer) -> tuple[Bundle, int]:
    """A ``CCOB`` bundle: header checks, streamed inflation, table, ELF headers, MD5 prefix check."""
    view = section[pos:]
    if len(view) < 8:
        raise _Bad(0, "truncated CCOB header")
    version, method = struct.unpack_from("<HH", view, 4)
    if version not in CCOB_LAYOUT:
        raise _Bad(4, f"CCOB version {version} is not 1, 2 or 3")
    if method not in METHODS:
        raise _Bad(6, f"CCOB compression method {method} is neither 0 (zlib) nor 1 (zstd)")
    header_size, layout = CCOB_LAYOUT[version]
    if len(view) < header_size:
        raise _Bad(0, f"truncated CCOB v{version} header")
    fields = struct.unpack_from(layout, view, 8)
    total, usize, stored_hash = (None, *fields) if version == 1 else fields
    if total is not None and not header_size < total <= len(view):
        raise _Bad(8, f"CCOB total size {total} does not fit (header {header_size}, {len(view)} bytes left in the section)")
    stream = view[header_size:total] if total is not None else view[header_size:]
    if total is None and method == 1:  # v1 zstd: bound the stream by its frame, or the reader runs on
        stream = stream[: zstd_frame_size(stream, header_size)]
    raw, headers, inflated, digest, used = _inflate_bundle(METHODS[method], stream, usize, header_size)
    if inflated != usize:
        raise _Bad(header_size, f"inflates to {inflated} bytes, header says {usize}")
    if digest[:8] != struct.pack("<Q", stored_hash):
        raise _Bad(header_size - 8, "hash mismatch: MD5 of the inflated bundle does not match the CCOB header")
    size = total if total is not None else header_size + used
    entries = tuple(_entry(r, _header_from(headers, r), mach_name) for r in raw)
    crc = zlib.crc32(view[:size])
    return Bundle(index, pos, 0, size, f"ccob-v{version}", METHODS[method], usize, entries, crc), pos + size


def _inflate_bundle(
    method: str, stream: memoryview, usize: int, base: int
) -> tuple[list[_RawEntry], dict[int, bytes], int, bytes, int]:
    """Inflate in pieces: ``(table, ELF header per entry offset, inflated size, md5, compressed bytes used)``."""
    md5 = hashlib.md5()
    prefix: bytearray | None = bytearray()
    raw: list[_RawEntry] = []
    windows: dict[int, bytearray] = {}
    done = 0
    pieces, used = _pieces(method, stream, base)
    for piece in pieces:
        md5.update(piece)
        if prefix is not None:
            prefix += piece
            try:
                raw, _ = _parse_table(prefix, usize)
            except _Short as short:
                if len(prefix) >= min(usize, MAX_TABLE_PREFIX):
                    raise _Bad(base, f"inflated bundle truncated: {short.what} missing") from None
                done += len(piece)
                continue
            except _Bad as bad:
                raise _Bad(base, f"inflated bundle, byte +{bad.offset:#x}: {bad.what}") from None
            windows = {r.offset: bytearray() for r in raw if r.size >= ELF_HEADER}
            piece, start, prefix = bytes(prefix), 0, None
        else:
            start = done
        _capture(windows, piece, start)
        done = start + len(piece)
        if done > usize:
            raise _Bad(base, f"inflates to more than the {usize} bytes the header states")
    if prefix is not None:
        raise _Bad(base, f"inflated bundle truncated after {len(prefix)} bytes (header says {usize})")
    return raw, {k: bytes(v) for k, v in windows.items()}, done, md5.digest(), used()


def _capture(windows: dict[int, bytearray], piece: bytes, start: int) -> None:
    """Copy into each 64-byte ELF header window the part of it that lies in ``piece``."""
    end = start + len(piece)
    for offset, window in windows.items():
        lo = offset + len(window)
        if len(window) < ELF_HEADER and offset <= lo < end:
            window += piece[lo - start : min(end, offset + ELF_HEADER) - start]


def _pieces(method: str, stream: memoryview, base: int) -> tuple[Generator[bytes, None, None], Callable[[], int]]:
    """Inflated output in pieces of at most CHUNK bytes, and a function giving the compressed size used."""
    if method == "zlib":
        state = {"used": 0}

        def inflate_zlib() -> Generator[bytes, None, None]:
            inflater = zlib.decompressobj()
            fed = 0
            pending = b""
            while not inflater.eof:
                if not pending:
                    if fed >= len(stream):
                        raise _Bad(base, "zlib stream truncated")
                    pending = bytes(stream[fed : fed + CHUNK])
                    fed += len(pending)
                try:
                    out = inflater.decompress(pending, CHUNK)
                except zlib.error as exc:
                    raise _Bad(base, f"zlib stream corrupt ({exc})") from None
                pending = inflater.unconsumed_tail
                if out:
                    yield out
            state["used"] = fed - len(inflater.unused_data) - len(pending)

        return inflate_zlib(), lambda: state["used"]

    def inflate_zstd() -> Generator[bytes, None, None]:
        reader = zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(stream, read_size=CHUNK)
        try:
            while out := reader.read(CHUNK):
                yield out
        except zstandard.ZstdError as exc:
            raise _Bad(base, f"zstd stream corrupt ({exc})") from None

    return inflate_zstd(), lambda: len(stream)


def zstd_frame_size(buf: memoryview | bytes, base: int = 0) -> int:
    """Compressed size of the zstd frame at ``buf[0]``, from its block headers (CCOB v1 stores none)."""
    if len(buf) < 6 or bytes(buf[:4]) != b"\x28\xb5\x2f\xfd":
        raise _Bad(base, "not a zstd frame")
    descriptor = buf[4]
    single_segment = (descriptor >> 5) & 1
    content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3] + content_size_bytes
    while True:
        if pos + 3 > len(buf):
            raise _Bad(base + pos, "zstd frame truncated")
        block = int.from_bytes(bytes(buf[pos : pos + 3]), "little")
        kind, size = (block >> 1) & 3, block >> 3
        if kind == 3:
            raise _Bad(base + pos, "zstd frame has a reserved block type")
        pos += 3 + (1 if kind == 1 else size)
        if block & 1:
            break
    return pos + (4 if descriptor & 4 else 0)


# -- whole bundles, for rewriting ------------------------------------------------------------------------
def entry_bytes(region: memoryview | bytes, bundle: Bundle, wanted: Sequence[Entry], path: str) -> list[bytes]:
    """The code objects of ``wanted`` (entries of ``bundle``), read from ``region`` (the bundle's ``bundle.size``
    bytes). A CCOB bundle is inflated in pieces and only the wanted ranges are kept — a split keeps one target of
    fourteen, so holding the whole inflated bundle (a GB for rocBLAS) would be copying for nothing.

    The bytes kept must be the bytes audited. When the audit recorded the CRC-32 of the stored bytes, that is
    checked before inflating (far cheaper than hashing what it inflates to); otherwise the inflated size and MD5
    prefix are checked again as ``read_bundles`` did (an MD5 over every inflated byte)."""
    with memoryview(region) as view:  # released on the way out, error or not: the caller's mmap must close
        if bundle.format == "plain":
            return [bytes(view[e.offset : e.offset + e.size]) for e in wanted]
        if bundle.crc32 is not None and zlib.crc32(view[: bundle.size]) != bundle.crc32:
            raise CorruptBundle(path, f"{bundle.label}: the stored bundle changed since it was audited (CRC-32 differs)")
        version = int(bundle.format.removeprefix("ccob-v"))
        header_size, layout = CCOB_LAYOUT[version]
        (method,) = struct.unpack_from("<H", view, 6)
        stored_hash = struct.unpack_from(layout, view, 8)[-1]
        with view[header_size : bundle.size] as stream:
            kept, inflated, digest = _keep(wanted, stream, METHODS[method], header_size, path, bundle,
                                           check_md5=bundle.crc32 is None)
    if inflated != bundle.uncompressed_size or (digest is not None and digest[:8] != struct.pack("<Q", stored_hash)):
        raise CorruptBundle(path, f"{bundle.label}: inflated bundle changed since it was read (size or MD5 prefix differ)")
    return kept


def _keep(wanted: Sequence[Entry], stream: memoryview, method: str, base: int, path: str, bundle: Bundle, *,
          check_md5: bool) -> tuple[list[bytes], int, bytes | None]:
    """Inflate ``stream`` once: the wanted entries' bytes, the inflated size and (``check_md5``) its MD5."""
    pieces, _ = _pieces(method, stream, base)
    kept = [bytearray() for _ in wanted]
    md5 = hashlib.md5() if check_md5 else None
    done = 0
    try:
        for piece in pieces:
            if md5 is not None:
                md5.update(piece)
            end = done + len(piece)
            for entry, out in zip(wanted, kept, strict=True):
                lo, hi = max(entry.offset, done), min(entry.offset + entry.size, end)
                if lo < hi:
                    out += piece[lo - done : hi - done]
            done = end
    except _Bad as bad:
        raise CorruptBundle(path, f"{bundle.label}: {bad.what}") from None
    finally:
        pieces.close()  # the inflater holds the stream's buffer until its generator is closed
    return [bytes(out) for out in kept], done, md5.digest() if md5 is not None else None
