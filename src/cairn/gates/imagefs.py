"""The filesystem a container of an OCI image sees, read from its layers without unpacking them.

Layers are applied in order (later entries replace earlier ones, ``.wh.`` whiteouts delete, opaque
whiteouts clear a directory). Only what the static gate needs is kept: each path's type and link target,
and for ELF files their DT_NEEDED, RUNPATH/RPATH and ELF class, read with pyelftools as the layer streams.
"""

from __future__ import annotations

import io
import posixpath
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class ElfInfo:
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    elfclass: int
    machine: str


@dataclass(frozen=True)
class Node:
    kind: str  # file, dir, link, hardlink, other
    link: str = ""
    elf: ElfInfo | None = None


def read_elf(data: bytes | IO[bytes]) -> ElfInfo | None:
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


class ImageFS:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {"/": Node("dir")}
        self.texts: dict[str, str] = {}  # small configuration files the gate reads (ld.so.conf*)

    @classmethod
    def from_layout(cls, layout: Path, manifest: dict) -> ImageFS:
        fs = cls()
        for layer in manifest["layers"]:
            blob = layout / "blobs" / "sha256" / layer["digest"].split(":", 1)[1]
            fs.apply(blob)
        return fs

    def apply(self, blob: Path) -> None:
        with tarfile.open(blob, "r|*") as tar:
            for member in tar:
                path = "/" + member.name.lstrip("./").lstrip("/").rstrip("/")
                parent, name = posixpath.split(path)
                if name == ".wh..wh..opq":
                    prefix = parent.rstrip("/") + "/"
                    for key in [k for k in self.nodes if k.startswith(prefix)]:
                        del self.nodes[key]
                    continue
                if name.startswith(".wh."):
                    gone = posixpath.join(parent, name[4:])
                    for key in [k for k in self.nodes if k == gone or k.startswith(gone + "/")]:
                        del self.nodes[key]
                    continue
                if member.isdir():
                    self.nodes[path] = Node("dir")
                elif member.issym():
                    self.nodes[path] = Node("link", member.linkname)
                elif member.islnk():
                    target = "/" + member.linkname.lstrip("./").lstrip("/")
                    self.nodes[path] = Node("file", elf=self.nodes.get(target, Node("file")).elf)
                elif member.isreg():
                    handle = tar.extractfile(member)
                    head = handle.read(4) if handle else b""
                    elf = read_elf(head + handle.read()) if head == ELF_MAGIC and handle else None
                    if path.startswith("/etc/ld.so.conf") and handle and member.size < 65536:
                        self.texts[path] = (head + handle.read()).decode(errors="replace")
                    self.nodes[path] = Node("file", elf=elf)
                else:
                    self.nodes[path] = Node("other")

    def add_wheel(self, wheel: Path, site: str) -> list[str]:
        """Lay a wheel's files over the image where pip installs them (``site``, the image's dist-packages;
        ``*.data/purelib|platlib`` there too, other ``.data`` schemes are not libraries); the paths added."""
        added = []
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                name = info.filename
                if ".data/" in name.split("/", 1)[0] + "/" and name.count("/") >= 2:
                    _data, scheme, rest = name.split("/", 2)
                    if scheme not in ("purelib", "platlib"):
                        continue
                    name = rest
                path = posixpath.normpath(posixpath.join(site, name))
                with archive.open(info) as member:
                    elf = None
                    if member.read(4) == ELF_MAGIC:
                        with archive.open(info) as again, tempfile.TemporaryFile() as spool:
                            shutil.copyfileobj(again, spool, 1 << 20)  # a 500 MB plugin never sits in memory
                            spool.seek(0)
                            elf = read_elf(spool)
                self.nodes[path] = Node("file", elf=elf)
                parent = posixpath.dirname(path)
                while parent not in self.nodes:
                    self.nodes[parent] = Node("dir")
                    parent = posixpath.dirname(parent)
                added.append(path)
        return added

    def resolve(self, path: str, depth: int = 0) -> str | None:
        """The real path behind ``path`` after following every symlink component, or None if dangling."""
        if depth > 40:
            return None
        parts = [p for p in path.split("/") if p]
        current = "/"
        for index, part in enumerate(parts):
            candidate = posixpath.normpath(posixpath.join(current, part))
            node = self.nodes.get(candidate)
            if node is None:
                return None
            if node.kind == "link":
                target = node.link if node.link.startswith("/") else posixpath.join(current, node.link)
                rest = "/".join(parts[index + 1:])
                return self.resolve(posixpath.normpath(posixpath.join(target, rest)) if rest else posixpath.normpath(target), depth + 1)
            current = candidate
        return current

    def exists(self, path: str) -> bool:
        real = self.resolve(path)
        return real is not None and self.nodes[real].kind == "file"

    def elf_files(self) -> dict[str, ElfInfo]:
        return {p: n.elf for p, n in sorted(self.nodes.items()) if n.kind == "file" and n.elf is not None}


def image_env(config: dict) -> dict[str, str]:
    return dict(item.split("=", 1) for item in (config.get("config") or {}).get("Env") or [] if "=" in item)

