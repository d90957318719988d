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
import zlib
from pathlib import Path
from typing import BinaryIO

from cairn.store.base import tree_entries


class DamagedArchive(ValueError):
    """The bytes are not an archive ``pack`` could have written."""


def pack(root: Path) -> bytes:
    """The archive of ``root`` in memory (``pack_to`` writes the same bytes to a file)."""
    buffer = io.BytesIO()
    pack_to(root, buffer)
    return buffer.getvalue()


def pack_to(root: Path, out: BinaryIO) -> str:
    """Write the archive of ``root`` to ``out`` as it is made (a tree of gigabytes never sits in memory);
    returns the sha256 of the bytes written, which the upload's checksum needs before it starts."""
    hashing = _Hashing(out)  # also keeps the file's name out of the gzip header: same tree, same bytes
    with gzip.GzipFile(fileobj=hashing, mode="wb", mtime=0, compresslevel=6) as zipped, \
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
    return hashing.sha256.hexdigest()


class _Hashing:
    """A write-only file that hashes what passes through it to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.sha256 = out, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


def unpack(archive: bytes | Path, dest: Path) -> list[tuple[str, str, bool]]:
    """Unpack ``archive`` (bytes, or a file read as it is unpacked) into the empty directory ``dest``; raises
    DamagedArchive for anything ``pack`` never writes, OSError for this machine's own failures. Returns (path, sha256, executable) of every regular
    file, as hashed while writing it."""
    made = {""}
    files: list[tuple[str, str, bool]] = []
    try:
        opened = {"fileobj": io.BytesIO(archive)} if isinstance(archive, bytes) else {"name": archive}
        with tarfile.open(mode="r:gz", **opened) as tar:  # type: ignore[call-overload]
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
    except (FileExistsError, IsADirectoryError, NotADirectoryError) as exc:  # a name twice, a file as a parent
        raise DamagedArchive(f"entry clashes with an earlier one: {exc}") from None
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error, UnicodeError) as exc:
        raise DamagedArchive(f"unreadable archive: {exc}") from None
    # any other OSError (a full disk, a read error) is this machine's, not the archive's: the caller's to report
    return files


def _check_name(name: str, parent: str, made: set[str]) -> None:
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise DamagedArchive(f"entry {name!r} is not a plain relative path")
    if parent not in made:
        raise DamagedArchive(f"entry {name!r} comes before its directory (or its directory is a link)")
