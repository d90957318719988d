"""Reproducible OCI images: normalized layer tars, fixed gzip, canonical JSON, an OCI layout on disk.

Whatever produced a layer (mmdebstrap, ``docker save``), ``normalize_layer`` rewrites it the same way:
entries sorted by path, mtimes clamped to ``SOURCE_DATE_EPOCH``, owner names dropped (numeric ids kept),
permission bits kept, PAX extras (xattrs, atime) dropped, hard links pointing at the first name in sort
order, volatile files removed. Normalizing a normalized layer gives the same bytes, so parent layers
that come back from the engine keep their DiffIDs. Layers are gzip-compressed at zlib level 6 by
``cairn.deflate`` (no name, no mtime, chunks deflated in parallel); the zlib version is part of every image's
action key, as it is of every wheel's.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import tarfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from cairn.deflate import CHUNK, Deflater
from cairn.digest import file_sha256
from cairn.errors import CairnError
from cairn.io import atomic_write, link_or_copy
from cairn.names import relpath_problem

LAYOUT_VERSION = 2  # 2: layers deflated by cairn.deflate
ZLIB_VERSION = zlib.ZLIB_RUNTIME_VERSION
GZIP_LEVEL = 6
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"

# Files a build leaves behind that say when or where it ran, never what the image is.
VOLATILE = (
    "var/lib/apt/lists/*", "var/cache/apt/*", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
    "var/cache/ldconfig/aux-cache", "var/log/*", "etc/machine-id", "var/lib/dbus/machine-id",
    "*/__pycache__", "*/__pycache__/*", "*.pyc", "etc/ld.so.cache", "tmp/*", "var/tmp/*",
    "etc/passwd-", "etc/group-", "etc/shadow-", "etc/gshadow-", "root/.cache", "root/.cache/*",
)
_KEEP_EMPTY_DIRS = {"var/log", "var/cache/apt", "var/lib/apt/lists", "tmp", "var/tmp"}


def canonical(value: Any) -> bytes:
    """The one JSON serialization of every blob we write (sorted keys, compact, UTF-8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sha256_file(path: Path) -> str:
    """An OCI digest: the algorithm, a colon, the file's hex sha256."""
    return "sha256:" + file_sha256(path)


def is_volatile(name: str) -> bool:
    if name in _KEEP_EMPTY_DIRS:
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in VOLATILE)


def _clean_name(name: str) -> str:
    name = name.lstrip("/")
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/") if name not in ("", ".") else ""


def normalize_layer(src: Path, dest: Path, epoch: int) -> str:
    """Rewrite the layer tar ``src`` into ``dest`` (uncompressed); returns its DiffID."""
    with tarfile.open(src, "r:*") as tar:
        members = {}
        for member in tar.getmembers():
            name = _clean_name(member.name)
            if not name or is_volatile(name):
                continue
            problem = relpath_problem(name)
            if problem:  # a layer member that climbs out of the root filesystem (``..``): never write it into an image
                raise CairnError(f"{src}: layer member {member.name!r} {problem} — the layer is not a plain filesystem tree; rebuild it")
            members[name] = member
        links = _hardlink_heads(members)
        with open(dest, "wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as out:
            for name in sorted(members):
                member = members[name]
                info = tarfile.TarInfo(name)
                info.mtime = min(int(member.mtime), epoch)
                info.mode = member.mode & 0o7777
                info.uid, info.gid = member.uid, member.gid
                info.uname = info.gname = ""
                data: IO[bytes] | None = None
                if member.islnk():
                    head = links[name]
                    if head == name:  # the first name of a hard-link group carries the bytes
                        source = members.get(_clean_name(member.linkname))
                        if source is None or not source.isreg():
                            continue
                        info.type, info.size = tarfile.REGTYPE, source.size
                        data = tar.extractfile(source)
                    else:
                        info.type, info.linkname = tarfile.LNKTYPE, head
                elif member.isreg() and links.get(name, name) != name:
                    info.type, info.linkname = tarfile.LNKTYPE, links[name]
                elif member.isreg():
                    info.type, info.size = tarfile.REGTYPE, member.size
                    data = tar.extractfile(member)
                elif member.issym():
                    info.type, info.linkname = tarfile.SYMTYPE, member.linkname
                elif member.isdir():
                    info.type = tarfile.DIRTYPE
                elif member.ischr() or member.isblk():
                    info.type, info.devmajor, info.devminor = member.type, member.devmajor, member.devminor
                elif member.isfifo():
                    info.type = tarfile.FIFOTYPE
                else:
                    continue
                out.addfile(info, data)
    return sha256_file(dest)


def _hardlink_heads(members: Mapping[str, tarfile.TarInfo]) -> dict[str, str]:
    """For every file in a hard-link group: the group's first name in sort order (which carries the bytes)."""
    groups: dict[str, set[str]] = {}
    for name, member in members.items():
        if member.islnk():
            target = _clean_name(member.linkname)
            groups.setdefault(target, {target}).add(name)
    heads: dict[str, str] = {}
    for group in groups.values():
        present = sorted(n for n in group if n in members)
        for name in present:
            heads[name] = present[0]
    return heads


def gzip_file(src: Path, dest: Path, level: int = GZIP_LEVEL) -> str:
    """gzip ``src`` into ``dest`` on every core (``cairn.deflate``: no name, no mtime, the same bytes whatever
    the core count); returns the compressed digest."""
    with open(src, "rb") as inp, open(dest, "wb") as out, Deflater(out, level) as gz:
        while chunk := inp.read(CHUNK):
            gz.write(chunk)
    return sha256_file(dest)


@dataclass(frozen=True)
class Layer:
    digest: str  # of the compressed blob
    diff_id: str  # of the uncompressed tar
    size: int
    uncompressed_size: int

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "diff_id": self.diff_id, "size": self.size, "uncompressed_size": self.uncompressed_size}


class Layout:
    """An OCI image layout directory we write blobs into (``blobs/sha256/<hex>``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')

    def blob(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / digest.split(":", 1)[1]

    def put_bytes(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.blob(digest)
        if not path.exists():
            path.write_bytes(data)
        return digest

    def add_layer_tar(self, tar: Path, epoch: int, scratch: Path, cache: Path | None = None,
                      gzip_level: int = GZIP_LEVEL) -> Layer:
        """Normalize and compress one layer tar into the layout.

        ``cache`` (the store's ``layers/``) keeps each compressed layer by the DiffID of its normalized tar:
        the per-target images of a family install the same wheels, so their layers are the same bytes and are
        compressed once (gzip is most of an image's build time for a GB of ROCm libraries)."""
        normal = scratch / f"{tar.name}.norm"
        diff_id = normalize_layer(tar, normal, epoch)
        cached = cache / f"{diff_id.split(':', 1)[1]}.json" if cache else None
        if cached is not None and cached.is_file():
            try:
                layer = Layer(**json.loads(cached.read_text()))
            except (OSError, ValueError, TypeError):
                layer = Layer("", "", -1, -1)  # a damaged record: compress again (and rewrite it)
            blob = cached.with_suffix(".gz")
            if layer.diff_id == diff_id and blob.is_file() and blob.stat().st_size == layer.size:
                self.link_layer(layer, blob)
                normal.unlink()
                return layer
        compressed = scratch / f"{tar.name}.gz"
        digest = gzip_file(normal, compressed, gzip_level)
        layer = Layer(digest, diff_id, compressed.stat().st_size, normal.stat().st_size)
        os.replace(compressed, self.blob(digest)) if not self.blob(digest).exists() else compressed.unlink()
        normal.unlink()
        if cached is not None:
            _remember(cached, layer, self.blob(digest))
        return layer

    def link_layer(self, layer: Layer, source: Path) -> None:
        """Reuse a blob another layout already holds (hard link: the store shares bytes between trees)."""
        dest = self.blob(layer.digest)
        if not dest.exists():
            link_or_copy(source, dest)

    def write_image(self, config: Mapping[str, Any], layers: Iterable[Layer], annotations: Mapping[str, str],
                    tags: Iterable[str]) -> tuple[str, str, int]:
        """Config + manifest blobs and ``index.json`` naming each tag; returns (manifest, config digest, size)."""
        layers = list(layers)
        config_bytes = canonical(config)
        config_digest = self.put_bytes(config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config_bytes)},
            "layers": [{"mediaType": LAYER_TYPE, "digest": x.digest, "size": x.size} for x in layers],
            "annotations": dict(sorted(annotations.items())),
        }
        manifest_bytes = canonical(manifest)
        manifest_digest = self.put_bytes(manifest_bytes)
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [{"mediaType": MANIFEST_TYPE, "digest": manifest_digest, "size": len(manifest_bytes),
                           "annotations": {REF_NAME: tag}} for tag in sorted(set(tags))],
        }
        (self.root / "index.json").write_bytes(canonical(index))
        return manifest_digest, config_digest, len(manifest_bytes)


_CONFIG_KEYS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels", "StopSignal")


def _remember(record: Path, layer: Layer, blob: Path) -> None:
    """Keep ``blob`` (hard link) and its description in the layer cache; a race leaves one complete copy."""
    link_or_copy(blob, record.with_suffix(".gz"))
    atomic_write(record, json.dumps(layer.to_json(), sort_keys=True))


def image_config(runtime: Mapping[str, Any], layers: list[Layer], history: Sequence[Mapping[str, Any]], epoch: int,
                 labels: Mapping[str, str]) -> dict[str, Any]:
    """An OCI image config with every timestamp at the epoch and nothing about the build host."""
    config = {k: runtime[k] for k in _CONFIG_KEYS if runtime.get(k)}
    config["Labels"] = dict(sorted({**(runtime.get("Labels") or {}), **labels}.items()))
    created = rfc3339(epoch)
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in layers]},
        "history": [{"created": created, "created_by": h.get("created_by", ""),
                     **({"empty_layer": True} if h.get("empty_layer") else {})} for h in history],
    }


def read_image(layout: Path, tag: str | None = None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(manifest, config, manifest digest) of the image ``tag`` (or the only one) in an OCI layout."""
    index = json.loads((layout / "index.json").read_text())
    entries = index["manifests"]
    if tag is not None:
        entries = [m for m in entries if m.get("annotations", {}).get(REF_NAME) == tag] or entries
    digest = entries[0]["digest"]
    manifest = json.loads((layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_text())
    config = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":", 1)[1]).read_text())
    return manifest, config, digest
