"""One pass over an image layer, kept by the layer's digest: everything the static gate, the linkage check and
the device-code audit read from it.

Why: each of those read every layer of an image again — the static gate twice (the device-code audit, then
the filesystem for linkage) — and the smoke, llama.cpp and JAX images of one target share their runtime
image's layers, so one layer was decompressed and its ELF files parsed up to six times per target. A layer is
content-addressed, so what it holds is a function of its digest: its *scan* (every member in archive order —
name, type, link target — and for ELF files their dynamic section and their device-code audit) is made once
and kept under the store, in ``layer-scans/``, keyed by the layer's digest and by a digest of the code that
makes the scan (this module, the audit's parser, the target registry). Replaying a scan gives the same answer
as reading the layer: the replays (``cairn.audit.sources``, ``cairn.audit.imagefs``) apply whiteouts and
replacements exactly as they did on the tar stream.

A cache file that cannot be read is made again, never trusted and never an error: the cache only saves time.
A scan is made under a lock of its own (``<scan>.lock`` beside it), so gates that reach one layer at the same
moment, as a target's gates do once its runtime image is built, make it once.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from cairn.audit.archives import decompressed, layer_blob, tar_members
from cairn.audit.binary import audit_file
from cairn.audit.bundle import ELF_MAGIC
from cairn.audit.model import BinaryAudit, audit_from_json
from cairn.digest import files_digest, stage_code_digest
from cairn.io import atomic_write, exclusive
from cairn.model.targets import load_registry
from cairn.paths import manifests_dir

Auditor = Callable[[Path, str], BinaryAudit]  # (file, path to show) → its audit

SCHEMA = 1
AUDIT_MIN = 64  # smaller ELF members are not audited (no section table fits), as for files given by hand
TEXT_MAX = 65536  # /etc/ld.so.conf* files kept as text for the linkage resolver
TEXT_PREFIX = "/etc/ld.so.conf"


@dataclass(frozen=True)
class ElfInfo:
    """The dynamic section facts the linkage resolver needs."""

    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    elfclass: int
    machine: str


@dataclass(frozen=True)
class Member:
    """One tar member of a layer, as the readers of the layer need it."""

    name: str  # as stored in the archive; each replay normalises it as it always did
    kind: str  # "dir", "symlink", "hardlink", "file", "other"
    link: str = ""  # symlink or hardlink target
    elf: ElfInfo | None = None  # regular files starting with the ELF magic
    audit: BinaryAudit | None = None  # ELF files of at least AUDIT_MIN bytes; its path is the member name
    text: str | None = None  # small regular files under /etc/ld.so.conf*


@dataclass(frozen=True)
class LayerScan:
    members: tuple[Member, ...]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "members": [_member_json(m) for m in self.members]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LayerScan:
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"layer scan schema {doc.get('schema')!r}, expected {SCHEMA}")
        return cls(tuple(_member_from_json(m) for m in doc["members"]))


def fs_path(name: str) -> str:
    """A member name as the image filesystem reader has always keyed it."""
    return "/" + name.lstrip("./").lstrip("/").rstrip("/")


def read_elf(data: bytes | IO[bytes]) -> ElfInfo | None:
    """DT_NEEDED, RUNPATH/RPATH, class and machine of an ELF file; None when it is not a readable ELF file."""
    try:
        elf = ELFFile(io.BytesIO(data) if isinstance(data, bytes) else data)
        needed: list[str] = []
        runpath: list[str] = []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)  # type: ignore[attr-defined]  # pyelftools sets DynamicTag's string attributes with setattr
                    elif tag.entry.d_tag == "DT_RUNPATH":
                        runpath += tag.runpath.split(":")  # type: ignore[attr-defined]  # pyelftools sets DynamicTag's string attributes with setattr
                    elif tag.entry.d_tag == "DT_RPATH":
                        runpath += tag.rpath.split(":")  # type: ignore[attr-defined]  # pyelftools sets DynamicTag's string attributes with setattr
        return ElfInfo(tuple(needed), tuple(runpath), elf.elfclass, elf["e_machine"])
    except (ELFError, ValueError, KeyError, AttributeError):
        return None


def default_auditor() -> Auditor:
    """The audit with the project's target registry — the one ``scanner_digest`` covers."""
    registry = load_registry()
    return lambda path, shown: audit_file(path, display=shown, registry=registry)


def scan_blob(blob: Path, audit: Auditor) -> LayerScan:
    """Read one layer blob (gzip, xz, bzip2, zstd or plain tar) once, streaming; ELF members are spooled to a
    temporary file one at a time for the ELF reader and the audit."""
    members: list[Member] = []
    with open(blob, "rb") as handle:
        head = handle.read(8)
        handle.seek(0)
        for info, reader in tar_members(decompressed(handle, head), str(blob)):
            if info.isdir():
                members.append(Member(info.name, "dir"))
            elif info.issym():
                members.append(Member(info.name, "symlink", info.linkname))
            elif info.islnk():
                members.append(Member(info.name, "hardlink", info.linkname))
            elif reader is None:
                members.append(Member(info.name, "other"))
            else:
                members.append(_regular(info.name, info.size, reader, audit))
    return LayerScan(tuple(members))


def _regular(name: str, size: int, reader: IO[bytes], audit: Auditor) -> Member:
    head = reader.read(4)
    if head != ELF_MAGIC:
        text = None
        if size < TEXT_MAX and fs_path(name).startswith(TEXT_PREFIX):
            text = (head + reader.read()).decode(errors="replace")
        return Member(name, "file", text=text)
    with tempfile.NamedTemporaryFile(prefix="cairn-layer-", suffix=".so") as temp:
        temp.write(head)
        shutil.copyfileobj(reader, temp, 1 << 20)  # a 1 GB library never sits in memory
        temp.flush()
        temp.seek(0)
        elf = read_elf(temp)  # type: ignore[arg-type]
        found = audit(Path(temp.name), name) if size >= AUDIT_MIN else None
    return Member(name, "file", elf=elf, audit=found)


@functools.cache
def scanner_digest() -> str:
    """sha256 of what a scan's content depends on besides the layer: the audit's scanner, parser and model, and
    the target registry (it names processors). A cached scan is used only while all of it is unchanged; read
    once per process, as a gate replays hundreds of scans."""
    registry = manifests_dir() / "targets.toml"
    return hashlib.sha256(f"{stage_code_digest('layer-scan')} {files_digest([registry])}".encode()).hexdigest()


def cached_scan(blob: Path, digest: str, cache: Path | None) -> LayerScan:
    """The scan of the layer ``blob`` (whose digest is ``digest``) with the default auditor, from ``cache`` when
    it holds a readable one, else made and, with a cache, kept there (atomically: a killed writer leaves
    nothing a reader would take)."""
    algorithm, _, value = digest.partition(":")
    if cache is None or not (algorithm.isalnum() and value.isalnum()):  # a digest never walks out of the cache
        return scan_blob(blob, default_auditor())
    path = cache / f"{algorithm}-{value}.{scanner_digest()[:16]}.json.gz"
    kept = _kept_scan(path)
    if kept is not None:
        return kept
    # the gates of one target start together once its runtime image is built, and read the same layers: the
    # first to get here scans, the others wait and read its scan instead of making their own
    with exclusive(path.with_name(path.name + ".lock")):
        kept = _kept_scan(path)
        if kept is not None:
            return kept
        scan = scan_blob(blob, default_auditor())
        atomic_write(path, gzip.compress(json.dumps(scan.to_json(), separators=(",", ":")).encode(), compresslevel=1, mtime=0))
    return scan


def _kept_scan(path: Path) -> LayerScan | None:
    """The scan kept at ``path``; None when it is absent or unreadable (then it is made again)."""
    try:
        return LayerScan.from_json(json.loads(gzip.decompress(path.read_bytes())))
    except (OSError, EOFError, ValueError, KeyError, TypeError):
        return None


def image_scans(layout: Path, manifest: dict[str, Any], cache: Path | None) -> list[LayerScan]:
    """The scans of an image's layers, bottom first."""
    return [cached_scan(layer_blob(layout, layer.get("digest", "")), layer.get("digest", ""), cache)
            for layer in manifest["layers"]]


def _member_json(m: Member) -> list[Any]:
    elf = [list(m.elf.needed), list(m.elf.runpath), m.elf.elfclass, m.elf.machine] if m.elf else None
    return [m.name, m.kind, m.link, elf, m.audit.to_json() if m.audit else None, m.text]


def _member_from_json(raw: list[Any]) -> Member:
    name, kind, link, elf, audit, text = raw
    info = ElfInfo(tuple(elf[0]), tuple(elf[1]), int(elf[2]), str(elf[3])) if elf is not None else None
    return Member(str(name), str(kind), str(link), info, audit_from_json(audit) if audit is not None else None,
                  None if text is None else str(text))
