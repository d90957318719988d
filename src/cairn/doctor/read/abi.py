"""The C and C++ runtimes a wheel's libraries load against: the host's glibc and libstdc++ versions.

A wheel tagged ``manylinux_2_N`` needs glibc ≥ 2.N, and its C++ code the ``GLIBCXX_3.4.M`` symbol versions
the host's ``libstdc++.so.6`` defines; a host below either installs (``linux_x86_64``) or refuses (manylinux)
what it cannot load. On a live host glibc is the running one (``os.confstr("CS_GNU_LIBC_VERSION")``); in a
captured tree, and for libstdc++ everywhere, it is the newest version the library *defines* (its ELF
``.gnu.version_d``): ``GLIBC_2.41`` in ``libc.so.6``, ``GLIBCXX_3.4.33`` in ``libstdc++.so.6``. The library
is the one the loader finds: the first of the search-path directories (``read.libraries.search_path``)
that holds it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from elftools.common.exceptions import ELFError

from cairn.doctor.read.files import Root
from cairn.doctor.read.libraries import search_path

_GLIBC = re.compile(r"^GLIBC_(\d+\.\d+(?:\.\d+)?)$")
_GLIBCXX = re.compile(r"^GLIBCXX_(\d+\.\d+(?:\.\d+)?)$")


def version_key(text: str) -> tuple[int, ...]:
    """``2.39`` → (2, 39); for comparing glibc and GLIBCXX versions."""
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def defined_versions(path: Path, pattern: re.Pattern[str]) -> list[str]:
    """The symbol versions an ELF library defines whose name matches ``pattern`` (its first group each)."""
    return _versions(path, pattern, needed=False)


def needed_versions(path: Path, pattern: re.Pattern[str]) -> list[str]:
    """The symbol versions an ELF file needs from other libraries (``.gnu.version_r``) matching ``pattern``."""
    return _versions(path, pattern, needed=True)


def _versions(path: Path, pattern: re.Pattern[str], *, needed: bool) -> list[str]:
    """The first group of ``pattern`` for every version name in the file's verneed (``needed``) or verdef section;
    [] for a file that is not a readable ELF."""
    # lazy: elftools, pdb, 35 ms at start-up (python -X importtime)
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection

    kind = GNUVerNeedSection if needed else GNUVerDefSection
    found: list[str] = []
    try:
        with open(path, "rb") as handle:
            for section in ELFFile(handle).iter_sections():
                if isinstance(section, kind):
                    for _entry, auxiliaries in section.iter_versions():
                        found += [m[1] for aux in auxiliaries if (m := pattern.match(aux.name))]
    except (OSError, ELFError, ValueError):
        return []
    return found


def newest(versions: list[str]) -> str:
    return max(versions, key=version_key) if versions else ""


def _find(r: Root, ld_library_path: str, name: str) -> str:
    """The host path of the library the loader would find first ("" when none)."""
    for directory, _why in search_path(r, ld_library_path):
        if r(f"{directory.rstrip('/')}/{name}").is_file():
            return f"{directory.rstrip('/')}/{name}"
    return ""


def read_glibc(r: Root, live: bool, ld_library_path: str) -> tuple[str, str]:
    """(glibc version, where it was read); ("", "") when neither the running C library nor libc.so.6 says."""
    if live:
        try:
            running = os.confstr("CS_GNU_LIBC_VERSION") or ""
        except (ValueError, OSError):
            running = ""
        if running.startswith("glibc "):
            return running.split()[1], 'os.confstr("CS_GNU_LIBC_VERSION")'
    shown = _find(r, ld_library_path, "libc.so.6")
    version = newest(defined_versions(r(shown), _GLIBC)) if shown else ""
    return (version, f"{shown} (newest GLIBC_ version it defines)") if version else ("", "")


def read_glibcxx(r: Root, ld_library_path: str) -> tuple[str, str]:
    """(newest GLIBCXX_ version the host's libstdc++.so.6 defines, its path); ("", "") without one."""
    shown = _find(r, ld_library_path, "libstdc++.so.6")
    version = newest(defined_versions(r(shown), _GLIBCXX)) if shown else ""
    return (version, shown) if version else ("", "")


GLIBC_NEED = re.compile(r"^GLIBC_(\d+\.\d+(?:\.\d+)?)$")
GLIBCXX_NEED = _GLIBCXX
