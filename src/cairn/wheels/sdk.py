"""SDK wheels from the SDK tree: ``rocm-sdk-core``, ``rocm-sdk-devel``, ``rocm-sdk-libraries-<family>``, ``rocm-sdk``.

Each wheel installs one directory into site-packages (``_rocm_sdk_core/``, ``_rocm_sdk_devel/``,
``_rocm_sdk_libraries/``) laid out like ``/opt/rocm``. Which file goes where is decided by ``classify``:
headers, CMake/pkg-config files, device bitcode and the hipcc driver are *devel*; shared libraries built by
an expansion component, and the data they load, are *libraries*; static archives are not shipped; everything
else is *core*. Wheels cannot hold symlinks, so a
library is shipped once under its SONAME (what the loader asks for); the unversioned ``libfoo.so``
development link becomes a one-line linker script in devel (``INPUT(libfoo.so.N)``).

Every ELF file is copied out of the store and its RPATH set with patchelf to ``$ORIGIN``-relative
directories, so ``python -m rocm_sdk test`` loads everything from site-packages with no LD_LIBRARY_PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cairn.digest import file_sha256, files_digest
from cairn.errors import CairnError, CheckFailed
from cairn.formats import elf
from cairn.model.wheel_versions import extra_name
from cairn.wheels import graft
from cairn.wheels.wheelfile import Member, Metadata, write_wheel

CORE, DEVEL, LIBRARIES = "core", "devel", "libraries"
ROOTS = {CORE: "_rocm_sdk_core", DEVEL: "_rocm_sdk_devel", LIBRARIES: "_rocm_sdk_libraries"}
RUNTIME_DIR = Path(__file__).parent / "runtime"
_DEVEL_BIN_PREFIXES = ("hip", "roc-obj")


def classify(rel: str, expansion_owned: frozenset[str] = frozenset()) -> str | None:
    """Which SDK wheel a path of the SDK tree belongs to (None: not shipped)."""
    parts = rel.split("/")
    top = parts[0]
    if top == "include" or top == "amdgcn" or rel.startswith(("lib/cmake/", "lib/pkgconfig/", "share/rocm/cmake/",
                                                              "share/hip/", "share/rocmcmakebuildtools/")):
        return DEVEL
    if top == "bin" and parts[-1].startswith(_DEVEL_BIN_PREFIXES):
        return DEVEL
    if top == "lib" and parts[-1].endswith(".a"):
        return None  # static archives: wheels serve run time and linking against shared libraries (CK's are 2 GB)
    if top == "share" and len(parts) > 1 and parts[1] in ("doc", "man", "lintian", "bug"):
        return None  # licenses are collected separately into each wheel's .dist-info
    if rel in expansion_owned:
        return LIBRARIES  # an expansion's libraries and their data (rocBLAS's Tensile files, MIOpen's databases)
    return CORE


@dataclass(frozen=True)
class Staged:
    """A file chosen for a wheel: archive path under the wheel root, where its bytes are, whether ELF."""

    arcname: str
    source: Path
    executable: bool


def stage_part(tree: Path, part: str, scratch: Path, log: IO[str], *, expansion_owned: frozenset[str] = frozenset(),
               rpaths: Callable[[str], str] | None = None, split: FamilySplit | None = None) -> list[Staged]:
    """Select ``part``'s files of the SDK tree, resolve symlinks, copy ELF files and set their RPATH.

    With ``split`` (the libraries wheel of one family), per-target data files of other targets are left out
    and every fat binary keeps only the device code that runs on one of the family's targets (the split is
    written before patchelf touches the copy)."""
    root = ROOTS[part]
    chosen: dict[str, Path] = {}
    dev_links: dict[str, str] = {}
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree).as_posix()
        if path.is_dir() and not path.is_symlink():
            continue
        if rel.startswith("lib/") and rel.count("/") == 1 and ".so" in path.name:
            _library_entry(tree, path, rel, part, expansion_owned, chosen, dev_links)
            continue
        owner = classify(rel, expansion_owned)
        if owner != part:
            continue
        if path.is_symlink():
            target = path.resolve()
            if not target.is_file() or tree.resolve() not in target.parents:
                log.write(f"skip {rel}: symlink to {os.readlink(path)} (directory or outside the SDK)\n")
                continue
            chosen[rel] = target
        else:
            chosen[rel] = path
    staged: list[Staged] = []
    for rel, source in sorted(chosen.items()):
        if split is not None and split.drops(rel):
            continue
        info = elf.inspect(source)
        executable = bool(os.stat(source).st_mode & 0o111)
        if info is not None and rpaths is not None:
            rpath = rpaths(str(Path(rel).parent))
            copy = scratch / hashlib.sha256(f"{part}/{rel}".encode()).hexdigest()
            if split is None or not split.split_into(rel, source, copy):
                shutil.copyfile(source, copy)
            os.chmod(copy, 0o755 if executable else 0o644)
            elf.set_rpath(copy, rpath, log)
            source = copy
        staged.append(Staged(f"{root}/{rel}", source, executable))
    if part == DEVEL:
        for link, soname in sorted(dev_links.items()):
            script = scratch / f"ldscript-{link}"
            script.write_text(f"/* GNU ld script: link against the runtime library in rocm-sdk-core */\nINPUT({soname})\n")
            staged.append(Staged(f"{root}/lib/{link}", script, False))
    return staged


def _library_entry(tree: Path, path: Path, rel: str, part: str, expansion_owned: frozenset[str],
                   chosen: dict[str, Path], dev_links: dict[str, str]) -> None:
    """``lib/libfoo.so*``: ship the real file once, under its SONAME; record the dev link for devel."""
    real = path.resolve()
    if not real.is_file():
        return
    info = elf.inspect(real)
    soname = info.soname if info and info.soname else real.name
    real_rel = f"lib/{real.name}"
    owner = LIBRARIES if (rel in expansion_owned or real_rel in expansion_owned) else CORE
    if path.name == soname:
        if owner == part:
            chosen[f"lib/{soname}"] = real
    elif path.is_symlink() and path.name.endswith(".so") and part == DEVEL:
        dev_links[path.name] = soname
    elif not path.is_symlink() and owner == part and not (tree / "lib" / soname).exists():
        chosen[f"lib/{soname}"] = real  # no SONAME link in the tree: ship the file under its SONAME


def licenses(tree: Path, packages: Iterable[str] | None = None) -> list[Member]:
    """Debian copyright files of the SDK tree, as ``.dist-info/licenses/<package>/copyright``."""
    doc = tree / "share" / "doc"
    members = []
    wanted = set(packages) if packages is not None else None
    for copyright_file in sorted(doc.glob("*/copyright")) if doc.is_dir() else []:
        package = copyright_file.parent.name
        if wanted is None or package in wanted:
            members.append(Member(f"licenses/{package}/copyright", source=copyright_file.resolve()))
    return members


def members_of(staged: list[Staged]) -> list[Member]:
    return [Member(s.arcname, source=s.source, executable=s.executable) for s in staged]


def tag_for(staged: list[Staged], provided: Iterable[str] = (), wheel: str = "") -> elf.PlatformTag | None:
    """The wheel's honest tag; ``provided``: the sonames the wheels it requires carry (core's, for the others).
    A library that resolves nowhere in that set, and that no manylinux host provides, stops the build."""
    infos = [i for i in (elf.inspect(s.source) for s in staged) if i is not None]
    if not infos:
        return None
    tag = elf.platform_tag(infos, provided)
    tag.check(wheel)
    return tag


def rewrite_versions(staged: list[Staged], entries: list[dict[str, Any]], log: IO[str]) -> list[dict[str, Any]]:
    """Apply the manifest's reviewed ``[[wheels.symbol_version]]`` rewrites to this wheel's private ELF copies."""
    done = []
    for entry in entries:
        for item in staged:
            if Path(item.arcname).name != entry["file"] or elf.inspect(item.source) is None:
                continue
            renamed = entry.get("rename", {})
            symbols = elf.rewrite_symbol_version(item.source, entry["library"], entry["version"], entry["to"],
                                                 entry["symbols"], renamed)
            asked = ", ".join(f"{renamed[s]} (was {s})" if s in renamed else s for s in symbols)
            log.write(f"symbol versions: {item.arcname} asks {entry['library']} for {asked}@{entry['to']} "
                      f"instead of @{entry['version']} ({entry['why']})\n")
            done.append({**entry, "path": item.arcname})
    return done


def provided_by(tree: Path) -> tuple[str, ...]:
    """The sonames a package action's wheel carries (its ``report.json``), for the wheels that require it."""
    report = tree / "report.json"
    return tuple(json.loads(report.read_text()).get("sonames", [])) if report.is_file() else ()


def sonames(staged: list[Staged]) -> list[str]:
    return sorted({Path(s.arcname).name for s in staged if ".so" in Path(s.arcname).name})


def partial_name(path: str) -> str:
    """How a partial entry is shown: ``lib/librccl.so.1`` → ``librccl.so.1``; a kernel-file folder
    ``lib/rocblas/5/library/`` → ``rocblas kernel files``."""
    if not path.endswith("/"):
        return Path(path).name
    parts = path.strip("/").split("/")
    return f"{parts[1] if parts[0] == 'lib' and len(parts) > 2 else parts[-2]} kernel files"


class FamilySplit:
    """One family's cut of the expansion libraries: what to leave out, how to split, and what the bytes covered
    before and after (so a target a library never had is *partial*, and a target the split lost is a bug)."""

    def __init__(self, family: str, targets: Iterable[str], log: IO[str], *, name: str = "") -> None:
        # lazy: cairn.audit, cairn.model, tomllib, 46 ms at start-up (python -X importtime)
        from cairn.audit.split import parse_devices
        from cairn.model.targets import load_registry

        self.family, self.targets, self.log = family, tuple(targets), log
        self.name = name or f"rocm-sdk-libraries-{family}"  # the wheel, as errors name it
        self.registry = load_registry()
        self.devices = parse_devices(",".join(self.targets), self.registry)
        self.before: list[Any] = []  # BinaryAudit of each original fat library
        self.after: list[Any] = []
        self.dropped: list[str] = []
        self.kernel_dirs: dict[str, list[str]] = {}  # ``…/library/`` → its per-target file names (Tensile)

    def drops(self, rel: str) -> bool:
        # lazy: cairn.audit, cairn.model, tomllib, 50 ms at start-up (python -X importtime)
        from cairn.audit.split_tree import keeps_data_file

        name = Path(rel).name
        keep = keeps_data_file(name, self.devices, self.registry)
        parts = Path(rel).parts
        if keep is not None and "library" in parts[:-1]:  # a library's per-target kernel files, as coverage reads them
            folder = "/".join(parts[: parts.index("library") + 1]) + "/"
            self.kernel_dirs.setdefault(folder, []).append(name)
        if keep is False:
            self.dropped.append(rel)
            return True
        return False

    def split_into(self, rel: str, source: Path, copy: Path) -> bool:
        """Write the family's split of ``source`` to ``copy``; False when it has no device code to split."""
        # lazy: cairn.audit, cairn.model, tomllib, 43 ms at start-up (python -X importtime)
        from cairn.audit.binary import audit_file
        from cairn.audit.model import FATBIN
        from cairn.audit.split import split_audited

        before = audit_file(source, display=rel, registry=self.registry)
        if before.kind != FATBIN or not before.bundles:
            return False
        report = split_audited(source, copy, self.devices, before, self.registry, display=rel)
        self.before.append(before)
        self.after.append(report.after)
        self.log.write(f"split {rel} for {self.family}: device code {report.device_bytes_before} → "
                       f"{report.device_bytes_after} bytes ({', '.join(report.targets_after) or 'host only'})\n")
        return True

    def audit_only(self, rel: str, source: Path) -> bool:
        """Record ``source`` as it is (already cut to exactly these targets); False when it has no device code."""
        # lazy: cairn.audit, cairn.model, tomllib, 31 ms at start-up (python -X importtime)
        from cairn.audit.binary import audit_file
        from cairn.audit.model import FATBIN

        found = audit_file(source, display=rel, registry=self.registry)
        if found.kind != FATBIN or not found.bundles:
            return False
        self.before.append(found)
        self.after.append(found)
        return True

    def coverage(self) -> dict[str, Any]:
        """Per target: covered, or the libraries that were built without its code (the family is then partial).
        A library whose original carries a target's code but whose split copy does not fails the build."""
        # lazy: cairn.audit, cairn.model, tomllib, 41 ms at start-up (python -X importtime)
        from cairn.audit.report import AuditReport

        before = AuditReport(tuple(self.before), len(self.before), self.registry)
        after = AuditReport(tuple(self.after), len(self.after), self.registry)
        result: dict[str, Any] = {"device_binaries": len(self.after), "dropped_data_files": len(self.dropped),
                                  "targets_everywhere": list(after.targets_everywhere), "coverage": {}, "partial": {}}
        for target in self.targets:
            had, has = before.coverage(target), after.coverage(target)
            lost = sorted({g.path for g in has.gaps} - {g.path for g in had.gaps})
            if lost:
                raise CheckFailed(f"{self.name}: the split lost {target} code of {lost[0]}"
                                  + (f" (+{len(lost) - 1} more)" if len(lost) > 1 else "")
                                  + " — a Cairn bug: the original covers it; report it with the build log")
            missing = sorted(g.path for g in has.gaps) + self._kernel_dirs_without(target)
            result["coverage"][target] = {"covered": has.covered and not missing, "via": list(has.via), "missing": missing}
            if missing:
                result["partial"][target] = missing
                self.log.write(f"audit: {target} partial — built without its code: {', '.join(missing)}\n")
            else:
                self.log.write(f"audit: {has.message()}\n")
        return result

    def _kernel_dirs_without(self, target: str) -> list[str]:
        """Kernel-file folders (``lib/hipblaslt/library/``) with no file for ``target``: that library finds no
        kernels on it, as surely as a fat binary without its code object."""
        # lazy: cairn.audit, cairn.model, tomllib, 44 ms at start-up (python -X importtime)
        from cairn.audit.split import parse_devices
        from cairn.audit.split_tree import keeps_data_file

        device = parse_devices(target, self.registry)
        return sorted(folder for folder, names in self.kernel_dirs.items()
                      if not any(keeps_data_file(n, device, self.registry) for n in names))


def write_report(out: Path, wheels: list[Path], extra: dict[str, Any]) -> None:
    """``report.json`` next to ``wheels/``: what the index stage and people read about each wheel."""

    data = {"schema": "cairn.wheels/v1", **extra,
            "wheels": [{"filename": w.name, "sha256": file_sha256(w), "size": w.stat().st_size} for w in wheels]}
    (out / "report.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def runtime_files(package: str) -> list[Path]:
    return sorted(p for p in (RUNTIME_DIR / package).glob("*.py"))


def runtime_digest() -> str:
    """sha256 over the runtime sources shipped in wheels: part of the packaging keys."""
    return files_digest(RUNTIME_DIR.rglob("*.py"), root=RUNTIME_DIR)


def scratch_dir(out: Path) -> tempfile.TemporaryDirectory[str]:
    """Scratch space on the store's filesystem, outside the output tree."""
    return tempfile.TemporaryDirectory(prefix="cairn-wheel-", dir=out.parent)


def build_sdk_wheel(out: Path, part: str, tree: Path, inputs: dict[str, Any], log: IO[str], *,
                    expansion_owned: frozenset[str], family: str = "",
                    targets: tuple[str, ...] = (), provided: tuple[str, ...] = (),
                    grafts: dict[str, graft.Graftable] | None = None, inherited: dict[str, str] | None = None) -> Path:
    """One of core / devel / libraries-<family> from the SDK tree into ``out/wheels``.

    ``grafts``: every library the release's graft debs provide (``cairn.wheels.graft``); this wheel carries
    those whose pin names its part. ``inherited``: soname → mangled name of core's grafts (for devel and
    libraries, which require core)."""
    version = inputs["sdk_version"]
    epoch = inputs["source_date_epoch"]
    core_lib = f"{ROOTS[CORE]}/lib"
    libraries = ROOTS[LIBRARIES]
    rpaths: Callable[[str], str] = {  # the ELF file's directory in the tree → its run path
        CORE: lambda d: "$ORIGIN" if d == "lib" else elf.origin_rpath("bin", "lib"),
        DEVEL: lambda d: elf.origin_rpath("bin", f"../{core_lib}"),
        # an expansion's libraries, its tools (bin/rcclras) and helpers in subdirectories
        # (lib/rocfft/<v>/rocfft_rtc_helper) find the family's libraries and then core's
        LIBRARIES: lambda d: elf.origin_rpath(f"{libraries}/{d}", f"{libraries}/lib", core_lib),
    }[part]
    with scratch_dir(out) as scratch_name:
        scratch = Path(scratch_name)
        split = FamilySplit(family, targets, log) if part == LIBRARIES else None
        staged = stage_part(tree, part, scratch, log, expansion_owned=expansion_owned, rpaths=rpaths, split=split)
        available = grafts or {}
        carried = {lib.package for lib in available.values() if inputs.get("graft_wheels", {}).get(lib.package) == part}
        elves = [s.source for s in staged if s.source.parent == scratch and elf.inspect(s.source) is not None]
        grafting = graft.graft(elves, available, carried, inherited or {}, set(provided), scratch, log)
        lib_root = f"{ROOTS[part]}/lib"
        staged += [Staged(f"{lib_root}/{mangled}", copy, True) for mangled, (_lib, copy) in sorted(grafting.copies.items())]
        rewritten = rewrite_versions(staged, inputs.get("symbol_versions", []), log)
        unused = sorted(carried - {lib.package for lib, _copy in grafting.copies.values()})
        if unused:
            raise CairnError(f"rocm-sdk-{part}: the manifest grafts {', '.join(unused)} into it, but none of its "
                             "libraries needs them — remove the [[wheels.graft]] entry")
        extra: list[Member] = []
        for package, copyright_file in sorted({(lib.package, lib.copyright) for lib, _c in grafting.copies.values()
                                               if lib.copyright is not None}):
            extra.append(Member(f"licenses/{package}/copyright", source=copyright_file))
        extra_description = ""
        report: dict[str, Any] = {"part": part, "sdk_version": version}
        requires: tuple[str, ...] = (f"rocm-sdk-core=={version}",)
        if part == CORE:
            requires = ()
            tag = tag_for(staged, provided, "rocm-sdk-core")
            info = {"release": inputs["release"], "version": version, "channel": inputs["channel"],
                    "system_libraries": list(tag.external) if tag else []}
            staged += [Staged(f"rocm_sdk/{p.name}", p, False) for p in runtime_files("rocm_sdk")]
            info_file = scratch / "_dist_info.json"
            info_file.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
            staged.append(Staged("rocm_sdk/_dist_info.json", info_file, False))
            manifest = None  # share/cairn/manifest.json is a core file of the tree already
            name, summary = "rocm-sdk-core", "ROCm runtime and tools (HIP, HSA, comgr, rocminfo, rocm-smi)"
        elif part == DEVEL:
            tag = tag_for(staged, provided, "rocm-sdk-devel")
            name, summary = "rocm-sdk-devel", "ROCm headers, hipcc, device bitcode and CMake files"
            manifest = None
        else:
            assert split is not None
            report["audit"] = split.coverage()
            libs_info = scratch / "libraries.json"
            libs_info.write_text(json.dumps({"family": family, "targets": list(targets), "version": version,
                                             "audit": report["audit"]}, indent=2, sort_keys=True) + "\n")
            staged.append(Staged(f"{ROOTS[LIBRARIES]}/share/cairn/libraries.json", libs_info, False))
            tag = tag_for(staged, provided, f"rocm-sdk-libraries-{family}")
            name, summary = f"rocm-sdk-libraries-{family}", f"ROCm expansion libraries for {family} ({', '.join(targets)})"
            manifest = None
            if report["audit"]["partial"]:
                notes = "; ".join(f"{t}: no code in {', '.join(partial_name(m) for m in missing)}"
                                  for t, missing in sorted(report["audit"]["partial"].items()))
                summary += " — partial"
                extra_description = f"\n\nPartial coverage, as the audit of these bytes shows: {notes}."
        if manifest is not None and manifest.is_file():
            staged.append(Staged(f"{ROOTS[CORE]}/share/cairn/manifest.json", manifest.resolve(), False))
        platform = tag.tag if tag else "any"
        report["platform"] = {"tag": platform, "reason": tag.reason if tag else "no native code",
                              "system_libraries": list(tag.external) if tag else []}
        report["sonames"] = sonames(staged)
        report["grafted"] = grafting.report()
        if rewritten:
            report["symbol_versions"] = rewritten
        report["sizes"] = {"grafted_bytes": sum(c.stat().st_size for _l, c in grafting.copies.values())}
        grafted_licences = {m.path for m in extra}
        extra += [m for m in licenses(tree, inputs.get("license_packages", {}).get(part)) if m.path not in grafted_licences]
        metadata = Metadata(name=name, version=version, summary=summary, requires_dist=requires,
                            requires_python=">=3.8", license="Various (see .dist-info/licenses)",
                            description=f"{summary}.\n\nBuilt by Cairn from {inputs['release']} {version}.{extra_description}")
        wheel = write_wheel(out / "wheels", metadata, f"py3-none-{platform}", members_of(staged),
                            source_date_epoch=epoch, extra_dist_info=extra)
    write_report(out, [wheel], report)
    return wheel


def build_meta_wheel(out: Path, inputs: dict[str, Any]) -> Path:
    """``rocm-sdk``: no files, static extras per family plus ``devel``, every pin ``==`` the release."""
    version = inputs["sdk_version"]
    devices = inputs.get("devices", [])
    extras = [extra_name(f) for f in inputs["families"]] + [f"device-{t}" for t in devices] + ["devel"]
    requires = [f"rocm-sdk-core=={version}"]
    requires += [f'rocm-sdk-libraries-{f}=={version}; extra == "{extra_name(f)}"' for f in inputs["families"]]
    requires += [f'rocm-sdk-device-{t}=={version}; extra == "device-{t}"' for t in devices]
    requires.append(f'rocm-sdk-devel=={version}; extra == "devel"')
    metadata = Metadata(name="rocm-sdk", version=version, summary=f"ROCm SDK {version}: pick your GPU (device-gfx1100) or family as an extra",
                        requires_dist=tuple(requires), extras=tuple(extras), requires_python=">=3.8",
                        description="Install with `pip install \"rocm-sdk[device-<gfx>]\"` for one GPU target, or "
                                    "`\"rocm-sdk[<family>]\"` for every target of a family; add `devel` for headers and hipcc.")
    wheel = write_wheel(out / "wheels", metadata, "py3-none-any", [], source_date_epoch=inputs["source_date_epoch"])
    write_report(out, [wheel], {"part": "meta", "sdk_version": version, "extras": extras})
    return wheel


def build_target_meta_wheel(out: Path, inputs: dict[str, Any]) -> Path:
    """``rocm-sdk`` for one GPU target's own index: version ``<release>+<gfx>``, its family's extra pinning the
    target's device wheel instead of the family's libraries wheel.

    An engine or framework wheel (llama-cpp-python, cairn-smoke) is built once per family and requires
    ``rocm-sdk[<family>]==<release>``. On the target's index that requirement resolves to this wheel — PEP 440
    matches a pin without a local label against ``<release>+<gfx>`` — so ``pip install llama-cpp-python``
    there brings one target's device code, not the whole family's. It never sits on the family's index, where
    the plain meta wheel is the only ``rocm-sdk`` (a higher local version there would win for every GPU).
    """
    version, family, target = inputs["sdk_version"], inputs["family"], inputs["target"]
    devices = inputs.get("devices", [])
    extras = [extra_name(f) for f in inputs["families"]] + [f"device-{t}" for t in devices] + ["devel"]
    requires = [f"rocm-sdk-core=={version}"]
    for fam in inputs["families"]:
        payload = f"rocm-sdk-device-{target}" if fam == family else f"rocm-sdk-libraries-{fam}"
        requires.append(f'{payload}=={version}; extra == "{extra_name(fam)}"')
    requires += [f'rocm-sdk-device-{t}=={version}; extra == "device-{t}"' for t in devices]
    requires.append(f'rocm-sdk-devel=={version}; extra == "devel"')
    summary = f"ROCm SDK {version} for {target}: the {family} extra installs {target}'s device code alone"
    metadata = Metadata(name="rocm-sdk", version=f"{version}+{target}", summary=summary, requires_dist=tuple(requires),
                        extras=tuple(extras), requires_python=">=3.8",
                        description=f"{summary}.\n\nServed only on the {target} index, where every wheel built for "
                                    f"{family} that requires `rocm-sdk[{extra_name(family)}]` resolves to this wheel "
                                    f"and so to `rocm-sdk-device-{target}`.")
    wheel = write_wheel(out / "wheels", metadata, "py3-none-any", [], source_date_epoch=inputs["source_date_epoch"])
    write_report(out, [wheel], {"part": "meta-target", "sdk_version": version, "family": family, "target": target,
                                "extras": extras})
    return wheel


def expansion_paths(trees: Iterable[Path]) -> frozenset[str]:
    """Paths under ``bin/``, ``lib/`` and ``share/`` provided by expansion components: their shared libraries,
    tools (``bin/rcclras`` links librccl) and the data they load at run time (``lib/rocblas/library/*``,
    ``share/miopen/db/*``) go to the libraries wheel, never to core (which every family shares)."""
    owned = set()
    for tree in trees:
        for top in ("bin", "lib", "share"):
            root = tree / top
            if root.is_dir():
                owned |= {p.relative_to(tree).as_posix() for p in root.rglob("*") if not p.is_dir() or p.is_symlink()}
    return frozenset(owned)
