"""Turn a path the user gave into the ELF files inside it: file, directory, wheel, tarball, .deb, OCI image.

Archives are never loaded into memory: members are sniffed for the ELF magic and only ELF members are
copied, one at a time, to a temporary file that is audited and removed. In an OCI image the layers are
applied in order (a later layer replaces a file, ``.wh.`` whiteouts delete it), so the answer describes the
filesystem a container sees. Paths inside archives read ``archive!member``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:

    from cairn.audit.layers import Auditor, LayerScan

import zipfile
import zlib

from cairn.audit.archives import COMPRESSED, decompressed, layer_blob, tar_members
from cairn.audit.binary import is_elf
from cairn.audit.bundle import ELF_MAGIC
from cairn.audit.model import BinaryAudit
from cairn.errors import InputError

AR_MAGIC = b"!<arch>\n"
def audit_source(path: Path, audit: Auditor, *, explicit: bool = True) -> tuple[list[BinaryAudit], int]:
    """Audits of every ELF file under ``path`` and how many ELF files were looked at.

    ``explicit``: the path itself was named by the user, so an ELF file without device code is still
    reported (inside trees and archives only binaries with device code are listed).
    """
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_dir():
        if (path / "index.json").is_file() and (path / "oci-layout").is_file():
            return _oci(path, audit)
        return _tree(path, audit)
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(ELF_MAGIC):
        return [audit(path, str(path))], 1
    if head.startswith(b"PK\x03\x04"):
        return _zip(path, audit)
    if head.startswith(AR_MAGIC):
        return _deb(path, audit)
    if _is_tar(path, head):
        with open(path, "rb") as handle:
            return _tar_stream(decompressed(handle, head), str(path), audit)
    raise InputError(path, "not an ELF file, wheel, tarball, .deb, directory or OCI image layout",
                     "give a shared library, a .whl, a .tar[.gz|.xz|.zst], a .deb, a directory or an OCI layout")


def _keep(found: BinaryAudit) -> bool:
    return found.kind != "none"


def _tree(root: Path, audit: Auditor) -> tuple[list[BinaryAudit], int]:
    """Regular ELF files under ``root`` in sorted order; symlinks are skipped so no file counts twice."""
    results: list[BinaryAudit] = []
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            candidate = Path(folder) / name
            if candidate.is_symlink() or not candidate.is_file() or not is_elf(candidate):
                continue
            seen += 1
            found = audit(candidate, str(candidate))
            if _keep(found):
                results.append(found)
    return results, seen


def _with_temp_copy(source: IO[bytes], head: bytes, audit: Auditor, shown: str) -> BinaryAudit:
    """Copy one archive member to a temporary file (streamed), audit it, delete it."""
    with tempfile.NamedTemporaryFile(prefix="cairn-audit-", suffix=".so") as temp:
        temp.write(head)
        shutil.copyfileobj(source, temp, 1 << 20)
        temp.flush()
        return audit(Path(temp.name), shown)


def _zip(path: Path, audit: Auditor) -> tuple[list[BinaryAudit], int]:
    results: list[BinaryAudit] = []
    seen = 0
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise InputError(path, f"not a readable wheel/zip ({exc})") from None
    with archive:
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            if info.is_dir() or info.file_size < 64:
                continue
            try:
                with archive.open(info) as member:
                    head = member.read(4)
                    if head != ELF_MAGIC:
                        continue
                    seen += 1
                    found = _with_temp_copy(member, head, audit, f"{path}!{info.filename}")
            except (zipfile.BadZipFile, zlib.error) as exc:
                raise InputError(f"{path}!{info.filename}", f"cannot extract ({exc})") from None
            if _keep(found):
                results.append(found)
    return results, seen


def _is_tar(path: Path, head: bytes) -> bool:
    if any(head.startswith(magic) for magic in COMPRESSED):
        return True
    with open(path, "rb") as handle:
        handle.seek(257)
        return handle.read(5) == b"ustar"


def _tar_stream(stream: IO[bytes], shown: str, audit: Auditor) -> tuple[list[BinaryAudit], int]:
    results: list[BinaryAudit] = []
    seen = 0
    for member, reader in tar_members(stream, shown):
        if reader is None or member.size < 64:
            continue
        head = reader.read(4)
        if head != ELF_MAGIC:
            continue
        seen += 1
        found = _with_temp_copy(reader, head, audit, f"{shown}!{member.name.removeprefix('./')}")
        if _keep(found):
            results.append(found)
    return results, seen


class _Window(io.RawIOBase):
    """A read-only view of ``handle[start:start+size]`` (an ar member) without copying it."""

    def __init__(self, handle: IO[bytes], start: int, size: int) -> None:
        self._handle, self._start, self._size, self._pos = handle, start, size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        self._handle.seek(self._start + self._pos)
        data = self._handle.read(want)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _deb(path: Path, audit: Auditor) -> tuple[list[BinaryAudit], int]:
    """A Debian package: an ar archive whose ``data.tar.*`` member holds the files."""
    with open(path, "rb") as handle:
        handle.seek(len(AR_MAGIC))
        while True:
            header = handle.read(60)
            if len(header) < 60:
                raise InputError(path, "no data.tar member (not a Debian package?)")
            name = header[:16].decode("ascii", "replace").strip().rstrip("/")
            try:
                size = int(header[48:58].decode("ascii").strip())
            except ValueError:
                raise InputError(path, f"corrupt ar header at offset {handle.tell() - 60:#x}") from None
            start = handle.tell()
            if name.startswith("data.tar"):
                window = io.BufferedReader(_Window(handle, start, size), 1 << 20)
                head = window.peek(8)[:8]
                return _tar_stream(decompressed(window, head), str(path), audit)  # type: ignore[arg-type]
            handle.seek(start + size + (size & 1))


# -- OCI image layouts -----------------------------------------------------------------------------------
def _json(path: Path, root: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(root, f"{path.name}: not valid JSON ({exc})") from None


def _manifests(root: Path, index: dict) -> Iterator[tuple[str, dict]]:
    """Image manifests reachable from an index, nested indexes (multi-platform) included."""
    for descriptor in index.get("manifests", []):
        digest = descriptor.get("digest", "")
        document = _json(layer_blob(root, digest), root)
        if "manifests" in document:
            yield from _manifests(root, document)
        elif "layers" in document:
            yield digest, document


def _oci(root: Path, audit: Auditor) -> tuple[list[BinaryAudit], int]:
    # lazy: cairn.audit, cairn.digest, cairn.io, 6 ms at start-up (python -X importtime)
    from cairn.audit.layers import scan_blob

    results: list[BinaryAudit] = []
    seen = 0
    for digest, manifest in _manifests(root, _json(root / "index.json", root)):
        tag = f"{root}@{digest[:19]}:"

        def shown_in_image(path: Path, member: str, tag: str = tag) -> BinaryAudit:  # errors name the image and path
            return audit(path, f"{tag}{PurePosixPath('/', member)}")

        scans = [scan_blob(layer_blob(root, layer.get("digest", "")), shown_in_image) for layer in manifest["layers"]]
        found, looked_at = image_audits(scans, tag)
        results.extend(found)
        seen += looked_at
    return results, seen


def image_audits(scans: Iterable[LayerScan], tag: str) -> tuple[list[BinaryAudit], int]:
    """The device-code audits of the files a container of these layers sees (bottom layer first), sorted by
    path and shown as ``tag`` + path, and how many ELF files were looked at. A later layer replaces a file,
    ``.wh.`` whiteouts delete it, an opaque whiteout clears its directory."""
    files: dict[str, BinaryAudit] = {}
    seen = 0
    for scan in scans:
        for member in scan.members:
            name = str(PurePosixPath("/", member.name))
            folder, base = name.rsplit("/", 1)
            if base == ".wh..wh..opq":
                for key in [k for k in files if k.startswith(folder + "/")]:
                    del files[key]
                continue
            if base.startswith(".wh."):
                gone = f"{folder}/{base[4:]}"
                for key in [k for k in files if k == gone or k.startswith(gone + "/")]:
                    del files[key]
                continue
            files.pop(name, None)
            if member.audit is None:
                continue
            seen += 1
            if _keep(member.audit):
                files[name] = replace(member.audit, path=f"{tag}{name}")
    return [files[name] for name in sorted(files)], seen
