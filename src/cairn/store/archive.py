"""One output tree as one archive, for the shared cache: a zstd-compressed tar with nothing in it but the tree.

``pack`` writes entries sorted by path with owner, group and times zeroed and modes normalized, so the same
tree gives the same bytes with the same zstd. Why zstd at level 1, on one thread: a ROCm tree is gigabytes of
uncompressed libraries next to bytes compressed already (debs, compressed offload bundles). The gzip'd tars
this module wrote before, deflated at level 1 on every core, came out the same size but took several times the
CPU to make and to read back, and on a shared build machine packing and unpacking were most of the time a
cache hit or upload took. One thread keeps the bytes a function of the tree and the zstd version alone.

``unpack`` reads an archive that came from a bucket and so is not trusted: only directories, regular files
and symlinks; every name relative, without ``..`` or empty parts; every parent a directory the archive itself
created earlier (never a symlink, so nothing is written through a link to outside the destination). Anything
else raises ``DamagedArchive``. Link targets are kept verbatim and never followed. The caller still digests what was unpacked: the archive's own claims prove nothing.
It also reads the gzip'd tars of earlier versions (told apart by their first bytes), so a cache they filled
stays usable.

Bounds: an archive from a bucket is read with the ``Bound`` its record names (``measure`` of the tree it was made
from): how many entries the tree has and how many bytes its files hold, blobs included. ``unpack`` stops with
``DamagedArchive`` before a member would take the tree past either, and once the decompressed stream passes
what those entries and bytes can take as tar (``Bound.stream``): a few kilobytes of zstd that unpack to gigabytes
of zeros (or a PAX header of gigabytes, which ``tarfile`` reads into memory) never reach the disk or the RAM.

Blobs: given ``blobs_from``, ``pack`` leaves every file of at least that many bytes out of the archive and writes in
its place an empty member whose PAX header names the file's sha256 and size (``Blob``); the shared cache stores each
such file once, under its sha256, however many trees hold it. A release repeats its wheels in the package, index and
bundle trees, and its libraries in the SDK and image trees: archived whole, the bucket held each of them several
times. ``unpack`` accepts such members only when the caller asks for them (``blobs=[]``), leaves an empty file in
their place and lists them for the caller to fill and check.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

import zstandard

from cairn.digest import file_sha256, tree_entries

CHUNK = 1 << 20
LEVEL = 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
BLOB_SHA256 = "CAIRN.blob.sha256"  # PAX keywords of a member whose bytes are a blob, not in the archive
BLOB_SIZE = "CAIRN.blob.size"


@dataclass(frozen=True)
class Blob:
    """A file of a tree kept out of its archive: its place in the tree, and the bytes it must have."""

    path: str
    sha256: str
    size: int
    executable: bool


class DamagedArchive(ValueError):
    """The bytes are not an archive ``pack`` could have written."""


class PastBound(DamagedArchive):
    """The archive unpacks to more than the ``Bound`` it was read with: it, or the record naming the bound, is wrong."""


# What one entry can add to a tar stream beyond its file's bytes: a header, a PAX header with its own header and
# records (a name and link target up to PATH_MAX each, the blob keywords), and the padding of each to 512 bytes
ENTRY_TAR_BYTES = 12 << 10
END_TAR_BYTES = 2 * 10240  # the end-of-archive blocks and the padding to a full record


@dataclass(frozen=True)
class Bound:
    """How large a tree is: its entries (files, directories, links) and the bytes of its files. A cache record
    names it, and an archive of that tree that unpacks to more is not that tree."""

    entries: int
    size: int

    @property
    def stream(self) -> int:
        """The most bytes a tar of such a tree can take, uncompressed."""
        return self.size + self.entries * ENTRY_TAR_BYTES + END_TAR_BYTES


def measure(root: Path) -> Bound:
    """The ``Bound`` of the tree at ``root`` (a walk of names and sizes: no file is read)."""
    entries = tree_entries(root, digests=False)
    size = sum((root / rel).lstat().st_size for rel, kind, _ in entries if kind in ("file", "exec"))
    return Bound(len(entries), size)


class _BoundedReader:
    """A read-only stream that raises ``DamagedArchive`` once more than ``limit`` bytes came through it."""

    def __init__(self, inner: IO[bytes] | Any, limit: int) -> None:
        self.inner, self.limit, self.count = inner, limit, 0

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size if size is not None and size >= 0 else self.limit + 1 - self.count)
        self.count += len(data)
        if self.count > self.limit:
            raise PastBound(f"it unpacks to more than the {self.limit} bytes of tar its record allows")
        return data


def pack(root: Path) -> bytes:
    """The archive of ``root`` in memory (``pack_to`` writes the same bytes to a file)."""
    buffer = io.BytesIO()
    pack_to(root, buffer)
    return buffer.getvalue()


def pack_to(root: Path, out: BinaryIO, *, blobs_from: int = 0, blobs: list[Blob] | None = None) -> str:
    """Write the archive of ``root`` to ``out`` as it is made (a tree of gigabytes never sits in memory);
    returns the sha256 of the bytes written, which the upload's checksum needs before it starts. With
    ``blobs_from``, files of at least that size are only named (their ``Blob`` appended to ``blobs``)."""
    if blobs_from and blobs is None:
        raise ValueError("blobs_from needs a list to report the blobs in")
    hashed: Any = HashingWriter(out)  # file-like enough for zstd's writer
    compressor = zstandard.ZstdCompressor(level=LEVEL, threads=0)
    with compressor.stream_writer(hashed, closefd=False) as members, \
            tarfile.open(fileobj=members, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        tar.copybufsize = CHUNK  # type: ignore[attr-defined]  # not 16 KiB: a GB tree was 65,000 calls into zstd and sha256 per GB
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
                info.mode, size = (0o755 if kind == "exec" else 0o644), path.stat().st_size
                if blobs_from and size >= blobs_from:
                    assert blobs is not None
                    blob = Blob(rel, file_sha256(path), size, kind == "exec")
                    info.pax_headers = {BLOB_SHA256: blob.sha256, BLOB_SIZE: str(size)}
                    tar.addfile(info)
                    blobs.append(blob)
                    continue
                info.size = size
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
    hashed.flush()
    return hashed.sha256.hexdigest()


class HashingWriter:
    """A write-only file that hashes what passes through it to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.sha256 = out, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


def unpack(archive: bytes | Path, dest: Path, *, blobs: list[Blob] | None = None,
           bound: Bound | None = None) -> list[tuple[str, str, bool]]:
    """Unpack ``archive`` (bytes, or a file read as it is unpacked) into the empty directory ``dest``; raises
    DamagedArchive for anything ``pack`` never writes, OSError for this machine's own failures. Returns (path,
    sha256, executable) of every regular file, as hashed while writing it. Members that name a blob are accepted
    only when ``blobs`` is a list: each leaves an empty file, to be filled by the caller, and is appended to it.
    With ``bound`` (the tree's, as its record names it), an archive that would unpack to more entries or bytes
    is DamagedArchive before the member that would pass it is written."""
    made = {""}
    files: list[tuple[str, str, bool]] = []
    entries, size = 0, 0
    try:
        with _open_source(archive) as raw, _tar_of(raw, bound) as tar:
            for member in tar:
                entries += 1
                if member.isfile():  # a blob's size as its member names it (a bad one is refused below)
                    named = member.pax_headers.get(BLOB_SIZE, "")
                    size += int(named) if named.isdigit() else member.size
                if bound is not None and (entries > bound.entries or size > bound.size):
                    what = f"{bound.entries} entries" if entries > bound.entries else f"{bound.size} bytes"
                    raise PastBound(f"it holds more than the {what} its record names (at {member.name[:200]!r})")
                parent, _, _ = member.name.rpartition("/")
                _check_name(member.name, parent, made)
                target = dest / member.name
                if member.isdir():
                    target.mkdir()
                    made.add(member.name)
                elif member.issym():
                    os.symlink(member.linkname, target)
                elif member.isfile() and (BLOB_SHA256 in member.pax_headers or BLOB_SIZE in member.pax_headers):
                    if blobs is None:
                        raise DamagedArchive(f"entry {member.name!r} names a blob, which this kind of archive never does")
                    blob = _blob_of(member)
                    with open(target, "xb"):
                        pass  # its place, so a later member of the same name clashes here as any other would
                    os.chmod(target, 0o755 if blob.executable else 0o644)
                    blobs.append(blob)
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
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError, UnicodeError) as exc:
        raise DamagedArchive(f"unreadable archive: {exc}") from None
    # any other OSError (a full disk, a read error) is this machine's, not the archive's: the caller's to report
    return files


def _blob_of(member: tarfile.TarInfo) -> Blob:
    sha256, size = member.pax_headers.get(BLOB_SHA256, ""), member.pax_headers.get(BLOB_SIZE, "")
    if len(sha256) != 64 or any(ch not in "0123456789abcdef" for ch in sha256) or not size.isdigit() or member.size:
        raise DamagedArchive(f"entry {member.name!r} names a blob badly (sha256 {sha256[:70]!r}, size {size[:20]!r})")
    return Blob(member.name, sha256, int(size), bool(member.mode & 0o111))


def _open_source(archive: bytes | Path) -> IO[bytes]:
    return io.BytesIO(archive) if isinstance(archive, bytes) else open(archive, "rb")  # closed by the caller's with


def _tar_of(source: IO[bytes], bound: Bound | None = None) -> tarfile.TarFile:
    """The tar inside ``source``, read as a stream: zstd (what ``pack`` writes) or gzip (what it wrote before);
    with ``bound``, no more decompressed bytes than such a tree's tar can take are ever read."""
    head = source.read(4)
    source.seek(0)
    reader: Any
    if head == ZSTD_MAGIC:
        reader = zstandard.ZstdDecompressor().stream_reader(source, read_size=CHUNK, read_across_frames=True)
    elif head[:2] == GZIP_MAGIC:
        reader = gzip.GzipFile(fileobj=source, mode="rb")
    else:
        raise DamagedArchive("unreadable archive: neither zstd nor gzip")
    if bound is not None:
        reader = _BoundedReader(reader, bound.stream)
    return tarfile.open(fileobj=reader, mode="r|")


def _check_name(name: str, parent: str, made: set[str]) -> None:
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise DamagedArchive(f"entry {name!r} is not a plain relative path")
    if parent not in made:
        raise DamagedArchive(f"entry {name!r} comes before its directory (or its directory is a link)")
