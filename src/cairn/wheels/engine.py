"""Engine wheels: an upstream Python package from its pinned sdist plus the engine libraries we built.

``llama-cpp-python`` loads llama.cpp with ctypes from ``llama_cpp/lib/`` (``libllama.so``, ``libggml.so``,
found by those exact names). Its own build would compile llama.cpp again with whatever compiler the user
has; ours takes the ``llama_cpp`` package, unchanged, out of the same sdist the ``build:llama.cpp@<family>``
action compiled in the build image, and puts that action's shared libraries next to it:

- every library is stored once, under its link name (``libggml-hip.so``, not ``.so.0`` and ``.so.0.9.7``:
  a wheel has no symlinks), with its soname and its siblings' DT_NEEDED entries rewritten to match;
- the run path is ``$ORIGIN`` plus the SDK wheels' ``lib/`` directories (``_rocm_sdk_core``,
  ``_rocm_sdk_libraries``), so libamdhip64, hipBLAS and rocBLAS come from the family's SDK wheels the
  wheel requires, never from the host;
- the device libraries are audited for exactly the build's targets before anything is written;
- the engine's executables (``llama-server``, ``llama-cli``, …) are written to ``tools/`` beside the wheel,
  relinked the same way with their run path at the wheel's ``lib/`` as installed in the release's images
  (``tools_rpath``), for the engine's image to copy.

The sdist members taken are the regular files under ``<stem>/llama_cpp/``, by exact prefix; their archive
names are rebuilt from checked parts, so nothing in the sdist chooses a path in the wheel.
"""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from cairn import proc
from cairn.audit.check import check_coverage
from cairn.errors import CairnError
from cairn.execute.runners import ActionContext
from cairn.formats import elf
from cairn.wheels.sdk import LIBRARIES, ROOTS, provided_by, scratch_dir, write_report
from cairn.wheels.wheelfile import Member, Metadata, write_wheel

_VERSIONED = re.compile(r"^(lib[A-Za-z0-9_.+-]+?\.so)(\.[0-9]+)*$")
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def link_name(filename: str) -> str:
    """``libggml-hip.so.0.9.7`` → ``libggml-hip.so`` (the name ctypes and the linker look for)."""
    match = _VERSIONED.match(filename)
    if not match:
        raise CairnError(f"{filename} is not a shared library name (lib<name>.so[.N…])")
    return match.group(1)


def sdist_package(sdist: Path, stem: str, package: str) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The package's files from the sdist as (path inside the wheel, bytes), and its ``Requires-Dist``."""
    prefix = f"{stem}/{package}/"
    files: list[tuple[str, bytes]] = []
    requires: list[str] = []
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            for info in archive.getmembers():
                if info.name == f"{stem}/PKG-INFO" and info.isfile():
                    handle = archive.extractfile(info)
                    headers = email.parser.Parser().parsestr(handle.read().decode() if handle else "")
                    requires = [r for r in headers.get_all("Requires-Dist") or [] if "extra ==" not in r]
                if not info.name.startswith(prefix) or not info.isfile():
                    continue
                parts = PurePosixPath(info.name[len(stem) + 1:]).parts
                if not all(_PART.match(p) and p not in (".", "..") for p in parts):
                    raise CairnError(f"{sdist.name}: member {info.name!r} is not a plain package path")
                if "__pycache__" in parts:
                    continue
                handle = archive.extractfile(info)
                files.append(("/".join(parts), handle.read() if handle else b""))
    except (OSError, tarfile.TarError) as exc:
        raise CairnError(f"{sdist}: cannot read the sdist: {exc}") from None
    if not any(path == f"{package}/__init__.py" for path, _ in files):
        raise CairnError(f"{sdist.name}: no {prefix}__init__.py — is this the right sdist?")
    return sorted(files), requires


def library_names(lib_dir: Path) -> dict[str, str]:
    """soname in the build tree → link name in the wheel, for every shared library of ``lib_dir``."""
    renamed = {}
    for path in sorted({p.resolve() for p in lib_dir.glob("lib*.so*") if p.resolve().is_file()}):
        info = elf.inspect(path)
        if info and info.soname:
            renamed[info.soname] = link_name(path.name)
    return renamed


def relink(path: Path, renamed: dict[str, str], rpath: str, log: IO[str]) -> None:
    """Point ``path``'s DT_NEEDED entries at the renamed libraries and set its run path (a private copy).

    One patchelf call per change: combined, patchelf 0.14 rewrote a soname and a DT_NEEDED entry that
    share a string into the same new string (measured: libb.so ended up with soname liba.so)."""
    info = elf.inspect(path)
    for needed in info.needed if info else ():
        if needed in renamed and renamed[needed] != needed:
            proc.run(["patchelf", "--replace-needed", needed, renamed[needed], str(path)], log=log)
    elf.set_rpath(path, rpath, log)


def stage_tools(bin_dir: Path, dest: Path, renamed: dict[str, str], rpath: str, log: IO[str]) -> list[Path]:
    """Private copies of the engine's executables, linked against the wheel's libraries at ``rpath``."""
    dest.mkdir(parents=True, exist_ok=True)
    staged = []
    for tool in sorted(p for p in bin_dir.iterdir() if p.is_file() and not p.is_symlink() and elf.inspect(p)):
        copy = dest / tool.name
        shutil.copyfile(tool, copy)
        copy.chmod(0o755)
        relink(copy, renamed, rpath, log)
        staged.append(copy)
    return staged


def stage_libraries(lib_dir: Path, scratch: Path, rpath: str, log: IO[str]) -> list[Path]:
    """Private copies of every shared library of ``lib_dir``, one per link name, soname and DT_NEEDED
    entries rewritten to link names, run path set; returns the copies."""
    real = sorted({p.resolve() for p in lib_dir.glob("lib*.so*") if p.resolve().is_file()})
    names: dict[str, Path] = {}
    for path in real:
        name = link_name(path.name)
        if name in names:
            raise CairnError(f"{lib_dir}: {names[name].name} and {path.name} would both be {name}")
        names[name] = path
    renamed = library_names(lib_dir)
    staged = []
    for name, path in sorted(names.items()):
        copy = scratch / name
        shutil.copyfile(path, copy)
        copy.chmod(0o755)
        relink(copy, renamed, rpath, log)
        proc.run(["patchelf", "--set-soname", name, str(copy)], log=log)
        staged.append(copy)
    return staged


def run_engine_wheel(ctx: ActionContext) -> None:
    """``package:<project>@<family>``: the sdist's Python package + the family's built libraries, audited."""

    inputs = ctx.action.inputs
    built = ctx.deps[inputs["build"]]
    sdist = ctx.deps[inputs["fetch"]] / inputs["sdist"]
    package = inputs["package"]
    files, upstream_requires = sdist_package(sdist, inputs["sdist"].removesuffix(".tar.gz"), package)
    lib_dir = f"{package}/lib"
    rpath = elf.origin_rpath(lib_dir, f"{ROOTS['core']}/lib", f"{ROOTS[LIBRARIES]}/lib")
    with scratch_dir(ctx.out) as scratch_name:
        scratch = Path(scratch_name)
        libraries = stage_libraries(built / "lib", scratch, rpath, ctx.log)
        by_name = {p.name: p for p in libraries}
        for name in inputs["device_libraries"]:
            if name not in by_name:
                raise CairnError(f"{ctx.action.id}: {inputs['build']} built no {name}")
            check_coverage(by_name[name], tuple(inputs["targets"]))
        infos = [i for i in (elf.inspect(p) for p in libraries) if i]
        # resolves inside what `pip install` brings with it: rocm-sdk-core and the family's libraries
        provided = [n for dep in ("package:rocm-sdk-core", f"package:rocm-sdk-libraries@{ctx.action.family}")
                    if dep in ctx.deps for n in provided_by(ctx.deps[dep])]
        tag = elf.platform_tag(infos, provided)
        tag.check(inputs["project"])
        build_info = {"component": inputs["component"], "family": ctx.action.family, "targets": list(inputs["targets"]),
                      "version": inputs["build_version"], "libraries": sorted(by_name)}
        members = [Member(path, data=data) for path, data in files]
        members += [Member(f"{lib_dir}/{p.name}", source=p, executable=True) for p in libraries]
        members.append(Member.text(f"{package}/cairn-build.json", json.dumps(build_info, indent=2, sort_keys=True) + "\n"))
        metadata = Metadata(name=inputs["project"], version=inputs["build_version"], summary=inputs["description"],
                            requires_dist=(*inputs["requires"], *upstream_requires), requires_python=inputs["requires_python"],
                            license="MIT")
        wheel = write_wheel(ctx.out / "wheels", metadata, f"py3-none-{tag.tag}", members,
                            source_date_epoch=inputs["source_date_epoch"])
    # the engine's own tools, for the family's image: linked against this wheel's libraries where pip puts them
    tools = stage_tools(built / "bin", ctx.out / "tools", library_names(built / "lib"), inputs["tools_rpath"], ctx.log) \
        if (built / "bin").is_dir() else []
    # what the engine's own ELFs load from elsewhere (the SDK's libraries, the system's): the matrix says a library
    # the audit found partial matters to the engine's cells only when one of these is it (cairn.publish.run)
    own = set(by_name) | {i.soname for i in infos if i.soname}
    needed = sorted({n for i in [*infos, *(t for t in (elf.inspect(p) for p in tools) if t)] for n in i.needed} - own)
    write_report(ctx.out, [wheel], {"part": "engine", "tools": [t.name for t in tools], "project": inputs["project"], "family": ctx.action.family,
                                    "targets": list(inputs["targets"]), "libraries": sorted(by_name), "needed": needed,
                                    "platform": {"tag": tag.tag, "reason": tag.reason,
                                                 "system_libraries": list(tag.external)}})
