"""Read a just-built image's config and new layers from the private engine's own store, instead of ``docker save``.

``docker save`` of a runtime image writes every layer (GBs of the parent that Cairn built and already holds) to a
temporary directory inside the engine, then tars that directory again to stream it: for a smoke image that adds
a few kB on top of a 2.4 GB runtime, nearly all of the save is the parent. The engine keeps, for each layer, its
files (overlay2's ``diff`` directory) and a tar-split record: the exact tar headers and padding, with the files'
names and sizes in between. Replaying that record over the files gives the very tar the engine would export,
byte for byte. So only the new layers are read, and each one is checked against its DiffID before it is used.

This reads the engine's on-disk layout (Docker 20.10's ``image/overlay2`` and ``overlay2`` directories), which is
not an API. It is used only with the engine ``cairn services`` started, whose data root this process can read.
Any surprise (another storage driver, a missing file, a DiffID or image ID that does not match) returns
``None`` with the reason in the build log, and the caller saves the image the usual way.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from cairn.names import inside

COPY_CHUNK = 1 << 20


class Unreadable(Exception):
    """The engine's store does not hold what this module expects; the caller falls back to ``docker save``."""


def read_new_layers(client: Any, tag: str, dest: Path, known: set[str],
                    log: IO[str]) -> tuple[dict[str, Any], list[Path | None]] | None:
    """The image config of ``tag`` and, per layer, a tar written under ``dest`` — or ``None`` for a layer whose
    DiffID is in ``known`` (the parent's, which the caller already holds). ``None`` overall when the store
    cannot be read this way; the reason goes to ``log``."""
    try:
        return _read(client, tag, dest, known)
    except (Unreadable, OSError, ValueError, KeyError, TypeError) as exc:
        log.write(f"note: reading the image from the engine's store did not work ({exc}); using docker save\n")
        return None


def _read(client: Any, tag: str, dest: Path, known: set[str]) -> tuple[dict[str, Any], list[Path | None]]:
    info = client.info()
    if info.get("Driver") != "overlay2":
        raise Unreadable(f"storage driver is {info.get('Driver')!r}, not overlay2")
    root = Path(info["DockerRootDir"])
    image_id = client.images.get(tag).id
    raw = (root / "image" / "overlay2" / "imagedb" / "content" / "sha256" / _hex(image_id)).read_bytes()
    if "sha256:" + hashlib.sha256(raw).hexdigest() != image_id:
        raise Unreadable(f"the stored config of {image_id} does not hash to its ID")
    config = json.loads(raw)
    tars: list[Path | None] = []
    for index, (diff_id, chain_id) in enumerate(_chain(config["rootfs"]["diff_ids"])):
        if diff_id in known:
            tars.append(None)
            continue
        layer = root / "image" / "overlay2" / "layerdb" / "sha256" / _hex(chain_id)
        files = root / "overlay2" / _hex((layer / "cache-id").read_text().strip()) / "diff"
        out = dest / f"layer-{index}.tar"
        with gzip.open(layer / "tar-split.json.gz", "rt", encoding="utf-8") as record, open(out, "wb") as tar:
            digest = hashlib.sha256()
            for piece in _replay(record, files):
                digest.update(piece)
                tar.write(piece)
        if "sha256:" + digest.hexdigest() != diff_id:
            raise Unreadable(f"layer {index} rebuilt from its tar-split does not match its DiffID {diff_id}")
        tars.append(out)
    return config, tars


def _chain(diff_ids: list[str]) -> Iterator[tuple[str, str]]:
    """Each DiffID with its ChainID (the layer store's key: the DiffID of the first layer, then
    ``sha256(parent ChainID + " " + DiffID)``)."""
    chain = ""
    for diff_id in diff_ids:
        chain = diff_id if not chain else "sha256:" + hashlib.sha256(f"{chain} {diff_id}".encode()).hexdigest()
        yield diff_id, chain


def _replay(record: IO[str], files: Path) -> Iterator[bytes]:
    """The tar bytes a tar-split record describes: its segments (headers, padding) as stored, each file entry's
    ``size`` bytes read from ``files``. Names come from the engine's store and must stay inside ``files``."""
    for line in record:
        entry = json.loads(line)
        if entry["type"] == 2:  # a segment: raw tar bytes
            yield base64.b64decode(entry.get("payload") or b"")
        elif entry["type"] == 1:  # a file entry: its content
            size = int(entry.get("size") or 0)
            if size:
                name = base64.b64decode(entry["name_raw"]).decode("utf-8", "surrogateescape") \
                    if entry.get("name_raw") else entry["name"]
                yield from _content(files, name, size)
        else:
            raise Unreadable(f"tar-split entry of unknown type {entry['type']!r}")


def _content(files: Path, name: str, size: int) -> Iterator[bytes]:
    path = files / name.lstrip("/")
    if not inside(files, path):
        raise Unreadable(f"tar-split names {name!r}, outside the layer's files")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        left = size
        while left:
            piece = handle.read(min(left, COPY_CHUNK))
            if not piece:
                raise Unreadable(f"{name} is shorter than its tar entry ({size} bytes)")
            left -= len(piece)
            yield piece


def _hex(digest: str) -> str:
    """The hex part of ``sha256:<hex>``, refused unless it is exactly that (it becomes a path)."""
    algorithm, _, value = digest.partition(":")
    if not value:
        value, algorithm = algorithm, "sha256"
    if algorithm != "sha256" or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise Unreadable(f"{digest!r} is not a sha256 digest")
    return value
