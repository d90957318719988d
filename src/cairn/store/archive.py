"""One output tree as one archive, for the shared cache: a gzip'd tar with nothing in it but the tree.

``pack`` writes entries sorted by path with owner, group and times zeroed and modes normalized, so the same
tree gives the same bytes with the same zlib. ``unpack`` reads an archive that came from a bucket and so is
not trusted: only directories, regular files and symlinks; every name relative, without ``..`` or empty
parts; every parent a directory the archive itself created earlier (never a symlink, so nothing is written
through a link to outside the destination). Anything else raises ``DamagedArchive``. Link targets are kept
verbatim and never followed. The caller still digests what was unpacked: the archive's own claims prove nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

from cairn.store.base import tree_entries


class DamagedArchive(ValueError):
    """The bytes are not an archive ``pack`` could have written."""


def pack(root: Path) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=6) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, kind, _digest in tree_entries(root):
            path = root / rel
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
                tar.addfile(info)
            else:
                info.mode, info.size = (0o755 if kind == "exec" else 0o644), path.stat().st_size
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
    return buffer.getvalue()


def unpack(data: bytes, dest: Path) -> list[tuple[str, str, bool]]:
    """Unpack into the empty directory ``dest``; raises DamagedArchive for anything ``pack`` never writes.
    Returns (path, sha256, executable) of every regular file, as hashed while writing it."""
    made = {""}
    files: list[tuple[str, str, bool]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                parent, _, _ = member.name.rpartition("/")
                _check_name(member.name, parent, made)
                target = dest / member.name
                if member.isdir():
                    target.mkdir()
                    made.add(member.name)
                elif member.issym():
                    os.symlink(member.linkname, target)
                elif member.isfile():
                    source = tar.extractfile(member)
                    assert source is not None  # a regular file always has a body
                    digest = hashlib.sha256()
                    with open(target, "xb") as out:
                        while chunk := source.read(1 << 20):
                            out.write(chunk)
                            digest.update(chunk)
                    executable = bool(member.mode & 0o111)
                    os.chmod(target, 0o755 if executable else 0o644)
                    files.append((member.name, digest.hexdigest(), executable))
                else:
                    raise DamagedArchive(f"{member.name} is neither a file, a directory nor a symlink")
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, OSError, UnicodeError) as exc:
        raise DamagedArchive(f"unreadable archive: {exc}") from None
    return files


def _check_name(name: str, parent: str, made: set[str]) -> None:
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise DamagedArchive(f"entry {name!r} is not a plain relative path")
    if parent not in made:
        raise DamagedArchive(f"entry {name!r} comes before its directory (or its directory is a link)")
