"""The ``cmake`` build kind: configure, build and install a pinned source tree inside the release's build image.

The fetched source is mounted read-only at ``/src``, the dependencies' trees (headers, libraries, CMake
packages of components built before) read-only under ``/deps/<n>`` and on ``CMAKE_PREFIX_PATH``, and the
install prefix is a fresh ``/out``; the container has no network, so a configure step that tries to download
fails instead of making the build depend on the day. The build tree lives in the container's own /tmp and is
thrown away: only the installed files become the action's output.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from cairn.errors import CairnError
from cairn.proc import require_tool, run

GENERATOR = "Ninja"


def cmake_script(args: Mapping[str, object], targets: Sequence[str], deps: int, jobs: int) -> str:
    """The shell script run in the image (exposed so logs and tests can show it)."""
    subdir = str(args.get("source_subdir", "") or "")
    if subdir.startswith("/") or ".." in Path(subdir).parts:
        raise CairnError(f"cmake source_subdir '{subdir}' must stay inside the source tree")
    source = f"/src/{subdir}".rstrip("/")
    prefix_path = ";".join(f"/deps/{n}" for n in range(deps))
    defines = ["-DCMAKE_INSTALL_PREFIX=/out", "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix_path}",
               "-DCMAKE_INSTALL_LIBDIR=lib"]
    if targets:
        joined = ";".join(targets)
        defines += [f"-DGPU_TARGETS={joined}", f"-DAMDGPU_TARGETS={joined}", f"-DCMAKE_HIP_ARCHITECTURES={joined}"]
    extra = [str(a) for a in args.get("cmake_args", []) or []]  # type: ignore[union-attr]
    quoted = " ".join(_quote(a) for a in [*defines, *extra])
    return ("set -eu\n"
            f"cmake -S {source} -B /tmp/build -G {GENERATOR} {quoted}\n"
            f"cmake --build /tmp/build --parallel {jobs}\n"
            "cmake --install /tmp/build\n")


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def cmake_in_image(source: Path, deps: Sequence[Path], out: Path, *, image: str, args: Mapping[str, object],
                   targets: Sequence[str], log: IO[str], jobs: int = 2) -> None:
    """Run the configure/build/install script for ``source`` in ``image``; the install lands in ``out``."""
    from cairn.services import engine_host

    docker = require_tool("docker", "docker.io")
    script = cmake_script(args, targets, len(deps), jobs)
    log.write(script)
    mounts = ["-v", f"{source}:/src:ro"]
    for n, dep in enumerate(deps):
        mounts += ["-v", f"{dep}:/deps/{n}:ro"]
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "0")
    with tempfile.TemporaryDirectory(prefix=".cmake-", dir=out.parent) as work:
        run([docker, "run", "--rm", "--network", "none", "-e", f"SOURCE_DATE_EPOCH={epoch}", "-e", "LC_ALL=C",
             "-e", "TZ=UTC", *mounts, "-v", f"{work}:/out", image, "sh", "-c", script],
            env={"DOCKER_HOST": engine_host()}, log=log, timeout=4 * 3600)
        for entry in sorted(Path(work).iterdir()):
            os.replace(entry, out / entry.name)
