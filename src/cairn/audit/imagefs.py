"""The filesystem a container of an OCI image sees, read from its layers without unpacking them.

Layers are applied in order (later entries replace earlier ones, ``.wh.`` whiteouts delete, opaque
whiteouts clear a directory). Only what the static gate needs is kept: each path's type and link target,
and for ELF files their DT_NEEDED, RUNPATH/RPATH and ELF class — from each layer's scan
(``cairn.audit.layers``), which is read once per layer digest when a cache directory is given.
"""

from __future__ import annotations

import posixpath
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cairn.audit.layers import ELF_MAGIC, TEXT_PREFIX, ElfInfo, LayerScan, fs_path, image_scans, read_elf

__all__ = ["ElfInfo", "ImageFS", "Node", "image_env", "read_elf"]


@dataclass(frozen=True)
class Node:
    kind: str  # file, dir, link, hardlink, other
    link: str = ""
    elf: ElfInfo | None = None


class ImageFS:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {"/": Node("dir")}
        self.texts: dict[str, str] = {}  # small configuration files the gate reads (ld.so.conf*)

    @classmethod
    def from_layout(cls, layout: Path, manifest: dict, cache: Path | None = None) -> ImageFS:
        """The filesystem of the image in OCI layout ``layout``; ``cache``: where layer scans are kept (the store's
        ``layer-scans/``), None to read every layer."""
        return cls.from_scans(image_scans(layout, manifest, cache))

    @classmethod
    def from_scans(cls, scans: Iterable[LayerScan]) -> ImageFS:
        """The filesystem a container of these layers (bottom first) sees."""
        fs = cls()
        for scan in scans:
            fs.apply(scan)
        return fs

    def apply(self, scan: LayerScan) -> None:
        """Lay one layer over the filesystem: later entries replace earlier ones, whiteouts delete."""
        for member in scan.members:
            path = fs_path(member.name)
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
            if member.kind == "dir":
                self.nodes[path] = Node("dir")
            elif member.kind == "symlink":
                self.nodes[path] = Node("link", member.link)
            elif member.kind == "hardlink":
                target = "/" + member.link.lstrip("./").lstrip("/")
                self.nodes[path] = Node("file", elf=self.nodes.get(target, Node("file")).elf)
            elif member.kind == "file":
                if member.text is not None and path.startswith(TEXT_PREFIX):
                    self.texts[path] = member.text
                self.nodes[path] = Node("file", elf=member.elf)
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

