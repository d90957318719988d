"""Build Cairn's own HIP code for a set of gfx targets, reproducibly, and gate it on the audit.

One hipcc invocation per library compiles every translation unit for every target (``--offload-arch``
each), so each TU's bundle carries the same target list. Output bytes depend only on the sources, the
targets and the toolchain: inputs and targets are sorted, source and output directories are mapped away
(``-ffile-prefix-map``), the build ID is a content hash, and ``SOURCE_DATE_EPOCH`` is pinned.
``cairn.audit.check.check_coverage`` then proves with the audit that every bundle carries exactly the requested targets.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO

from cairn.errors import InputError
from cairn.execute.compiler_cache import CompilerCache
from cairn.execute.compiler_cache import start_lines as cache_start_lines
from cairn.execute.compiler_cache import stats_lines as cache_stats_lines
from cairn.execute.in_image import run_in_build_image
from cairn.model.targets import load_registry
from cairn.proc import require_tool, run

# Debian's hipcc picks NVIDIA when nvcc is on PATH; AMD must be asked for explicitly.
HIP_ENV = {"HIP_PLATFORM": "amd", "LC_ALL": "C", "TZ": "UTC"}
FLAGS = ("-O2", "-fPIC", "-shared", "-std=c++17", "-fuse-cuid=none")


def hipcc_version() -> str:
    """``hip 5.2.21153-0; clang 15.0.6`` — the toolchain identity that goes into action keys."""
    hipcc = require_tool("hipcc", "hipcc")
    text = run([hipcc, "--version"], env=HIP_ENV).stdout
    hip = re.search(r"HIP version:\s*(\S+)", text)
    clang = re.search(r"clang version\s*(\S+)", text)
    if not hip or not clang:
        raise InputError("hipcc", f"cannot read the HIP and clang versions from 'hipcc --version': {text.strip()[:200]!r}")
    return f"hip {hip[1]}; clang {clang[1]}"


def hipcc_command(
    sources: Sequence[Path], targets: Sequence[str], out: Path, *, device_lib_path: Path, include_dirs: Iterable[Path] = ()
) -> list[str]:
    """The exact hipcc argument list (exposed so action keys and logs can show it)."""
    ordered = sorted(Path(s).resolve() for s in sources)
    includes = [Path(d).resolve() for d in include_dirs]
    mapped = sorted({str(s.parent) for s in ordered} | {str(d) for d in includes} | {str(out.parent.resolve())}, key=len, reverse=True)
    cmd = ["hipcc", *FLAGS]
    cmd += [f"-ffile-prefix-map={folder}=." for folder in mapped]
    cmd += [f"--offload-arch={t}" for t in sorted(set(targets))]
    cmd += [f"--rocm-device-lib-path={device_lib_path}"]
    cmd += [f"-I{d}" for d in includes]
    cmd += ["-Wl,--build-id=sha1", f"-Wl,-soname,{out.name}"]
    cmd += [str(s) for s in ordered]
    return [*cmd, "-o", str(out)]


def compile_hip(
    sources: list[Path],
    targets: tuple[str, ...],
    out: Path,
    *,
    device_lib_path: Path,
    log: IO[str],
    include_dirs: Iterable[Path] = (),
) -> None:
    """Compile ``sources`` into the shared library ``out`` with device code for every target.

    Raises InputError for an empty or unknown target list or missing sources, ToolMissing without hipcc,
    ActionFailed (with the log tail) when hipcc fails. ``out`` appears only when the build succeeded.
    """
    if not sources:
        raise InputError(out, "no HIP sources to compile")
    missing = [str(s) for s in sources if not Path(s).is_file()]
    if missing:
        raise InputError(missing[0], "HIP source does not exist")
    _check_targets(targets)
    if not (Path(device_lib_path) / "ockl.bc").is_file():
        raise InputError(device_lib_path, "not a ROCm device library directory (no ockl.bc)", "apt-get install rocm-device-libs")
    hipcc = require_tool("hipcc", "hipcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**HIP_ENV, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "0")}
    with tempfile.TemporaryDirectory(prefix=".hipcc-", dir=out.parent) as work:
        partial = Path(work) / out.name
        # built in a private temp dir (mapped to "." like the sources) and moved into place when complete
        cmd = hipcc_command(sources, targets, partial, device_lib_path=Path(device_lib_path), include_dirs=include_dirs)
        run([hipcc, *cmd[1:]], cwd=Path(work), env={**env, "TMPDIR": work}, log=log)
        os.replace(partial, out)


def compile_hip_in_image(
    sources_dir: Path, names: list[str], targets: tuple[str, ...], out: Path, *, image: str, device_lib_path: str,
    log: IO[str], compiler_cache: CompilerCache | None = None,
) -> None:
    """The same hipcc command, run by the build image's toolchain through the private Docker Engine.

    Sources are mounted read-only at ``/src`` and a fresh work directory at ``/out``; the container has no
    network. Paths inside are the same on every machine, so the output bytes do not depend on where the
    store lives. ``out`` appears only when the build succeeded.
    """
    if not names:
        raise InputError(sources_dir, "no HIP sources to compile")
    _check_targets(targets)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".hipcc-", dir=out.parent) as work:
        script = in_image_script(sorted(names), targets, out.name, device_lib_path,
                                 compiler_cache=compiler_cache is not None)
        log.write(script)
        epoch = os.environ.get("SOURCE_DATE_EPOCH", "0")
        run_in_build_image(image, script, env={**HIP_ENV, "SOURCE_DATE_EPOCH": epoch, "TMPDIR": "/tmp"},
                           mounts=["-v", f"{sources_dir}:/src:ro", "-v", f"{work}:/out"], workdir="/out",
                           targets=targets, log=log, timeout=3600, compiler_cache=compiler_cache)
        os.replace(Path(work) / out.name, out)


def in_image_script(names: Sequence[str], targets: Sequence[str], library: str, device_lib_path: str, *,
                    compiler_cache: bool = False) -> str:
    """One hipcc compile per translation unit, then one link: the commands run inside the build image.

    clang ≥ 19 gives every TU a ``__hip_cuid_<id>`` symbol: ``-fuse-cuid=none`` makes them collide at link
    time, and ``-fuse-cuid=hash`` hashes a command line that holds random temp-file names (measured: two
    builds differed only in those ids). So each TU is compiled alone with an explicit ``-cuid`` derived from its
    file name, which is unique within the library and the same on every machine.
    """
    arch = [f"--offload-arch={t}" for t in sorted(set(targets))]
    # -fno-math-errno: sqrtf is then the sqrtss instruction, not sid's libm sqrtf@GLIBC_2.43 (the glibc floor)
    common = ["-O2", "-fPIC", "-std=c++17", "-fno-math-errno", "-ffile-prefix-map=/src=.", "-ffile-prefix-map=/out=.",
              f"--rocm-device-lib-path={device_lib_path}", "-I/src", *arch]
    lines = ["set -eu", "mkdir -p /out/obj"]
    if compiler_cache:  # each compile then runs as `sccache hipcc …` when sccache's server started
        lines += cache_start_lines()
    launcher = ["$CAIRN_CC"] if compiler_cache else []
    objects = []
    for name in names:
        cuid = hashlib.sha256(f"cairn-hip-tu:{name}".encode()).hexdigest()[:16]
        obj = f"/out/obj/{Path(name).stem}.o"
        objects.append(obj)
        # every name quoted (a source named 'a b;c.hip' is one argument, never a second command); plain names
        # are left as they were, so the script of an existing build is byte-for-byte the same
        lines.append(" ".join([*launcher, "hipcc", "-c", *map(shlex.quote, common), f"-cuid={cuid}",
                               shlex.quote(f"/src/{name}"), "-o", shlex.quote(obj)]))
    lines.append(" ".join(["hipcc", "-shared", "-fPIC", *arch, "-Wl,--build-id=sha1", shlex.quote(f"-Wl,-soname,{library}"),
                           *map(shlex.quote, objects), "-o", shlex.quote(f"/out/{library}")]))
    lines.append("rm -rf /out/obj")
    if compiler_cache:
        lines += cache_stats_lines()
    return "\n".join(lines) + "\n"


def _check_targets(targets: Sequence[str]) -> None:
    if not targets:
        raise InputError("targets", "no gfx targets to compile for")
    registry = load_registry()
    for target in targets:
        try:
            registry.parse_target_id(target)
        except ValueError as exc:
            what, _, fix = str(exc).partition(" — ")
            raise InputError("targets", what, fix) from None
