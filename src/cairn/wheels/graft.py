"""Grafting: the libraries an SDK wheel links that no manylinux host is required to have, carried in the wheel.

What ``auditwheel repair`` does, for ROCm and from pinned inputs: Debian's ROCm libraries link libLLVM, libdrm,
libelf, libnuma, libzstd, Boost, fmt, SQLite …, which a stock Debian 13 or Ubuntu 24.04 does not have (or has in
another version). Each such library comes from a ``[[wheels.graft]]`` .deb of the release manifest (pinned by
version, sha256 and suite, fetched like every deb, its ``copyright`` file shipped in the wheel's
``.dist-info/licenses/<package>/``) and is:

- copied into the wheel's ``lib/`` under a mangled soname, ``libzstd-<8 hex of its sha256>.so.1``, so a host
  copy of the same soname already loaded into the process (a desktop's libLLVM via Mesa) never stands in for
  it, nor it for the host's;
- given ``$ORIGIN`` as its run path, so its own grafted dependencies load from beside it;
- named in every ``DT_NEEDED`` that asked for the original soname (patchelf ``--replace-needed``).

The closure is followed: a grafted library's own dependencies (libLLVM → libedit, libffi, libxml2, libz3 …)
are grafted too. A library that neither the wheel set carries, nor a graft provides, nor the manylinux policy
lets a host provide stays unresolved and the wheel's ``PlatformTag.check`` stops the build naming it.

``core`` grafts once for everything: the libraries and devel wheels, which require ``rocm-sdk-core`` exactly,
read core's map (its ``report.json``, ``grafted``) and point their own ``DT_NEEDED`` at core's copies, which
their run path already reaches.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cairn import proc
from cairn.digest import file_sha256
from cairn.formats import elf

_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib", "lib")


@dataclass(frozen=True)
class Graftable:
    """One shared library a pinned .deb provides."""

    soname: str
    path: Path  # unpacked from the .deb (read only: copied before patching)
    package: str
    version: str
    copyright: Path | None

    @property
    def mangled(self) -> str:
        return mangle(self.soname, file_sha256(self.path))


def mangle(soname: str, sha256: str) -> str:
    """``libzstd.so.1`` → ``libzstd-1a2b3c4d.so.1`` (auditwheel's scheme: the name before ``.so``, a short hash of
    the file, then the rest)."""
    base, dot, rest = soname.partition(".so")
    return f"{base}-{sha256[:8]}{dot}{rest}"


def unpack(debs: list[tuple[dict[str, Any], Path]], scratch: Path, log: IO[str]) -> dict[str, Graftable]:
    """soname → library of every pinned graft .deb (``(pin, path of the fetched .deb)``)."""
    found: dict[str, Graftable] = {}
    for pin, deb in debs:
        package, version = str(pin["package"]), str(pin["version"])
        root = scratch / f"deb-{package}"
        root.mkdir(parents=True)
        proc.run(["dpkg-deb", "-x", str(deb), str(root)], log=log)
        copyright_file = root / "usr" / "share" / "doc" / package / "copyright"
        for folder in _LIB_DIRS:
            for path in sorted((root / folder).glob("lib*.so*")) if (root / folder).is_dir() else []:
                real = path.resolve()
                info = elf.inspect(real) if real.is_file() else None
                if info is None or not info.soname or info.soname in found:
                    continue
                found[info.soname] = Graftable(info.soname, real, package, version,
                                               copyright_file if copyright_file.is_file() else None)
    return found


@dataclass
class Grafting:
    """What grafting did to one wheel: library copies to add, and the map of renamed sonames."""

    copies: dict[str, tuple[Graftable, Path]]  # mangled name → (library, patched private copy)
    renamed: dict[str, str]  # original soname → mangled (this wheel's grafts and the required wheels')

    def report(self) -> dict[str, Any]:
        """soname → the file that stands for it in this wheel and the package it came from."""
        return {lib.soname: {"file": mangled, "package": lib.package, "version": lib.version}
                for mangled, (lib, _copy) in sorted(self.copies.items())}


def graft(elves: list[Path], available: dict[str, Graftable], carried: set[str], inherited: dict[str, str],
          provided: set[str], scratch: Path, log: IO[str]) -> Grafting:
    """Graft into a wheel whose ELF files (private copies, patched in place) are ``elves``.

    ``carried``: packages this wheel carries; ``inherited``: soname → mangled name of the grafts of the wheels
    it requires (core's); ``provided``: sonames those wheels and this one carry anyway."""
    infos = {p: elf.inspect(p) for p in elves}
    own = provided | {i.soname for i in infos.values() if i and i.soname}
    renamed = dict(inherited)
    copies: dict[str, tuple[Graftable, Path]] = {}
    queue = [n for i in infos.values() if i for n in i.needed]
    while queue:
        name = queue.pop()
        if name in renamed or name in own or elf.host_provided(name):
            continue
        lib = available.get(name)
        if lib is None or lib.package not in carried:
            continue  # unresolved: the wheel's tag check names it
        mangled = lib.mangled
        copy = scratch / "grafted" / mangled
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib.path, copy)
        copy.chmod(0o755)
        renamed[name] = mangled
        copies[mangled] = (lib, copy)
        info = elf.inspect(copy)
        queue += list(info.needed) if info else []
        log.write(f"graft {name} from {lib.package} {lib.version} as {mangled}\n")
    for path in [*elves, *(c for _lib, c in copies.values())]:
        info = elf.inspect(path)
        changes = [(n, renamed[n]) for n in (info.needed if info else ()) if n in renamed]
        for old, new in changes:  # one call per change (see cairn.wheels.engine.relink)
            proc.run(["patchelf", "--replace-needed", old, new, str(path)], log=log)
    for mangled, (_lib, copy) in copies.items():
        proc.run(["patchelf", "--set-soname", mangled, str(copy)], log=log)
        elf.set_rpath(copy, "$ORIGIN", log)
    return Grafting(copies, renamed)
