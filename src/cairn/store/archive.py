"""One output tree as one archive, for the shared cache: a gzip'd tar with nothing in it but the tree.

``pack`` writes entries sorted by path with owner, group and times zeroed and modes normalized, so the same
tree gives the same bytes with the same zlib. Most of a ROCm tree is bytes that are already compressed (debs,
offload bundles): deflating them costs about 20× more CPU than storing them here and saves nothing, so each
1 MiB chunk is sampled and stored or deflated at level 1, in one gzip stream written on every core by
``cairn.deflate`` (the choice depends on the bytes alone, so it is as reproducible as the rest).

``unpack`` reads an archive that came from a bucket and so is not trusted: only directories, regular files
and symlinks; every name relative, without ``..`` or empty parts; every parent a directory the archive itself
created earlier (never a symlink, so nothing is written through a link to outside the destination). Anything
else raises ``DamagedArchive``. Link targets are kept verbatim and never followed. The caller still digests what was unpacked: the archive's own claims prove nothing.
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

from cairn.deflate import CHUNK, Deflater
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
    hashed = _Hashing(out)
    with Deflater(hashed, DEFLATED, choose=_level_for) as members, \
            tarfile.open(fileobj=members, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        tar.copybufsize = CHUNK  # not 16 KiB: a GB tree was 65,000 calls into zlib and sha256 per GB
        for rel, kind, _ in tree_entries(root, digests=False):
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
    hashed.flush()
    return hashed.sha256.hexdigest()


STORED, DEFLATED = 0, 1  # zlib levels: level 1 deflates text 2.5× faster than 6 for an archive about 1.5× bigger
_SAMPLE = 8 << 10


def _level_for(data: bytes) -> int:
    """STORED for a chunk whose samples from its start and middle do not shrink by a tenth at level 1 (bytes
    compressed already: a deb, the offload bundles that are most of a ROCm library), else DEFLATED. Chosen per
    chunk, not per file: a library is compressible symbol tables around incompressible code objects."""
    if len(data) < 2 * _SAMPLE:
        return DEFLATED  # tar's headers and small files: text
    middle = len(data) // 2
    sample = data[:_SAMPLE] + data[middle:middle + _SAMPLE]
    return STORED if len(zlib.compress(sample, 1)) > 0.9 * len(sample) else DEFLATED


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
