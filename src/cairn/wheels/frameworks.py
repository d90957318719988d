"""Runners for framework wheels: mirrored upstream wheels, PEP 517 source builds, HIP extensions.

Every runner writes ``wheels/<file>.whl`` and ``report.json`` into its output tree, like the SDK runners,
so the index stage treats all package actions alike.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

from cairn import proc
from cairn.audit import audit_paths
from cairn.audit.check import check_coverage
from cairn.errors import CairnError
from cairn.execute.runners import ActionContext
from cairn.formats import elf
from cairn.wheels.sdk import ROOTS, RUNTIME_DIR, provided_by, scratch_dir, write_report
from cairn.wheels.wheelfile import Member, Metadata, repack, write_wheel


def render(text: str, values: dict[str, str]) -> str:
    """Replace ``{name}`` placeholders that ``values`` knows; leave the others for the runner."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


# -- mirror ----------------------------------------------------------------------------------------------
def run_mirror(ctx: ActionContext) -> None:
    """Verify (done by the fetch), audit and republish one upstream wheel unchanged."""
    inputs = ctx.action.inputs
    fetched = ctx.deps[ctx.action.deps[0]] / inputs["filename"]
    if not fetched.is_file():
        raise CairnError(f"{ctx.action.id}: {inputs['filename']} missing from its fetch output")
    (ctx.out / "wheels").mkdir()
    wheel = ctx.out / "wheels" / inputs["filename"]
    os.link(fetched, wheel)  # unchanged bytes, shared with the fetch tree
    report = audit_paths([wheel])
    families: dict[str, Any] = {}
    for family, targets in sorted(inputs["families"].items()):
        cover = {t: report.coverage(t) for t in targets}
        # a wheel without device code (jax, jaxlib, numpy) runs on every target of every family: nothing to cover
        families[family] = {"covered": not report.device_binaries or all(c.covered for c in cover.values()),
                            "targets": {t: {"covered": c.covered, "via": list(c.via)} for t, c in cover.items()}}
        said = "; ".join(c.message() for c in cover.values()) if report.device_binaries else "no device code: nothing to cover"
        ctx.log.write(f"audit {family}: {said}\n")
    audit = {"device_binaries": len(report.device_binaries), "targets_everywhere": list(report.targets_everywhere),
             "targets_somewhere": list(report.targets_somewhere), "families": families}
    write_report(ctx.out, [wheel], {"part": "mirror", "project": inputs["project"], "audit": audit})


# -- source builds -----------------------------------------------------------------------------------------
def run_source(ctx: ActionContext) -> None:
    """Unpack the pinned source, run the recipe's commands with its environment, normalize the wheel."""
    inputs = ctx.action.inputs
    fetched = ctx.deps[inputs["fetch"]]
    with scratch_dir(ctx.out) as scratch_name:
        scratch = Path(scratch_name)
        source_root = _unpack(fetched, scratch / "src")
        subdir = next(iter(inputs["source"].values())).get("subdir")
        if subdir:
            source_root = source_root / subdir
        dist = scratch / "dist"
        dist.mkdir()
        constraints = scratch / "constraints.txt"
        constraints.write_text("".join(f"{pin}\n" for pin in inputs["build_requires"]))
        python = sys.executable
        values = {"python": python, "dist": str(dist), "jobs": str(os.cpu_count() or 2)}
        if inputs["device_code"]:
            values["rocm_home"], python = _build_venv(ctx, scratch)
        else:
            python = _pinned_venv(ctx, scratch, inputs["build_requires"])
        values["python"] = python
        env = {key: render(value, values) for key, value in inputs["env"].items()}
        env.update({"SOURCE_DATE_EPOCH": str(inputs["source_date_epoch"]), "PIP_CONSTRAINT": str(constraints),
                    "PYTHONHASHSEED": "0"})
        for command in inputs["commands"]:
            proc.run([render(arg, values) for arg in command], cwd=source_root, env=env, log=ctx.log)
        built = dist / inputs["upstream_wheel"]
        if not built.is_file():
            got = ", ".join(p.name for p in dist.iterdir()) or "nothing"
            raise CairnError(f"{ctx.action.id}: the build produced {got}, not {inputs['upstream_wheel']}")
        wheel = repack(built, ctx.out / "wheels", source_date_epoch=inputs["source_date_epoch"],
                       version=inputs["build_version"], extra_requires=tuple(inputs["requires"]))
    write_report(ctx.out, [wheel], {"part": "framework", "project": inputs["project"], "version": inputs["build_version"],
                                    "upstream_version": inputs["version"]})


def _unpack(fetched: Path, dest: Path) -> Path:
    """An sdist's single top directory, or a git checkout's ``src/``."""
    archives = sorted(fetched.glob("*.tar.gz"))
    if archives:
        dest.mkdir(parents=True)
        with tarfile.open(archives[0]) as tar:
            tar.extractall(dest, filter="data")
        tops = [p for p in dest.iterdir() if p.is_dir()]
        return tops[0] if len(tops) == 1 else dest
    if (fetched / "src").is_dir():
        shutil.copytree(fetched / "src", dest, symlinks=True)
        return dest
    raise CairnError(f"no sdist or checkout in {fetched}")


def _pinned_venv(ctx: ActionContext, scratch: Path, build_requires: list[str]) -> str:
    """A venv holding exactly the recipe's pinned build backend, for builds run without build isolation.

    pip's isolated build environment installs the newest backend that satisfies the project's own ranges, and
    newer pips no longer apply ``PIP_CONSTRAINT`` there — so the same sdist built a month later could embed a
    different setuptools-scm's ``_version.py``. Building inside this venv makes the backend an input.
    """
    venv = scratch / "build-venv"
    proc.run([sys.executable, "-m", "venv", str(venv)], log=ctx.log)
    python = str(venv / "bin" / "python")
    proc.run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir", *build_requires], log=ctx.log)
    return python


def _build_venv(ctx: ActionContext, scratch: Path) -> tuple[str, str]:
    """A venv holding our SDK wheels for the family (core, devel, libraries): the build environment."""
    venv = scratch / "venv"
    proc.run([sys.executable, "-m", "venv", str(venv)], log=ctx.log)
    python = str(venv / "bin" / "python")
    links = [str(tree / "wheels") for dep, tree in ctx.deps.items() if dep.startswith("package:") and (tree / "wheels").is_dir()]
    family = ctx.action.family
    proc.run([python, "-m", "pip", "install", "--no-index", *[a for d in links for a in ("--find-links", d)],
              f"rocm-sdk[devel,{family}]", *ctx.action.inputs["build_requires"]], log=ctx.log)
    site = proc.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], log=ctx.log).stdout.strip()
    return f"{site}/{ROOTS['devel']}", python


# -- HIP extensions ------------------------------------------------------------------------------------------
def run_hip_extension(ctx: ActionContext) -> None:
    """Our per-family HIP library + its Python API as one wheel, gated on the audit of the library."""
    inputs = ctx.action.inputs
    built = ctx.deps[inputs["build"]]
    library = built / "lib" / inputs["library"]
    if not library.is_file():
        raise CairnError(f"{ctx.action.id}: {inputs['build']} has no lib/{inputs['library']}")
    package = inputs["package"]
    with scratch_dir(ctx.out) as scratch_name:
        scratch = Path(scratch_name)
        lib_copy = scratch / inputs["library"]
        shutil.copyfile(library, lib_copy)
        os.chmod(lib_copy, 0o755)
        elf.set_rpath(lib_copy, elf.origin_rpath(f"{package}/lib", f"{ROOTS['core']}/lib"), ctx.log)
        check_coverage(lib_copy, tuple(inputs["targets"]))
        info = elf.inspect(lib_copy)
        core = ctx.deps.get("package:rocm-sdk-core")
        tag = elf.platform_tag([info] if info else [], provided_by(core) if core else ())  # libamdhip64: core's
        tag.check(inputs["project"])
        build_json = built / "share" / "cairn" / f"{inputs['component']}.json"
        build_info = json.loads(build_json.read_text()) if build_json.is_file() else {}
        build_info.update({"family": ctx.action.family, "targets": list(inputs["targets"]), "version": inputs["build_version"]})
        members = [Member.file(f"{package}/{p.name}", p) for p in sorted((RUNTIME_DIR / package).glob("*.py"))]
        members += [Member(f"{package}/lib/{inputs['library']}", source=lib_copy, executable=True),
                    Member.text(f"{package}/build.json", json.dumps(build_info, indent=2, sort_keys=True) + "\n")]
        members += [Member(f"{package}/include/{h.name}", source=h) for h in sorted((built / "include").glob("*.h"))]
        metadata = Metadata(name=inputs["project"], version=inputs["build_version"], summary=inputs["description"],
                            requires_dist=tuple(inputs["requires"]), requires_python=">=3.8", license="MIT")
        wheel = write_wheel(ctx.out / "wheels", metadata, f"py3-none-{tag.tag}", members,
                            source_date_epoch=inputs["source_date_epoch"])
    write_report(ctx.out, [wheel], {"part": "hip-extension", "project": inputs["project"], "family": ctx.action.family,
                                    "targets": list(inputs["targets"]),
                                    "platform": {"tag": tag.tag, "reason": tag.reason, "system_libraries": list(tag.external)}})

