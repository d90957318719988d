"""Split a whole install tree per target: every ELF with a ``.hip_fatbin`` goes through ``split_file``, and
per-target data files of other targets are dropped.

Per-target data files are recognised by name, because that is how their libraries find them: rocBLAS and
hipBLASLt load ``TensileLibrary_*_gfx1100.dat`` / ``.co`` / ``.hsaco`` (``…_gfx90a-xnack+.hsaco`` for an
xnack variant), MIOpen its kernel and find databases ``gfx1100_48.kdb``, ``gfx90a6e.HIP.fdb.txt``,
``gfx942.tn.model`` (the processor, then a CU count). A file is one when its name ends in a data suffix and
names a gfx processor; it stays when any processor it names runs on the target (``Registry.can_run``, so
``gfx11-generic`` files stay for gfx1151 and a bare ``gfx90a`` keeps both xnack variants). Everything else
is copied as it is; symbolic links are copied as links (never followed), and so are dropped when their own
name is a data file of another target. The tree is built beside ``dest`` and renamed into place at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cairn.audit.binary import audit_file, is_elf
from cairn.audit.model import FATBIN
from cairn.audit.split import SplitReport, devices_text, parse_devices, split_audited
from cairn.errors import InputError
from cairn.model.targets import FEATURES, Registry, TargetId, load_registry

DATA_SUFFIXES = (
    ".hsaco", ".co", ".dat",  # Tensile code objects and libraries (rocBLAS, hipBLASLt)
    ".kdb", ".kdb.bz2", ".ukdb", ".udb", ".db", ".fdb.txt", ".db.txt", ".model",  # MIOpen databases and models
)
_UNKNOWN_GFX = re.compile(r"gfx[0-9][0-9a-f]*")
_FEATURE = re.compile(r"[-:_](" + "|".join(FEATURES) + r")([+-])")


@dataclass(frozen=True)
class TreeSplitReport:
    """One split tree: the libraries split, the data files dropped, and the bytes before and after."""

    source: str
    dest: str
    target: str
    libraries: tuple[SplitReport, ...]
    dropped: tuple[str, ...]  # paths relative to the tree
    kept_data: int
    copied: int
    bytes_before: int  # sizes of the regular files (a compacted library shrinks; one split in place keeps its size)
    bytes_after: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dest": self.dest,
            "target": self.target,
            "libraries": [r.to_json() for r in self.libraries],
            "dropped": list(self.dropped),
            "kept_data": self.kept_data,
            "copied": self.copied,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "seconds": round(self.seconds, 3),
        }


def named_targets(name: str, registry: Registry) -> tuple[TargetId, ...] | None:
    """The gfx processors (with xnack/sramecc settings) a per-target data file's name names, or None when
    the name is not that of a per-target data file."""
    if not name.endswith(DATA_SUFFIXES):
        return None
    known = sorted({*registry.targets, *registry.generics, *registry.processors}, key=len, reverse=True)
    found: list[TargetId] = []
    at = name.find("gfx")
    while at >= 0:
        processor = next((k for k in known if name.startswith(k, at)), None)
        if processor is None:  # a processor the registry does not list: surely not the target
            unknown = _UNKNOWN_GFX.match(name, at)
            if unknown is None:  # "gfx" inside a word, not a processor
                at = name.find("gfx", at + 3)
                continue
            processor = unknown[0]
        end = at + len(processor)
        features: dict[str, bool] = {}
        while (feature := _FEATURE.match(name, end)) and feature[1] not in features:
            features[feature[1]] = feature[2] == "+"
            end = feature.end()
        found.append(TargetId(processor, tuple(sorted(features.items()))))
        at = name.find("gfx", end)
    return tuple(found) or None


def keeps_data_file(name: str, devices: TargetId | tuple[TargetId, ...], registry: Registry,
                    exact: bool = False) -> bool | None:
    """True/False for a per-target data file that does/does not run on one of ``devices`` (``exact``: is built
    for one of them as named); None for other files."""
    named = named_targets(name, registry)
    if named is None:
        return None
    wanted = devices if isinstance(devices, tuple) else (devices,)
    if exact:
        return any(t in wanted for t in named)
    return any(registry.can_run(t, device) is not None for t in named for device in wanted)


def split_tree(tree: Path | str, dest: Path | str, target: str, *, registry: Registry | None = None,
               compacted: bool = True, exact: bool = False) -> TreeSplitReport:
    """Write ``dest`` (which must not exist): ``tree`` with only what runs on ``target`` (one gfx target, or a
    comma-separated set such as a family's targets). ``compacted=False``: libraries keep the in-place layout.
    ``exact``: only the code objects ``target`` names (``gfx11-generic`` keeps the generic code alone)."""
    started = time.monotonic()
    registry = registry or load_registry()
    devices = parse_devices(target, registry)
    tree, dest = Path(tree), Path(dest)
    if not tree.is_dir():
        raise InputError(tree, "is not a directory", "give an install tree, or a single library")
    if dest.exists() or dest.is_symlink():
        raise InputError(dest, "already exists", "remove it or choose another --out")
    if dest.resolve().is_relative_to(tree.resolve()):
        raise InputError(dest, "lies inside the tree being split", "choose an --out outside it")
    work = dest.with_name(f".{dest.name}.cairn-split-{os.getpid()}")
    libraries: list[SplitReport] = []
    dropped: list[str] = []
    counts = {"kept_data": 0, "copied": 0, "before": 0, "after": 0}
    try:
        work.mkdir(parents=True)
        for path in _walk(tree):
            rel = path.relative_to(tree)
            out = work / rel
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                out.mkdir()
                continue
            keep = keeps_data_file(path.name, devices, registry, exact)
            if keep is False:
                dropped.append(rel.as_posix())
                counts["before"] += info.st_size if stat.S_ISREG(info.st_mode) else 0
                continue
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(path), out)
                continue
            if not stat.S_ISREG(info.st_mode):
                continue  # sockets, fifos and devices do not belong in an install tree
            counts["before"] += info.st_size
            if keep is None and is_elf(path):
                audit = audit_file(path, display=rel.as_posix(), registry=registry)
                if audit.kind == FATBIN and audit.bundles:
                    report = split_audited(path, out, devices, audit, registry, compacted=compacted, exact=exact)
                    libraries.append(report)
                    counts["after"] += report.file_size
                    continue
            counts["after"] += info.st_size
            shutil.copy2(path, out)
            counts["kept_data" if keep else "copied"] += 1
        os.rename(work, dest)
        libraries = [replace(r, dest=str(dest / Path(r.dest).relative_to(work))) for r in libraries]
    finally:
        if work.exists():
            shutil.rmtree(work)
    return TreeSplitReport(str(tree), str(dest), devices_text(devices), tuple(libraries), tuple(dropped), counts["kept_data"],
                           counts["copied"], counts["before"], counts["after"], time.monotonic() - started)


def _walk(tree: Path):
    """Every path under ``tree``, parents before children, in sorted order; links are not followed."""
    for root, dirs, files in os.walk(tree, followlinks=False):
        dirs.sort()
        base = Path(root)
        links = [d for d in dirs if (base / d).is_symlink()]
        dirs[:] = [d for d in dirs if d not in links]
        yield from (base / name for name in sorted([*files, *links]))
        yield from (base / d for d in dirs)  # os.walk descends into them after this
