"""Debian archive indexes read straight from the archive: which versions a suite serves, and their files.

The host is Debian 12 and its apt knows nothing of sid or experimental, so Cairn reads a suite's
``InRelease`` and ``main/binary-<arch>/Packages.xz`` itself. ``InRelease`` is checked with ``gpgv`` against
Debian's archive keyring and ``Packages.xz`` against the sha256 that ``InRelease`` lists for it, so an index
is trusted only when Debian signed it. A frozen suite (``Valid-Until`` in the past, as sid and experimental
are on the archive this project builds from) is still accepted: the signature proves the bytes, and every
.deb is pinned by its own sha256 anyway.

Indexes are cached per archive URL and suite; the cached ``Packages.xz`` is reused only while the signed
``InRelease`` still names its digest. Its decompressed ``Packages`` is kept beside it and checked, on every
read, against the digest ``InRelease`` lists for the uncompressed file, so the signature still vouches for it.
Each stanza is parsed only when its package is asked for (``PackageIndex``): a plan asks for a hundred
of the 76 000 packages sid serves, and decompressing and parsing all of them took about four seconds of every
``cairn build`` and ``cairn plan``.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cairn import proc
from cairn.errors import CairnError
from cairn.io import atomic_write, cache_dir
from cairn.remote.url import read_url
from cairn.sources.debversion import compare

KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
_FIELD = re.compile(r"^([A-Za-z0-9-]+): ?(.*)$")


@dataclass(frozen=True)
class DebEntry:
    """One binary package version in a suite's index."""

    package: str
    version: str
    filename: str  # pool path under the archive root
    sha256: str
    size: int
    gpu_archs: tuple[str, ...]  # X-Rocm-Gpu-Architecture: what Debian says it built device code for
    depends: str


def resolve_mirror(mirror: str = "host") -> str:
    """``host`` means the Debian archive this host's apt already uses (first ``deb`` URI of its sources).

    A manifest or recipe then names no archive of its own, and a host behind a local mirror keeps using it.
    ``$CAIRN_DEBIAN_MIRROR`` overrides it (another archive, or one that is gone, to test the source mirror).
    """
    if mirror != "host":
        return mirror.rstrip("/")
    if os.environ.get("CAIRN_DEBIAN_MIRROR"):
        return os.environ["CAIRN_DEBIAN_MIRROR"].rstrip("/")
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
               *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in sources:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            if line.startswith("URIs:") and len(words) > 1 and "security" not in words[1]:
                return words[1].rstrip("/")
            if words[:1] == ["deb"] and len(words) > 2:
                uri = next(w for w in words[1:] if not w.startswith("["))
                if "security" not in uri:
                    return uri.rstrip("/")
    raise CairnError("no Debian archive found in /etc/apt/sources.list(.d) — name one with mirror = \"<archive URL>\"")


def parse_packages(text: str) -> PackageIndex:
    """``Packages`` index text → package name → its entries (every version the suite serves)."""
    return PackageIndex(text)


class PackageIndex(Mapping[str, list[DebEntry]]):
    """A ``Packages`` index by package name; a name's stanzas are parsed the first time it is asked for.

    Splitting the text into stanzas and reading each one's first line is all the work done up front. A stanza
    without ``Filename`` or ``SHA256`` is not an entry; a name with no entry is not in the index."""

    def __init__(self, text: str) -> None:
        self._stanzas: dict[str, list[str]] = {}
        for stanza in text.split("\n\n"):
            name = _stanza_name(stanza)
            if name:
                self._stanzas.setdefault(name, []).append(stanza)
        self._entries: dict[str, list[DebEntry]] = {}

    def __getitem__(self, name: str) -> list[DebEntry]:
        if name not in self._entries:
            entries = [entry for entry in map(_entry, self._stanzas.get(name, ())) if entry is not None]
            if not entries:
                raise KeyError(name)
            self._entries[name] = entries
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._stanzas if name in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except KeyError:
            return False
        return True


def _stanza_name(stanza: str) -> str:
    """The package a stanza describes, from its first line (where Debian writes ``Package:``), else from any line."""
    start = stanza.lstrip("\n")
    first = start.split("\n", 1)[0]
    if first.startswith("Package:"):
        return first[len("Package:"):].strip()
    return next((m[2].strip() for line in start.splitlines() if (m := _FIELD.match(line)) and m[1] == "Package"), "")


def _entry(stanza: str) -> DebEntry | None:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        match = _FIELD.match(line)
        if match:
            fields[match[1]] = match[2]
    if "Package" not in fields or "Filename" not in fields or "SHA256" not in fields:
        return None
    return DebEntry(
        package=fields["Package"], version=fields.get("Version", ""), filename=fields["Filename"],
        sha256=fields["SHA256"], size=int(fields.get("Size", "0") or 0),
        gpu_archs=tuple(fields.get("X-Rocm-Gpu-Architecture", "").split()), depends=fields.get("Depends", ""),
    )


def _release_digest(inrelease: str, member: str) -> str:
    """The sha256 the signed ``InRelease`` lists for ``member`` (e.g. ``main/binary-amd64/Packages.xz``)."""
    digest = _listed_digest(inrelease, member)
    if digest is None:
        raise CairnError(f"the archive's InRelease lists no sha256 for {member}")
    return digest


def _listed_digest(inrelease: str, member: str) -> str | None:
    in_sha256 = False
    for line in inrelease.splitlines():
        if line.startswith("SHA256:"):
            in_sha256 = True
            continue
        if in_sha256:
            if not line.startswith(" "):
                break
            digest, _size, name = line.split()
            if name == member:
                return digest
    return None


def suite_index(suite: str, mirror: str = "host", arch: str = "amd64") -> Mapping[str, list[DebEntry]]:
    """Every package ``suite`` serves on ``mirror``, from its signed index (downloaded or cached)."""
    return _suite_index(resolve_mirror(mirror), suite, arch)


@cache
def _suite_index(base: str, suite: str, arch: str) -> PackageIndex:
    folder = cache_dir("debian") / hashlib.sha256(f"{base} {suite} {arch}".encode()).hexdigest()[:16]
    inrelease_bytes = read_url(f"{base}/dists/{suite}/InRelease")
    signed = folder / "InRelease"
    atomic_write(signed, inrelease_bytes)
    if KEYRING.is_file():
        proc.run(["gpgv", "--keyring", str(KEYRING), str(signed)])
    inrelease = inrelease_bytes.decode(errors="replace")
    member = f"main/binary-{arch}/Packages"
    plain_digest = _listed_digest(inrelease, member)
    plain = folder / "Packages"
    if plain_digest is not None and plain.is_file():
        data = plain.read_bytes()
        if hashlib.sha256(data).hexdigest() == plain_digest:
            return parse_packages(data.decode(errors="replace"))
    expected = _release_digest(inrelease, f"{member}.xz")
    packages_xz = folder / "Packages.xz"
    if not packages_xz.is_file() or hashlib.sha256(packages_xz.read_bytes()).hexdigest() != expected:
        data = read_url(f"{base}/dists/{suite}/{member}.xz")
        if hashlib.sha256(data).hexdigest() != expected:
            raise CairnError(f"{base}/dists/{suite}/{member}.xz does not match the sha256 its signed InRelease lists")
        atomic_write(packages_xz, data)
    data = lzma.decompress(packages_xz.read_bytes())
    if plain_digest is not None and hashlib.sha256(data).hexdigest() == plain_digest:
        atomic_write(plain, data)  # the next read skips the decompression
    return parse_packages(data.decode(errors="replace"))


def newest(entries: list[DebEntry]) -> DebEntry:
    """The highest version among ``entries`` by Debian's ordering (``dpkg --compare-versions``)."""
    best = entries[0]
    for entry in entries[1:]:
        if compare(entry.version, best.version) > 0:
            best = entry
    return best


def pool_url(entry: DebEntry, mirror: str = "host") -> str:
    return f"{resolve_mirror(mirror)}/{entry.filename}"
