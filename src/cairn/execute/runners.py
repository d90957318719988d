"""What each action kind does. A runner gets an ``ActionContext`` and writes only into ``ctx.out``.

Runners read their dependencies' trees (never modify them: the store shares files between trees) and
everything else they need comes from the action's canonical inputs, so the key covers it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cairn import proc
from cairn.audit.check import check_coverage
from cairn.errors import CairnError, CheckFailed
from cairn.execute import hip
from cairn.execute.cmake import check_device_code, cmake_in_image
from cairn.execute.compiler_cache import CompilerCache
from cairn.model.records import PushRecord
from cairn.plan.graph import Action
from cairn.sources.fetch import fetch


@dataclass(frozen=True)
class ActionContext:
    action: Action
    out: Path  # empty work directory, becomes the output tree
    log: IO[str]
    deps: Mapping[str, Path]  # dependency action id -> its output tree
    dep_outputs: Mapping[str, str]  # dependency action id -> its output digest
    mirror: Path | None = None  # the store's source mirror (``sources/sha256/<digest>`` under it)
    compiler_cache: CompilerCache | None = None  # sccache in S3 for compiles in the build image; changes no output

    @property
    def layer_scans(self) -> Path | None:
        """Where image layers' scans are kept by digest (``cairn.audit.layers``); None without a local store."""
        return self.mirror / "layer-scans" if self.mirror else None


Runner = Callable[[ActionContext], None]

# Where Debian's paths land in a relocatable, /opt/rocm-like SDK tree (longest prefix wins).
DEB_LAYOUT = (
    ("usr/lib/x86_64-linux-gnu/amdgcn", "amdgcn"),
    ("usr/lib/llvm-22/lib/clang/22/amdgcn", "amdgcn"),  # ROCm 7.2's device libraries live in clang's resource dir
    ("usr/lib/x86_64-linux-gnu", "lib"),
    ("usr/share/lintian", None),
    ("usr/", ""),
)


def run_fetch(ctx: ActionContext) -> None:
    (kind, source), = ctx.action.inputs["source"].items()
    fetch(kind, source, ctx.out, ctx.log, ctx.mirror)


def run_deb_unpack(ctx: ActionContext) -> None:
    """``dpkg-deb -x`` the fetched package, then move its files into the SDK layout."""
    fetched = ctx.deps[ctx.action.deps[0]]
    debs = sorted(fetched.glob("*.deb"))
    if len(debs) != 1:
        raise CairnError(f"{ctx.action.id}: expected one .deb in its fetch output, found {len(debs)}")
    with tempfile.TemporaryDirectory(prefix="cairn-deb-") as scratch:
        proc.run(["dpkg-deb", "-x", debs[0], scratch], log=ctx.log)
        relocate(Path(scratch), ctx.out, DEB_LAYOUT)


def relocate(src: Path, out: Path, layout: tuple[tuple[str, str | None], ...]) -> None:
    """Move every file of ``src`` to its layout destination; absolute symlinks become relative ones."""
    for path in sorted(p for p in src.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(src).as_posix()
        dest_rel = _map_path(rel, layout)
        if dest_rel is None:
            continue
        dest = out / dest_rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            target = os.readlink(path)
            if target.startswith("/"):
                mapped = _map_path(target.lstrip("/"), layout)
                if mapped is None:
                    continue
                target = os.path.relpath(out / mapped, dest.parent)
            os.symlink(target, dest)
        else:
            shutil.move(str(path), dest)


def _map_path(rel: str, layout: tuple[tuple[str, str | None], ...]) -> str | None:
    for prefix, replacement in layout:
        if rel == prefix.rstrip("/") or rel.startswith(prefix.rstrip("/") + "/") or (prefix.endswith("/") and rel.startswith(prefix)):
            if replacement is None:
                return None
            rest = rel[len(prefix.rstrip("/")):].lstrip("/")
            return f"{replacement}/{rest}".strip("/") if replacement else rest
    return rel


def check_glibc_floor(out: Path, floor: str, action: str) -> None:
    """Our compiles need no glibc past the release's floor (``cairn.formats.elf.check_glibc_floor``)."""
    # lazy: cairn.formats.elf, auditwheel, 6 ms at start-up (python -X importtime)
    from cairn.formats.elf import check_glibc_floor as check

    check(out, floor, action)


def run_copy(ctx: ActionContext) -> None:
    """Target-neutral files copied as they were fetched (headers-only components, data)."""
    fetched = ctx.deps[ctx.action.deps[0]]
    root = fetched / "src" if (fetched / "src").is_dir() else fetched
    shutil.copytree(root, ctx.out, symlinks=True, dirs_exist_ok=True)


def run_hip(ctx: ActionContext) -> None:
    """Compile our HIP sources for every target of one family, then gate on the audit's coverage.

    With a build image (``toolchain`` names its push action) hipcc runs inside it; otherwise on the host
    with the SDK's own device libraries."""
    inputs = ctx.action.inputs
    sources_tree = ctx.deps[ctx.action.deps[0]] / "src"
    targets = tuple(inputs["targets"])
    library = ctx.out / "lib" / inputs["build"]["args"].get("library", f"lib{inputs['component']}.so")
    library.parent.mkdir(parents=True)
    sources = sorted(sources_tree.glob("*.hip"))
    toolchain = inputs["toolchain"]
    if isinstance(toolchain, dict):
        # lazy: cairn.deflate, cairn.model, cairn.formats, 15 ms at start-up (python -X importtime)
        from cairn.plan.toolchain import DEVICE_LIBS_IN_IMAGE

        pushed = _toolchain_push(ctx, toolchain)
        image = _toolchain_image(ctx, toolchain)
        toolchain = f"{pushed.repo}@{pushed.digest}"
        hip.compile_hip_in_image(sources_tree, [s.name for s in sources], targets, library, image=image,
                                 device_lib_path=DEVICE_LIBS_IN_IMAGE, log=ctx.log, compiler_cache=ctx.compiler_cache)
    else:
        device_libs = next((p / "amdgcn" / "bitcode" for p in ctx.deps.values() if (p / "amdgcn" / "bitcode").is_dir()), None)
        if device_libs is None:
            raise CairnError(f"{ctx.action.id}: no amdgcn/bitcode among its dependencies — depend on the device-libs component")
        hip.compile_hip(sources, targets, library, device_lib_path=device_libs, log=ctx.log, include_dirs=(sources_tree,))
    check_coverage(library, targets)
    check_glibc_floor(ctx.out, inputs.get("glibc_floor", ""), ctx.action.id)
    for header in sorted(sources_tree.glob("*.h")):
        (ctx.out / "include").mkdir(exist_ok=True)
        shutil.copy2(header, ctx.out / "include" / header.name)
    build_info = {"component": inputs["component"], "version": inputs["version"], "family": ctx.action.family,
                  "targets": list(targets), "toolchain": toolchain}
    (ctx.out / "share" / "cairn").mkdir(parents=True)
    (ctx.out / "share" / "cairn" / f"{inputs['component']}.json").write_text(json.dumps(build_info, indent=2, sort_keys=True) + "\n")


def run_cmake(ctx: ActionContext) -> None:
    """Configure, build and install the fetched source with CMake inside the release's build image."""
    inputs = ctx.action.inputs
    toolchain = inputs.get("toolchain")
    if not isinstance(toolchain, dict):
        raise CairnError(f"{ctx.action.id}: cmake builds run in the release's build image; the manifest names none")
    fetched = ctx.deps[ctx.action.deps[0]]
    archives = sorted(fetched.glob("*.tar.gz"))
    if (fetched / "src").is_dir():
        source = fetched / "src"
    elif len(archives) == 1:  # a pinned sdist: unpacked inside the build container
        source = archives[0]
    else:
        source = fetched
    dep_trees = [ctx.deps[d] for d in ctx.action.deps[1:] if d not in (toolchain["image"], toolchain["push"])]
    cmake_in_image(source, dep_trees, ctx.out, image=_toolchain_image(ctx, toolchain),
                   args=inputs["build"]["args"], targets=inputs.get("targets", []), log=ctx.log,
                   compiler_cache=ctx.compiler_cache)
    check_glibc_floor(ctx.out, inputs.get("glibc_floor", ""), ctx.action.id)


def run_split(ctx: ActionContext) -> None:
    """``build:<component>@<family>`` of a ``compile_once`` component: the one compile's tree with only the family's
    own code objects (exact IDs: a gfx1151 family keeps gfx1151, not also the gfx11-generic code of gfx110X), then
    the same device-code check a per-family compile passes."""
    # lazy: cairn.audit.split_tree, cairn.audit.split, 31 ms at start-up (python -X importtime)
    from cairn.audit.split_tree import split_tree

    inputs = ctx.action.inputs
    targets = tuple(inputs["targets"])
    whole = ctx.deps[ctx.action.deps[0]]
    with tempfile.TemporaryDirectory(prefix=".split-", dir=ctx.out.parent) as work:
        report = split_tree(whole, Path(work) / "tree", ",".join(targets), exact=True)
        # the split's own audit of each library says what the compile held: a code object it lacks is named here
        # (keyed by the real file: lib/libggml-hip.so is a link to the versioned library the split audited)
        held = {Path(library.source).resolve(): library.targets_before for library in report.libraries}
        for name in inputs["build"]["args"].get("device_libraries", ()):
            compiled = held.get((whole / "lib" / name).resolve(), ())
            if missing := [t for t in targets if t not in compiled]:
                raise CheckFailed(f"{ctx.action.id}: {ctx.action.deps[0]} compiled no {', '.join(missing)} code object "
                                  f"into lib/{name} (it holds {', '.join(compiled) or 'none'})")
        for entry in sorted((Path(work) / "tree").iterdir()):
            os.replace(entry, ctx.out / entry.name)
    for library in report.libraries:
        ctx.log.write(f"{Path(library.dest).name}: {', '.join(library.targets_before)} → {', '.join(library.targets_after)}, "
                      f"{library.file_size_before} → {library.file_size} bytes ({library.layout})\n")
    check_device_code(ctx.out, inputs["build"]["args"], targets)


def _toolchain_image(ctx: ActionContext, toolchain: Mapping[str, str]) -> str:
    """``registry/repo@digest`` of the build image the action depends on (pulled by the engine)."""
    # lazy: cairn.services, platform, 7 ms at start-up (python -X importtime)
    from cairn.services import registry_address
    from cairn.services.registry_push import ensure_in_registry

    pushed = _toolchain_push(ctx, toolchain)
    registry, _ = registry_address()
    if not registry:
        raise CairnError(f"{ctx.action.id}: no registry to pull the build image from — run: cairn services start")
    ensure_in_registry(ctx.deps[toolchain["image"]], registry, ctx.log)  # a cached push may be another host's
    return f"{registry}/{pushed.reference}"


def _toolchain_push(ctx: ActionContext, toolchain: Mapping[str, str]) -> PushRecord:
    """The build image's ``push.json``: where the registry holds it (a blocked build image builds nothing)."""
    pushed = PushRecord.read(ctx.deps[toolchain["push"]], f"rebuild it: cairn build --only {toolchain['push']}")
    if pushed.blocked:
        raise CairnError(f"{ctx.action.id}: the build image was not built ({pushed.blocked})")
    return pushed


def run_assemble(ctx: ActionContext) -> None:
    """Merge component trees into one SDK tree; a path provided twice with different bytes is an error."""
    owners: dict[str, str] = {}
    for dep_id in sorted(ctx.action.deps):
        tree = ctx.deps[dep_id]
        for path in sorted(tree.rglob("*")):
            if path.is_dir() and not path.is_symlink():
                continue
            rel = path.relative_to(tree).as_posix()
            dest = ctx.out / rel
            if rel in owners:
                if _same(path, dest):
                    continue
                raise CairnError(f"assemble: {rel} comes from both {owners[rel]} and {dep_id} with different content")
            owners[rel] = dep_id
            dest.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                os.symlink(os.readlink(path), dest)
            else:
                os.link(path, dest)  # same filesystem: share bytes with the component tree
    embedded = dict(ctx.action.inputs["manifest"])
    embedded["components"] = {dep: ctx.dep_outputs[dep] for dep in sorted(ctx.action.deps)}
    meta = ctx.out / "share" / "cairn"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "manifest.json").write_text(json.dumps(embedded, indent=2, sort_keys=True) + "\n")


def _same(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()


BUILD_RUNNERS: dict[str, Runner] = {
    "deb-unpack": run_deb_unpack,
    "copy": run_copy,
    "hip": run_hip,
    "cmake": run_cmake,
    "split": run_split,
}


def runner_for(action: Action, stage_runners: Mapping[str, Runner]) -> Runner:
    """The SDK's own runners by kind, else the later stages' (``stage_runners``: ``cairn.stages.RUNNERS``)."""
    if action.kind == "fetch":
        return run_fetch
    if action.kind == "assemble":
        return run_assemble
    if action.kind == "build":
        kind: Any = action.inputs["build"]["kind"]
        if kind in BUILD_RUNNERS:
            return BUILD_RUNNERS[kind]
    runner = stage_runners.get(action.kind)
    if runner is None:
        raise CairnError(f"no runner for action kind '{action.kind}' ({action.id})")
    return runner
