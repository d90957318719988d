"""What a wheel's native code needs from the system, and how it finds its siblings in site-packages.

``platform_tag`` derives the tag from the binaries themselves, with auditwheel's own policy data
(``auditwheel.policy``, the manylinux policies of PEP 600): the lowest ``manylinux_2_<N>_x86_64`` whose symbol
versions (GLIBC, GLIBCXX, CXXABI, GCC, ZLIB, LIBATOMIC) cover every versioned symbol the binaries reference.
A glibc newer than auditwheel's newest policy (sid's ``GLIBC_2.43``) still gets its PEP 600 tag from the glibc
version alone, as long as everything else fits the newest policy.

Every ``DT_NEEDED`` must resolve inside the set one ``pip install`` brings — this wheel and the wheels it
requires (``provided``) — or be a library the policy lets a host provide (glibc's, libgcc_s, libstdc++, libz …).
Anything else is *unresolved*: ``PlatformTag.check`` refuses to write such a wheel (``linux_x86_64`` is never
made); the fix is to graft the library (``cairn.wheels.graft``).

RPATHs are rewritten with patchelf to ``$ORIGIN``-relative directories, so the libraries load from
site-packages without ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

from auditwheel.architecture import Architecture
from auditwheel.libc import Libc
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import SymbolTableSection

from cairn import proc
from cairn.errors import CheckFailed

MANYLINUX_FLOOR = 17  # manylinux2014: the oldest level current pip and auditwheel still produce for x86_64
_GLIBC = re.compile(r"^GLIBC_2\.(\d+)$")
_TAG = re.compile(r"^manylinux_2_(\d+)_x86_64$")


@dataclass(frozen=True)
class ElfInfo:
    path: Path
    soname: str
    needed: tuple[str, ...]
    glibc_minor: int  # newest GLIBC_2.<minor> symbol version referenced (0 when none)
    machine: str
    runpath: str
    versions: tuple[tuple[str, str], ...] = ()  # (library, version) of every versioned symbol it references

    def glibc_symbols(self, above: int) -> list[str]:
        """``name@GLIBC_2.N`` of the dynamic symbols needing a glibc newer than ``2.<above>`` (for error lines)."""
        return glibc_symbols(self.path, above)


@dataclass(frozen=True)
class PlatformTag:
    tag: str  # manylinux_2_<N>_x86_64
    glibc_minor: int  # newest GLIBC_2.<minor> any binary references
    external: tuple[str, ...]  # DT_NEEDED neither the wheel set carries nor the policy lets a host provide
    needed_by: tuple[tuple[str, str], ...] = ()  # (unresolved library, a file that needs it)
    policy: str = ""  # the auditwheel policy whose symbol versions the binaries fit ("" beyond its newest)

    @property
    def minor(self) -> int:
        return int(self.tag.split("_")[2])

    @property
    def reason(self) -> str:
        base = f"newest symbol version GLIBC_2.{self.glibc_minor}"
        if self.policy and self.policy != self.tag:
            base += f"; C++/GCC symbol versions need {self.policy}"
        if self.external:
            return base + f"; needs libraries no wheel carries: {', '.join(self.external)}"
        return base + "; every other library in the wheel set or allowed by the manylinux policy"

    def check(self, wheel: str) -> None:
        """Refuse a wheel whose libraries would not load where it installs (the honest tag would be
        ``linux_x86_64``, which is never published)."""
        if not self.external:
            return
        lib, by = self.needed_by[0] if self.needed_by else (self.external[0], "?")
        more = f" (and {len(self.external) - 1} more: {', '.join(self.external[1:])})" if len(self.external) > 1 else ""
        raise CheckFailed(f"{wheel}: {by} needs {lib}{more}, which neither this wheel nor the wheels it requires "
                          "carry and the manylinux policy does not let a host provide — graft it from a pinned .deb "
                          "([[wheels.graft]] in the release manifest, docs/wheels.md)")


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
            versions: set[tuple[str, str]] = set()
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
                    for verneed, auxiliaries in section.iter_versions():
                        for aux in auxiliaries:
                            versions.add((str(verneed.name), str(aux.name)))
                            found = _GLIBC.match(aux.name)
                            if found:
                                minor = max(minor, int(found.group(1)))
            return ElfInfo(path, soname, tuple(needed), minor, elf["e_machine"], runpath, tuple(sorted(versions)))
    except ELFError:
        return None


@cache
def _policies() -> Any:
    """auditwheel's manylinux policies for x86_64 (its policy data, not rules re-derived here)."""
    # lazy: auditwheel, packaging, email, 49 ms at start-up (python -X importtime)
    from auditwheel.policy import WheelPolicies

    return WheelPolicies(libc=Libc.GLIBC, arch=Architecture.x86_64)


def host_provided(soname: str) -> bool:
    """A library the manylinux policy lets a host provide (the dynamic loader always is)."""
    return soname.startswith("ld-linux") or soname in _policies().highest.whitelist


def platform_tag(binaries: Iterable[ElfInfo], provided: Iterable[str] = ()) -> PlatformTag:
    """The honest platform tag for a wheel holding ``binaries``; ``provided`` are the sonames the wheels it
    requires carry (``rocm-sdk-core`` for the libraries wheel …). See the module docstring."""
    infos = list(binaries)
    own = {i.soname for i in infos if i.soname} | {i.path.name for i in infos} | set(provided)
    needed_by: dict[str, str] = {}
    for info in infos:
        for name in info.needed:
            if name not in own and not host_provided(name):
                needed_by.setdefault(name, info.path.name)
    minor = max([0, *(i.glibc_minor for i in infos)])
    required: dict[str, set[str]] = {}
    for info in infos:
        for library, version in info.versions:
            if library not in own:  # versions our own grafted or sibling libraries define are not the host's
                required.setdefault(library, set()).add(version)
    policies = _policies()
    policy = policies.versioned_symbols_policy(required)
    if policy is policies.linux:
        # newer than any policy auditwheel knows: PEP 600 still names the glibc, if all else fits the newest
        rest = {lib: {v for v in vs if not v.startswith("GLIBC_")} for lib, vs in required.items()}
        if policies.versioned_symbols_policy(rest) is policies.linux:
            beyond = sorted(v for vs in rest.values() for v in vs
                            if not any(v.partition("_")[0] == k and v.partition("_")[2] in vals
                                       for k, vals in policies.highest.symbol_versions.items()))
            raise CheckFailed(f"{infos[0].path.name}: symbol versions {', '.join(beyond[:5])} are newer than any "
                              "manylinux policy auditwheel knows — build against an older C++ runtime")
        level = minor
        policy_name = ""
    else:
        match = _TAG.match(policy.name)
        level = int(match.group(1)) if match else MANYLINUX_FLOOR
        policy_name = policy.name
    level = max(level, minor, MANYLINUX_FLOOR)
    external = tuple(sorted(needed_by))
    return PlatformTag(f"manylinux_2_{level}_x86_64", minor, external, tuple((n, needed_by[n]) for n in external),
                       policy_name)


def glibc_symbols(path: Path, above: int) -> list[str]:
    """The dynamic symbols of ``path`` whose version is ``GLIBC_2.N`` with N > ``above``, as ``name@GLIBC_2.N``."""
    found = []
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        dynsym = elf.get_section_by_name(".dynsym")
        versym = elf.get_section_by_name(".gnu.version")
        verneed = elf.get_section_by_name(".gnu.version_r")
        if not isinstance(dynsym, SymbolTableSection) or not isinstance(versym, GNUVerSymSection) \
                or not isinstance(verneed, GNUVerNeedSection):
            return []
        names = {aux["vna_other"]: aux.name for _v, auxes in verneed.iter_versions() for aux in auxes}
        for index, symbol in enumerate(dynsym.iter_symbols()):
            if symbol["st_shndx"] != "SHN_UNDEF" or not symbol.name:
                continue
            ndx = versym.get_symbol(index)["ndx"]
            version = names.get(ndx, "") if isinstance(ndx, int) else ""
            match = _GLIBC.match(version)
            if match and int(match.group(1)) > above:
                found.append(f"{symbol.name}@{version}")
    return sorted(set(found))


def check_glibc_floor(root: Path, floor: str, action: str) -> None:
    """Every ELF file under ``root`` (a build action's output) needs at most glibc ``floor`` (``2.39``): the
    release's own compiles must not raise the wheels' tag past what Debian's packages need. Fails naming the
    file and the symbols, before anything is packaged."""
    if not floor:
        return
    limit = int(floor.split(".")[1])
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        info = inspect(path)
        if info is not None and info.glibc_minor > limit:
            symbols = info.glibc_symbols(limit)
            raise CheckFailed(f"{action}: {path.relative_to(root)} needs {', '.join(symbols[:4]) or f'GLIBC_2.{info.glibc_minor}'}"
                              + (f" (+{len(symbols) - 4} more)" if len(symbols) > 4 else "")
                              + f", newer than the release's glibc floor {floor} ([wheels] glibc_floor) — build it so it "
                              "does not (e.g. -fno-math-errno keeps sqrtf an instruction; no _FORTIFY_SOURCE *_chk calls)")


def _elf_hash(name: bytes) -> int:
    """The SysV ELF hash a ``Vernaux`` entry carries for its version name."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def rewrite_symbol_version(path: Path, library: str, version: str, to: str, symbols: Iterable[str],
                           rename: Mapping[str, str] | None = None) -> list[str]:
    """Make ``path`` ask ``library`` for version ``to`` where it asked for ``version``, in place (a private copy).

    Only for a reviewed list (``[[wheels.symbol_version]]`` of the release manifest): every undefined symbol
    bound to that version requirement must be in ``symbols``, and ``to`` must already be a string of the file's
    ``.dynstr`` (it is, for GLIBC_2.2.5). Returns the symbols rewritten; an entry that no longer matches the file
    fails, so a rebuilt library is reviewed again.

    ``rename`` maps a symbol of that version to another name (``__inet_ntop_chk`` → ``inet_ntop``): a fortified
    ``*_chk`` call that exists only in a newer glibc becomes the plain call it checks, whose leading arguments
    are the same (the x86-64 calling convention ignores the trailing buffer size). The fortify check is lost;
    the reviewed ``why`` says so. The new name is an existing string of ``.dynstr`` or is written over the tail
    of the old one (it must be shorter, and no other name may point into it)."""
    wanted = set(symbols)
    rename = dict(rename or {})
    if set(rename) - wanted:
        raise CheckFailed(f"{path.name}: renames {', '.join(sorted(set(rename) - wanted))}, which its symbols list "
                          "does not name — list every renamed symbol")
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        verneed = elf.get_section_by_name(".gnu.version_r")
        versym = elf.get_section_by_name(".gnu.version")
        dynsym = elf.get_section_by_name(".dynsym")
        if not isinstance(verneed, GNUVerNeedSection) or not isinstance(versym, GNUVerSymSection) \
                or not isinstance(dynsym, SymbolTableSection):
            raise CheckFailed(f"{path.name}: no symbol versions to rewrite — drop its [[wheels.symbol_version]] entry")
        dynstr = elf.get_section(verneed["sh_link"])
        strings = dynstr.data()
        base = verneed["sh_offset"]
        found: tuple[int, int] | None = None  # (file offset of the Vernaux entry, its version index)
        offset = base
        for _ in range(verneed.num_versions()):
            _vn_version, vn_cnt, vn_file, vn_aux, vn_next = struct.unpack_from("<HHIII", verneed.data(), offset - base)
            file_name = strings[vn_file:strings.index(b"\0", vn_file)].decode()
            aux = offset + vn_aux
            for _ in range(vn_cnt):
                _hash, _flags, other, name, nxt = struct.unpack_from("<IHHII", verneed.data(), aux - base)
                if file_name == library and strings[name:strings.index(b"\0", name)].decode() == version:
                    found = (aux, other)
                aux += nxt
            offset += vn_next
        if found is None:
            raise CheckFailed(f"{path.name} does not ask {library} for {version} (any more) — review and drop its "
                              "[[wheels.symbol_version]] entry")
        bound = sorted({sym.name for i, sym in enumerate(dynsym.iter_symbols())
                        if sym["st_shndx"] == "SHN_UNDEF" and versym.get_symbol(i)["ndx"] == found[1]})
        if set(bound) - wanted:
            raise CheckFailed(f"{path.name}: {version} of {library} also covers {', '.join(sorted(set(bound) - wanted))}, "
                              "which the reviewed list does not name — review them and list them, or keep the tag")
        target = strings.find(b"\0" + to.encode() + b"\0")
        if target < 0:
            raise CheckFailed(f"{path.name}: its string table has no {to}; the rewrite cannot name it")
        target += 1
        renames = _plan_renames(path, elf, dynsym, strings, found[1], versym, rename) if rename else []
        dynstr_offset = dynstr["sh_offset"]
    with open(path, "r+b") as handle:
        handle.seek(found[0])
        _hash, flags, other, _name, nxt = struct.unpack("<IHHII", handle.read(16))
        handle.seek(found[0])
        handle.write(struct.pack("<IHHII", _elf_hash(to.encode()), flags, other, target, nxt))
        for entry_offset, name_offset, written in renames:
            if written is not None:
                handle.seek(dynstr_offset + name_offset)
                handle.write(written)
            handle.seek(entry_offset)
            handle.write(struct.pack("<I", name_offset))
    return bound


def _plan_renames(path: Path, elf: ELFFile, dynsym: SymbolTableSection, strings: bytes, version_index: int,
                  versym: GNUVerSymSection, rename: Mapping[str, str]) -> list[tuple[int, int, bytes | None]]:
    """Where each renamed symbol's ``st_name`` goes: (file offset of the field, new ``.dynstr`` offset, bytes to
    write there or None when the name already exists). Refuses a rename that would touch a string another entry
    of the file points into."""
    if elf.elfclass != 64 or not elf.little_endian:
        raise CheckFailed(f"{path.name}: symbol renames are written for 64-bit little-endian ELF only")
    names_in_use = [sym["st_name"] for sym in dynsym.iter_symbols()]
    plans: list[tuple[int, int, bytes | None]] = []
    seen: set[str] = set()
    for index, sym in enumerate(dynsym.iter_symbols()):
        if sym.name not in rename or sym["st_shndx"] != "SHN_UNDEF" or versym.get_symbol(index)["ndx"] != version_index:
            continue
        seen.add(sym.name)
        new = rename[sym.name].encode()
        entry_offset = dynsym["sh_offset"] + index * dynsym["sh_entsize"]
        existing = strings.find(b"\0" + new + b"\0")
        if existing >= 0:
            plans.append((entry_offset, existing + 1, None))
            continue
        start, old = sym["st_name"], sym.name.encode()
        if len(new) >= len(old):
            raise CheckFailed(f"{path.name}: no string {rename[sym.name]} to rename {sym.name} to, and it does not fit "
                              "over the old name — drop the rename")
        others = [n for n in names_in_use if start <= n <= start + len(old)]
        others.remove(start)  # the symbol itself
        shared = others + [n for n in _other_names(elf) if start <= n <= start + len(old)]
        if shared:
            raise CheckFailed(f"{path.name}: another name shares the string of {sym.name}; it cannot be renamed in place")
        at = start + len(old) - len(new)
        plans.append((entry_offset, at, new))
    missing = set(rename) - seen
    if missing:
        raise CheckFailed(f"{path.name}: {', '.join(sorted(missing))} is not an undefined symbol of that version — "
                          "review and drop the rename")
    return plans


def _other_names(elf: ELFFile) -> list[int]:
    """The ``.dynstr`` offsets that are not symbol names: version needs (file and version names) and the dynamic
    section's strings (DT_NEEDED, DT_SONAME, DT_RUNPATH …)."""
    verneed = elf.get_section_by_name(".gnu.version_r")
    offsets: list[int] = []
    dynamic = elf.get_section_by_name(".dynamic")
    if isinstance(dynamic, DynamicSection):
        offsets += [tag["d_val"] for tag in dynamic.iter_tags()
                    if tag.entry.d_tag in ("DT_NEEDED", "DT_SONAME", "DT_RPATH", "DT_RUNPATH", "DT_AUXILIARY", "DT_FILTER")]
    if isinstance(verneed, GNUVerNeedSection):
        for need, auxes in verneed.iter_versions():
            offsets.append(need["vn_file"])
            offsets += [aux["vna_name"] for aux in auxes]
    return offsets


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
