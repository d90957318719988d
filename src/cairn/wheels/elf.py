"""What a wheel's native code needs from the system, and how it finds its siblings in site-packages.

``platform_tag`` derives the tag from the binaries themselves: the newest ``GLIBC_x.y`` symbol version any
of them references sets the manylinux level (PEP 600 ``manylinux_2_<y>_x86_64``), and a dependency outside
the manylinux library whitelist that the wheel set does not provide makes the honest tag ``linux_x86_64``
(the wheel only works where that library is installed). ``auditwheel show`` draws the same line; the tests
cross-check it.

RPATHs are rewritten with patchelf to ``$ORIGIN``-relative directories, so the libraries load from
site-packages without ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from cairn import proc

# PEP 600 / auditwheel: libraries every manylinux system provides.
MANYLINUX_LIBS = frozenset({
    "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libc.so.6", "libnsl.so.1",
    "libutil.so.1", "libpthread.so.0", "libresolv.so.2", "libX11.so.6", "libXext.so.6", "libXrender.so.1",
    "libICE.so.6", "libSM.so.6", "libGL.so.1", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libglib-2.0.so.0",
    "ld-linux-x86-64.so.2", "libz.so.1", "libexpat.so.1",
})
MANYLINUX_FLOOR = 17  # manylinux2014: the oldest level current pip and auditwheel still produce for x86_64
_GLIBC = re.compile(r"^GLIBC_2\.(\d+)")


@dataclass(frozen=True)
class ElfInfo:
    path: Path
    soname: str
    needed: tuple[str, ...]
    glibc_minor: int  # newest GLIBC_2.<minor> symbol version referenced (0 when none)
    machine: str
    runpath: str


@dataclass(frozen=True)
class PlatformTag:
    tag: str  # manylinux_2_<y>_x86_64 or linux_x86_64
    glibc_minor: int
    external: tuple[str, ...]  # needed libraries outside the whitelist that the wheels do not provide

    @property
    def reason(self) -> str:
        if self.tag.startswith("manylinux"):
            return f"newest symbol version GLIBC_2.{self.glibc_minor}; only whitelisted system libraries"
        return f"needs system libraries outside the manylinux whitelist: {', '.join(self.external)}"


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def inspect(path: Path) -> ElfInfo | None:
    """soname, DT_NEEDED, RUNPATH and glibc level of an x86-64 ELF file (None for other files)."""
    if path.is_symlink() or not path.is_file() or not is_elf(path):
        return None
    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            soname, runpath, needed, minor = "", "", [], 0
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_NEEDED":
                            needed.append(tag.needed)  # type: ignore[attr-defined]  # pyelftools sets DynamicTag's string attributes with setattr
                        elif tag.entry.d_tag == "DT_SONAME":
                            soname = tag.soname  # type: ignore[attr-defined]  # pyelftools sets DynamicTag's string attributes with setattr
                        elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                            runpath = getattr(tag, "runpath", "") or getattr(tag, "rpath", "")
                elif isinstance(section, GNUVerNeedSection):
                    for _verneed, auxiliaries in section.iter_versions():
                        for aux in auxiliaries:
                            found = _GLIBC.match(aux.name)
                            if found:
                                minor = max(minor, int(found.group(1)))
            return ElfInfo(path, soname, tuple(needed), minor, elf["e_machine"], runpath)
    except ELFError:
        return None


def platform_tag(binaries: Iterable[ElfInfo], provided: Iterable[str] = ()) -> PlatformTag:
    """The honest platform tag for wheels holding ``binaries``; ``provided`` are sonames our wheels ship."""
    infos = list(binaries)
    own = {i.soname for i in infos if i.soname} | {i.path.name for i in infos} | set(provided)
    external = sorted({n for i in infos for n in i.needed} - own - MANYLINUX_LIBS)
    minor = max([MANYLINUX_FLOOR, *(i.glibc_minor for i in infos)])
    if external:
        return PlatformTag("linux_x86_64", minor, tuple(external))
    return PlatformTag(f"manylinux_2_{minor}_x86_64", minor, ())


def set_rpath(path: Path, rpath: str, log: IO[str] | None = None) -> None:
    """Replace the run path of ``path`` (a private copy: never a store file) with ``rpath``."""
    if os.stat(path).st_nlink > 1:
        raise ValueError(f"{path} is hard-linked; copy it before patching")
    proc.run(["patchelf", "--set-rpath", rpath, str(path)], log=log)


def origin_rpath(library_dir: str, *targets: str) -> str:
    """``$ORIGIN``-relative run path from ``library_dir`` to each target dir (site-packages relative)."""
    parts = ["$ORIGIN"]
    for target in targets:
        if target != library_dir:
            parts.append("$ORIGIN/" + os.path.relpath(target, library_dir))
    return ":".join(dict.fromkeys(parts))
