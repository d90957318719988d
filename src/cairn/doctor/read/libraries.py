"""Every copy of the HIP runtime (``libamdhip64.so*``) and amd-smi library (``libamd_smi.so*``) on the host.

Two copies in one environment are a classic ROCm breakage: a framework loads its wheel's copy through
its RPATH, another library finds a second one on ``LD_LIBRARY_PATH``, and the two runtimes fight over
one GPU. Places read, relative to the root, in the dynamic loader's order: the ``LD_LIBRARY_PATH``
directories (from ``proc/self/environ``), the directories ``etc/ld.so.conf`` names (with its
``include`` globs, ``etc/ld.so.conf.d/*.conf`` on Debian), the default directories; then places the
loader never searches, found only through the RPATH of the libraries beside them: each ``opt/rocm*/lib``
and the shared objects of the installed ROCm wheels (a grafted ``libamdhip64-<hash>.so.N`` counts). Symbolic links are followed inside the root, so
``/opt/rocm`` → ``/opt/rocm-6.4.1`` or ``libamdhip64.so`` → ``libamdhip64.so.6.4.60401`` count once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from cairn.doctor.read.files import Root, text_of
from cairn.doctor.snapshot import Distribution, LibraryCopy

LIBRARIES = ("libamdhip64", "libamd_smi")
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
_MAX_LINKS = 40  # as the kernel's limit on symbolic links in one path walk
_MAX_INCLUDE_DEPTH = 4


def search_path(r: Root, ld_library_path: str) -> list[tuple[str, str]]:
    """The directories the loader searches for a library without an RPATH, in order, with why."""
    dirs = [(d, "LD_LIBRARY_PATH") for d in ld_library_path.split(":") if d.startswith("/")]
    dirs += _ld_so_conf(r, "/etc/ld.so.conf", 0)
    dirs += [(d, "default loader directory") for d in DEFAULT_DIRS]
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for directory, why in dirs:
        real = host_realpath(r, directory)
        if real not in seen:
            seen.add(real)
            out.append((directory, why))
    return out


def _ld_so_conf(r: Root, shown: str, depth: int) -> list[tuple[str, str]]:
    """Each directory an ld.so.conf names, with the file that names it, includes followed in place."""
    out: list[tuple[str, str]] = []
    for line in text_of(r(shown)).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include") and depth < _MAX_INCLUDE_DEPTH:
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if not pattern.startswith("/"):
                pattern = str(PurePosixPath(shown).parent / pattern)
            for found in sorted(r.base.glob(pattern.lstrip("/"))):
                out += _ld_so_conf(r, "/" + str(found.relative_to(r.base)), depth + 1)
        elif line.startswith("/"):
            out.append((line.rstrip("/") or "/", shown))
    return out


def read_library_copies(r: Root, ld_library_path: str, dists: Iterable[Distribution]) -> tuple[LibraryCopy, ...]:
    places: list[tuple[str, str, int | None]] = [(d, why, rank) for rank, (d, why) in enumerate(search_path(r, ld_library_path))]
    opt = r("opt")
    for tree in sorted(opt.glob("rocm*")) if opt.is_dir() else []:
        places.append((f"/opt/{tree.name}/lib", f"ROCm install /opt/{tree.name}", None))
    found: list[LibraryCopy] = []
    seen: set[str] = set()

    def add(library: str, shown: str, where: str, rank: int | None) -> None:
        real = host_realpath(r, shown)
        if real not in seen and r(real).is_file():
            seen.add(real)
            found.append(LibraryCopy(library, shown, real, where, rank))

    for directory, why, rank in places:
        for library in LIBRARIES:
            for file in sorted(r(directory).glob(f"{library}.so*")):
                add(library, f"{directory.rstrip('/')}/{file.name}", why, rank)
    for dist in dists:
        for so in dist.shared_objects:
            name = PurePosixPath(so).name
            shown = _shown(r, Path(so))
            for library in LIBRARIES:
                if (name.startswith(library + ".so") or _grafted(library, name)) and shown:
                    add(library, shown, f"wheel {dist.name} {dist.version}", None)
    return tuple(found)


def _grafted(library: str, name: str) -> bool:
    """auditwheel-style grafted copy: ``libamdhip64-1a2b3c4d.so.7`` (hash-mangled so it cannot clash by name)."""
    return re.match(rf"^{re.escape(library)}-[0-9a-f]{{8,}}\.so(\.\d+)*$", name) is not None


def host_realpath(r: Root, shown: str) -> str:
    """The host path ``shown`` resolves to, following symbolic links as the host would — never out of the root."""
    path = PurePosixPath("/")
    todo = list(PurePosixPath(shown).parts[1:])
    hops = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            path = path.parent
            continue
        candidate = path / part
        full = r(str(candidate))
        if full.is_symlink() and hops < _MAX_LINKS:
            hops += 1
            link = PurePosixPath(os.readlink(full))
            if link.is_absolute():
                path = PurePosixPath("/")
                todo = list(link.parts[1:]) + todo
            else:
                todo = list(link.parts) + todo
            continue
        path = candidate
    return str(path)


def _shown(r: Root, path: Path) -> str:
    """``path`` (a real path on this machine) as a path on the host read; "" when it lies outside the root."""
    base = r.base.resolve()
    try:
        return "/" + str(path.relative_to(base)) if base != Path("/") else str(path)
    except ValueError:
        return ""
