"""The one wheel writer: the same inputs give the same bytes, whatever the umask, mtimes or working dir.

What varies between naive builds, and what this writer fixes (see docs/wheels.md):

- member order: sorted by archive path, ``.dist-info`` last, ``RECORD`` the very last member;
- timestamps: every member gets ``SOURCE_DATE_EPOCH`` (floored at 1980-01-01, the ZIP epoch);
- permissions: 0644, or 0755 when the source is executable; ``create_system`` is always 3 (Unix);
- compression: deflate at level 6 for members under 16 MiB, level 1 above (GPU fat binaries are large and
  compress about as well at level 1, four times faster), on every core (``cairn.deflate``: the same bytes
  whatever the core count); the zlib version is part of every action key;
- metadata: Metadata 2.1 with a fixed field order, ``WHEEL`` with a fixed generator, ``RECORD`` in member
  order with urlsafe-base64 sha256 digests.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import os
import shutil
import stat
import struct
import time
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import IO, Any

from cairn.deflate import CHUNK, Deflater
from cairn.errors import CairnError
from cairn.model.wheel_versions import dist_name

LAYOUT = 2  # bump when this module changes what it writes (2: big members deflated by cairn.deflate)
GENERATOR = f"cairn-wheels {LAYOUT}"
ZIP_EPOCH = 315532800
BIG_MEMBER = 16 << 20
ZLIB_VERSION = zlib.ZLIB_RUNTIME_VERSION


@dataclass(frozen=True)
class Member:
    """One file of a wheel: its archive path and either a source file or literal bytes."""

    path: str
    source: Path | None = None
    data: bytes | None = None
    executable: bool = False

    @classmethod
    def file(cls, path: str, source: Path) -> Member:
        return cls(path, source=source, executable=bool(os.stat(source).st_mode & 0o111))

    @classmethod
    def text(cls, path: str, text: str, executable: bool = False) -> Member:
        return cls(path, data=text.encode(), executable=executable)


@dataclass(frozen=True)
class Metadata:
    """Static core metadata (Metadata 2.1); ``requires_dist`` and ``extras`` keep the order given."""

    name: str
    version: str
    summary: str = ""
    requires_dist: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    requires_python: str = ""
    license: str = ""
    home_page: str = ""
    description: str = ""
    extra_headers: tuple[tuple[str, str], ...] = field(default=())

    def render(self) -> str:
        lines = ["Metadata-Version: 2.1", f"Name: {self.name}", f"Version: {self.version}"]
        if self.summary:
            lines.append(f"Summary: {self.summary}")
        if self.home_page:
            lines.append(f"Home-page: {self.home_page}")
        if self.license:
            lines.append(f"License: {self.license}")
        if self.requires_python:
            lines.append(f"Requires-Python: {self.requires_python}")
        lines += [f"{key}: {value}" for key, value in self.extra_headers]
        lines += [f"Provides-Extra: {extra}" for extra in self.extras]
        lines += [f"Requires-Dist: {req}" for req in self.requires_dist]
        text = "\n".join(lines) + "\n"
        if self.description:
            text += "Description-Content-Type: text/markdown\n\n" + self.description.rstrip("\n") + "\n"
        return text


def wheel_filename(name: str, version: str, tag: str) -> str:
    return f"{dist_name(name)}-{version}-{tag}.whl"


def zip_time(source_date_epoch: int) -> tuple[int, int, int, int, int, int]:
    """The DOS timestamp of every member: SDE in UTC, never before 1980."""
    return time.gmtime(max(ZIP_EPOCH, int(source_date_epoch)))[:6]


def write_wheel(out_dir: Path, metadata: Metadata, tag: str, members: Iterable[Member], *, source_date_epoch: int,
                purelib: bool = False, extra_dist_info: Iterable[Member] = (), label: str = "") -> Path:
    """Write ``<name>-<version>-<tag>.whl`` into ``out_dir`` and return its path (atomically). ``label``: a
    PEP 825 variant wheel, ``<name>-<version>-<tag>-<label>.whl`` (its ``variant.json`` is in ``extra_dist_info``)."""
    name = _filename(metadata, tag, label)
    dist_info = _dist_info(metadata)
    payload = sorted(members, key=lambda m: m.path)
    paths = [m.path for m in payload]
    if len(set(paths)) != len(paths):
        dupes = sorted({p for p in paths if paths.count(p) > 1})
        raise CairnError(f"wheel {name}: duplicate members {', '.join(dupes[:5])}")
    if any(p.startswith(dist_info + "/") for p in paths):
        raise CairnError(f"wheel {name}: payload may not write into {dist_info}/")
    date_time = zip_time(source_date_epoch)
    with _writing(out_dir / name) as archive:
        record = [_add(archive, member, date_time) for member in payload]
        _finish(archive, record, metadata, tag, purelib, extra_dist_info, date_time)
    return out_dir / name


def write_twin(wheel: Path, out_dir: Path, metadata: Metadata, tag: str, *, source_date_epoch: int, label: str = "",
               purelib: bool = False, extra_dist_info: Iterable[Member] = ()) -> Path:
    """The wheel ``write_wheel`` would write for ``wheel``'s payload under other metadata (a device wheel's PEP 825
    variant twin), byte for byte, without inflating or deflating the payload again: each payload member's local
    record is copied as it is, and its RECORD line (sha256, size) is taken from ``wheel``'s RECORD."""
    name = _filename(metadata, tag, label)
    date_time = zip_time(source_date_epoch)
    with zipfile.ZipFile(wheel) as source, _writing(out_dir / name) as archive:
        own = dist_info_dir(source)
        hashes = {line.rsplit(",", 2)[0]: line for line in source.read(f"{own}/RECORD").decode().splitlines()}
        record = []
        for info in source.infolist():
            if info.filename.startswith(own + "/"):
                continue  # the payload comes first and the dist-info last, in write_wheel's order
            _copy_record(source, info, archive)
            record.append(hashes[info.filename])
        _finish(archive, record, metadata, tag, purelib, extra_dist_info, date_time)
    return out_dir / name


def _filename(metadata: Metadata, tag: str, label: str) -> str:
    name = wheel_filename(metadata.name, metadata.version, tag)
    return name.removesuffix(".whl") + f"-{label}.whl" if label else name


def _dist_info(metadata: Metadata) -> str:
    return f"{dist_name(metadata.name)}-{metadata.version}.dist-info"


@contextmanager
def _writing(final: Path) -> Iterator[zipfile.ZipFile]:
    """A ZIP archive written beside ``final`` and moved onto it only when complete."""
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.parent / f".{final.name}.partial"
    try:
        with open(partial, "wb") as raw, zipfile.ZipFile(raw, "w", allowZip64=True) as archive:
            yield archive
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, final)


def _finish(archive: zipfile.ZipFile, record: list[str], metadata: Metadata, tag: str, purelib: bool,
            extra_dist_info: Iterable[Member], date_time: tuple[int, ...]) -> None:
    """The ``.dist-info`` after the payload: METADATA, WHEEL, the extra files sorted, and RECORD the very last."""
    dist_info = _dist_info(metadata)
    wheel_text = (f"Wheel-Version: 1.0\nGenerator: {GENERATOR}\nRoot-Is-Purelib: {'true' if purelib else 'false'}\n"
                  + "".join(f"Tag: {t}\n" for t in expand_tag(tag)))
    meta = [
        Member.text(f"{dist_info}/METADATA", metadata.render()),
        Member.text(f"{dist_info}/WHEEL", wheel_text),
        *sorted((Member(f"{dist_info}/{m.path}", m.source, m.data, m.executable) for m in extra_dist_info),
                key=lambda m: m.path),
    ]
    record += [_add(archive, member, date_time) for member in meta]
    record.append(f"{dist_info}/RECORD,,")
    _add(archive, Member.text(f"{dist_info}/RECORD", "\n".join(record) + "\n"), date_time)


def _copy_record(source: zipfile.ZipFile, info: zipfile.ZipInfo, dest: zipfile.ZipFile) -> None:
    """Append one member to ``dest`` exactly as ``source`` stores it (local header, compressed bytes), and list it
    in ``dest``'s central directory. The writer never sets the data-descriptor flag (it writes to a seekable
    file), so the local record is the header and the compressed data alone."""
    if info.flag_bits & 0x08:
        raise CairnError(f"{source.filename}: {info.filename} has a data descriptor; write_twin copies only "
                         "wheels written by write_wheel")
    assert source.fp is not None and dest.fp is not None
    source.fp.seek(info.header_offset)
    header = source.fp.read(30)
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    copied = copy.copy(info)
    copied.header_offset = dest.fp.tell()
    dest.fp.write(header)
    remaining = name_length + extra_length + info.compress_size
    while remaining:
        chunk = source.fp.read(min(remaining, 1 << 20))
        if not chunk:
            raise CairnError(f"{source.filename}: {info.filename} is cut short — rebuild the wheel")
        dest.fp.write(chunk)
        remaining -= len(chunk)
    dest.filelist.append(copied)
    dest.NameToInfo[copied.filename] = copied
    dest.start_dir = dest.fp.tell()  # type: ignore[attr-defined]  # where the central directory will begin
    dest._didModify = True  # type: ignore[attr-defined]


def expand_tag(tag: str) -> list[str]:
    """``py3-none-any`` → one tag; compressed tag sets (``cp311.cp312-…``) → every combination."""
    python, abi, platform = tag.split("-")
    return [f"{p}-{a}-{pl}" for p in python.split(".") for a in abi.split(".") for pl in platform.split(".")]


def _add(archive: zipfile.ZipFile, member: Member, date_time: tuple[int, ...]) -> str:
    """Deflate one member into ``archive``; its RECORD line."""
    info = zipfile.ZipInfo(member.path, date_time=date_time)  # type: ignore[arg-type]
    info.create_system = 3
    info.external_attr = ((0o755 if member.executable else 0o644) | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    size = len(member.data) if member.data is not None else os.stat(member.source).st_size  # type: ignore[arg-type]
    digest = hashlib.sha256()
    source = io.BytesIO(member.data) if member.data is not None else open(member.source, "rb")  # type: ignore[arg-type]  # noqa: SIM115
    with source:
        if size >= BIG_MEMBER:
            _add_big(archive, info, source, size, digest)
        else:
            if hasattr(zipfile.ZipInfo, "compress_level"):
                info.compress_level = 6  # type: ignore[attr-defined]  # 3.13+
            else:
                info._compresslevel = 6  # type: ignore[attr-defined]  # 3.11/3.12 spelling
            with archive.open(info, "w") as dest:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    dest.write(chunk)
    return f"{member.path},sha256={base64.urlsafe_b64encode(digest.digest()).rstrip(b'=').decode()},{size}"


def _add_big(archive: zipfile.ZipFile, info: zipfile.ZipInfo, source: IO[bytes], size: int, digest: Any) -> None:
    """A member of ``BIG_MEMBER`` or more, deflated at level 1 on every core (``cairn.deflate``) straight into the
    archive, as ``ZipFile.open(…, "w")`` writes a member: the local header, the data, then the header again with
    the CRC and sizes (the file is seekable, so there is no data descriptor)."""
    assert archive.fp is not None
    zip64 = size * 1.05 > zipfile.ZIP64_LIMIT  # ZipFile's own rule: room for the sizes before they are known
    archive.fp.seek(archive.start_dir)  # type: ignore[attr-defined]
    info.header_offset = archive.fp.tell()
    info.CRC = info.compress_size = info.file_size = 0  # for now
    archive.fp.write(info.FileHeader(zip64))
    with Deflater(archive.fp, 1, gzip=False) as deflater:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            deflater.write(chunk)
    info.CRC, info.compress_size, info.file_size = deflater.crc, deflater.compressed, deflater.size
    archive.start_dir = archive.fp.tell()  # type: ignore[attr-defined]  # where the next member goes
    archive.fp.seek(info.header_offset)
    archive.fp.write(info.FileHeader(zip64))
    archive.fp.seek(archive.start_dir)  # type: ignore[attr-defined]
    archive.filelist.append(info)
    archive.NameToInfo[info.filename] = info
    archive._didModify = True  # type: ignore[attr-defined]


# -- reading ----------------------------------------------------------------------------------------------
def dist_info_dir(archive: zipfile.ZipFile, label: str = "") -> str:
    tops = {n.split("/", 1)[0] for n in archive.namelist() if n.split("/", 1)[0].endswith(".dist-info")}
    if len(tops) != 1:
        raise CairnError(f"{label or archive.filename}: expected one .dist-info directory, found {sorted(tops) or 'none'}"
                         " — rebuild the wheel")
    return tops.pop()


def read_dist_info(wheel: Path | bytes, rel: str, label: str = "") -> bytes:
    """One file of a wheel's ``.dist-info`` (``METADATA``, ``variant.json``), from a path or from bytes already
    read: the wheel index reads wheels on disk, publishing the bytes it has checked against the bundle, and both
    refuse a broken wheel with the same line."""
    label = _label(wheel, label)
    try:
        with zipfile.ZipFile(io.BytesIO(wheel) if isinstance(wheel, bytes) else wheel) as archive:
            return archive.read(f"{dist_info_dir(archive, label)}/{rel}")
    except KeyError:
        raise CairnError(f"{label}: no .dist-info/{rel} — not a complete wheel; rebuild it") from None
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        raise CairnError(f"{label}: cannot read the wheel ({exc}) — rebuild or re-download it") from None


def _label(wheel: Path | bytes, label: str) -> str:
    """How an error names the wheel: the caller's label, else its path."""
    return label or str(wheel if isinstance(wheel, Path) else "wheel")


def read_metadata_bytes(wheel: Path | bytes, label: str = "") -> bytes:
    """The exact METADATA bytes of a wheel: what a PEP 658 sidecar must serve."""
    return read_dist_info(wheel, "METADATA", label)


def read_metadata(wheel: Path) -> dict[str, list[str]]:
    """METADATA headers as name → values (multi-valued fields keep their order)."""
    try:
        text = read_metadata_bytes(wheel).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CairnError(f"{wheel}: METADATA is not UTF-8 ({exc.reason} at byte {exc.start}) — rebuild the wheel") from None
    message = HeaderParser().parsestr(text)
    result: dict[str, list[str]] = {}
    for key, value in message.items():
        result.setdefault(key, []).append(value)
    return result


def parse_filename(filename: str) -> tuple[str, str, str]:
    """``name_x-1.0-py3-none-any.whl`` → (``name_x``, ``1.0``, ``py3-none-any``); a build tag is kept in the tag."""
    stem = filename.removesuffix(".whl")
    parts = stem.split("-")
    if len(parts) not in (5, 6):
        raise CairnError(f"'{filename}' is not a wheel file name (name-version[-build]-python-abi-platform.whl)")
    return parts[0], parts[1], "-".join(parts[2:])


def repack(source: Path, out_dir: Path, *, source_date_epoch: int, version: str | None = None,
           metadata_edit: dict[str, str] | None = None, extra_requires: tuple[str, ...] = ()) -> Path:
    """Rewrite a backend-built wheel through ``write_wheel``: same files, normalized archive.

    ``version`` renames the distribution's version (dist-info directory, METADATA ``Version``, file name);
    ``metadata_edit`` replaces single-valued METADATA headers; ``extra_requires`` adds Requires-Dist lines.
    """
    name_part, old_version, tag = parse_filename(source.name)
    new_version = version or old_version
    with zipfile.ZipFile(source) as archive, _scratch(out_dir) as scratch:
        old_info = dist_info_dir(archive)
        members: list[Member] = []
        extra: list[Member] = []
        metadata_text = ""
        purelib = True
        for info in archive.infolist():
            if info.is_dir():
                continue
            data = archive.read(info)
            executable = bool((info.external_attr >> 16) & 0o111)
            if info.filename.startswith(old_info + "/"):
                rel = info.filename[len(old_info) + 1:]
                if rel == "METADATA":
                    metadata_text = data.decode("utf-8")
                elif rel == "WHEEL":
                    purelib = "Root-Is-Purelib: true" in data.decode()
                elif rel != "RECORD" and not rel.startswith("RECORD."):
                    extra.append(_spill(scratch, rel, data, executable, prefix="di"))
                continue
            if info.filename.startswith(f"{name_part}-{old_version}.data/"):
                new = info.filename.replace(f"{name_part}-{old_version}.data/", f"{name_part}-{new_version}.data/", 1)
                members.append(_spill(scratch, new, data, executable))
                continue
            members.append(_spill(scratch, info.filename, data, executable))
        headers = _edit_metadata(metadata_text, {"Version": new_version, **(metadata_edit or {})}, extra_requires)
        return _write_raw(out_dir, name_part, new_version, tag, headers, members, extra, source_date_epoch, purelib)


def _edit_metadata(text: str, changes: dict[str, str], requires: tuple[str, ...] = ()) -> str:
    head, sep, body = text.partition("\n\n")
    lines = head.splitlines() + [f"Requires-Dist: {r}" for r in requires]
    out: list[str] = []
    for line in lines:
        key = line.split(":", 1)[0]
        if key in changes and not line.startswith((" ", "\t")):
            out.append(f"{key}: {changes[key]}")
            continue
        out.append(line)
    return "\n".join(out) + "\n" + (sep[1:] + body if sep else "")


def _write_raw(out_dir: Path, name_part: str, version: str, tag: str, metadata_text: str, members: list[Member],
               extra: list[Member], source_date_epoch: int, purelib: bool) -> Path:
    """``write_wheel`` for an already rendered METADATA (repacking keeps upstream's own text)."""

    class _Rendered(Metadata):
        def render(self) -> str:  # keep upstream's METADATA as is, apart from the edits
            return metadata_text

    name = name_part
    meta = _Rendered(name=name, version=version)
    return write_wheel(out_dir, meta, tag, members, source_date_epoch=source_date_epoch, purelib=purelib,
                       extra_dist_info=extra)


class _scratch:
    """A temp directory next to ``out_dir`` for members spilled to disk while repacking."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / ".repack-scratch"

    def __enter__(self) -> Path:
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir()
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _spill(scratch: Path, arcname: str, data: bytes, executable: bool, prefix: str = "p") -> Member:
    if len(data) < (1 << 20):
        return Member(arcname, data=data, executable=executable)
    path = scratch / f"{prefix}-{hashlib.sha256(arcname.encode()).hexdigest()}"
    path.write_bytes(data)
    return Member(arcname, source=path, executable=executable)


def read_variant(wheel: Path | bytes, label: str = "") -> dict[str, Any]:
    """A variant wheel's ``.dist-info/variant.json`` (PEP 825)."""
    label = _label(wheel, label)
    data = read_dist_info(wheel, "variant.json", label)
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise CairnError(f"{label}: its variant.json is not JSON ({exc}) — rebuild it") from None
    if not isinstance(document, dict):
        raise CairnError(f"{label}: its variant.json is not a JSON object — rebuild it")
    return document
