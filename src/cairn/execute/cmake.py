"""The ``cmake`` build kind: configure, build and install a pinned source tree inside the release's build image.

The fetched source is mounted read-only at ``/src``, the dependencies' trees (headers, libraries, CMake
packages of components built before) read-only under ``/deps/<n>`` and on ``CMAKE_PREFIX_PATH``, and the
install prefix is a fresh ``/out``; the container has no network, so a configure step that tries to download
fails instead of making the build depend on the day. The build tree lives in the container's own /tmp and is
thrown away: only the installed files become the action's output.

A pinned sdist (a ``pypi`` source: one ``.tar.gz``) is mounted as ``/src.tar.gz`` and unpacked inside the
container, so nothing in the archive can choose a path on the host; ``source_subdir`` then names the CMake
project in it (``llama_cpp_python-0.3.36/vendor/llama.cpp``). Three more args serve such vendored trees:

- ``stage_deps = "debian"``: Debian's CMake package files locate themselves by their real path under
  ``/usr/lib/x86_64-linux-gnu/cmake`` and cannot be used from ``/deps/<n>``, so each dependency's
  ``include/`` and ``lib/`` are linked back into the image's ``/usr`` (the CMake files copied, since they
  resolve symlinks) before configuring;
- ``build_targets``: build only these targets (the tools a release ships, not every test and example) and
  install by copying: executables to ``/out/bin``, shared libraries to ``/out/lib`` (their RPATH is the
  project's install RPATH, e.g. ``$ORIGIN/../lib``);
- ``device_libraries``: libraries that must carry device code for exactly the action's targets, checked
  by the audit before the output is committed (a build that silently dropped a target fails here);
- ``vendored_build = { number = N, commit = "abc1234" }``: the upstream build a vendored llama.cpp tree is.
  An sdist has no ``.git``, so llama.cpp's ``build-info.cmake`` would name ``build 0, commit unknown``; the
  pin becomes ``-DLLAMA_BUILD_NUMBER``/``-DLLAMA_BUILD_COMMIT`` (what ``--version`` prints), and the commit
  is checked against the sdist's own ``CHANGELOG.md`` section for its version before anything is compiled,
  so a new sdist with a stale pin fails instead of naming another build.

Every compile runs under a small launcher that records its CPU seconds (user + system of the compiler,
so a busy shared host does not inflate them) and wall seconds; the list and its sums go to the action's
log, not its output, so the output stays reproducible and the log says where the build's time went.

The launcher also gives each HIP compile an explicit ``-cuid`` derived from its object's path in the build
tree (the same on every machine). clang's default id hashes the whole command line, and a compiler cache
runs the compiler with its arguments reordered and one added (measured with sccache 0.17): the same source
then got another ``__hip_cuid_…`` symbol, so a build through the cache gave other bytes than one without it.
"""

from __future__ import annotations

import os
import re
import shlex
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, cast

from cairn.audit.check import check_coverage
from cairn.errors import CairnError
from cairn.execute.compiler_cache import CompilerCache
from cairn.execute.compiler_cache import start_lines as cache_start_lines
from cairn.execute.compiler_cache import stats_lines as cache_stats_lines
from cairn.execute.in_image import run_in_build_image

GENERATOR = "Ninja"


ARCHIVE_IN_IMAGE = "/src.tar.gz"
UNPACKED_IN_IMAGE = "/tmp/src"
# Debian's multiarch prefix, where the CMake package files of the release's debs expect to live
_DEB_LIBDIR = "/usr/lib/x86_64-linux-gnu"


_TIMER, _TIMES = "/tmp/cairn-cpu-seconds.py", "/tmp/cairn-cpu-seconds.log"
_TIMER_SOURCE = f"""
import hashlib, resource, subprocess, sys, time
args = sys.argv[1:]
if ("-c" in args and "-o" in args and ["-x", "hip"] in [args[i:i + 2] for i in range(len(args) - 1)]
        and not any(a.startswith(("-cuid=", "-fuse-cuid")) for a in args)):
    args.append("-cuid=" + hashlib.sha256(("cairn-hip-tu:" + args[args.index("-o") + 1]).encode()).hexdigest()[:16])
start = time.monotonic()
code = subprocess.call(args)
used = resource.getrusage(resource.RUSAGE_CHILDREN)
target = sys.argv[sys.argv.index("-o") + 1] if "-o" in sys.argv else "?"
with open("{_TIMES}", "a") as log:
    log.write(f"{{used.ru_utime + used.ru_stime:.1f}} {{time.monotonic() - start:.1f}} {{target}}\\n")
sys.exit(code)
"""


def _names(args: Mapping[str, object], key: str) -> list[str]:
    """``args[key]`` as strings: the manifest gives a TOML array (absent or empty: none); its values are
    not checked against a schema, so the type here is what the manifest promises, not what the loader proved."""
    return [str(item) for item in cast(Iterable[object], args.get(key, []) or [])]


def cmake_script(args: Mapping[str, object], targets: Sequence[str], deps: int, jobs: int, *,
                 archive: bool = False, compiler_cache: bool = False) -> str:
    """The shell script run in the image (exposed so logs and tests can show it)."""
    subdir = str(args.get("source_subdir", "") or "")
    if subdir.startswith("/") or ".." in Path(subdir).parts:
        raise CairnError(f"cmake source_subdir '{subdir}' must stay inside the source tree")
    root = UNPACKED_IN_IMAGE if archive else "/src"
    source = f"{root}/{subdir}".rstrip("/")
    build_targets = _names(args, "build_targets")
    for name in build_targets:
        if not name.replace("-", "").replace("_", "").isalnum():
            raise CairnError(f"cmake build target '{name}' is not a CMake target name (letters, digits, '-', '_')")
    stage = str(args.get("stage_deps", "") or "")
    if stage not in ("", "debian"):
        raise CairnError(f"cmake stage_deps '{stage}' is not known (use \"debian\" or leave it out)")
    # staged dependencies are found in /usr like the image's own packages; /deps/<n> would be found first
    prefix_path = "" if stage == "debian" else ";".join(f"/deps/{n}" for n in range(deps))
    defines = ["-DCMAKE_INSTALL_PREFIX=/out", "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix_path}",
               "-DCMAKE_INSTALL_LIBDIR=lib"]
    if targets:
        joined = ";".join(targets)
        defines += [f"-DGPU_TARGETS={joined}", f"-DAMDGPU_TARGETS={joined}", f"-DCMAKE_HIP_ARCHITECTURES={joined}"]
    defines += vendored_build_defines(args)
    extra = _names(args, "cmake_args")
    quoted = " ".join(_quote(a) for a in [*defines, *extra])
    lines = ["set -eu"]
    if archive:
        lines.append(f"mkdir -p {UNPACKED_IN_IMAGE} && tar -xzf {ARCHIVE_IN_IMAGE} -C {UNPACKED_IN_IMAGE} --no-same-owner")
    if stage == "debian" and deps:
        lines += [f"for d in {' '.join(f'/deps/{n}' for n in range(deps))}; do",
                  '  if [ -d "$d/include" ]; then cp -rs "$d/include/." /usr/include/; fi',
                  f'  if [ -d "$d/lib" ]; then cp -rs "$d/lib/." {_DEB_LIBDIR}/; fi',
                  f'  if [ -d "$d/lib/cmake" ]; then cp -r --remove-destination "$d/lib/cmake/." {_DEB_LIBDIR}/cmake/; fi',
                  "done"]
    # every compile and link runs under a launcher that records its CPU seconds (not wall time: the host is shared)
    lines += [f"cat > {_TIMER} <<'EOF'", _TIMER_SOURCE.strip(), "EOF", f"touch {_TIMES}"]
    launchers = " ".join(_quote(f"-DCMAKE_{lang}_LINKER_LAUNCHER=python3;{_TIMER}") for lang in ("C", "CXX", "HIP"))
    if compiler_cache:
        # compiles go through sccache when its server started ($CAIRN_CC); its CPU time is then the server's,
        # which the launcher does not see: the cache's own statistics follow the build in the log
        lines += cache_start_lines()
        launchers += " " + " ".join(f'"-DCMAKE_{lang}_COMPILER_LAUNCHER=python3;{_TIMER}${{CAIRN_CC:+;$CAIRN_CC}}"'
                                    for lang in ("C", "CXX", "HIP"))
    else:
        launchers += " " + " ".join(_quote(f"-DCMAKE_{lang}_COMPILER_LAUNCHER=python3;{_TIMER}") for lang in ("C", "CXX", "HIP"))
    # shlex.quote: the manifest's source_subdir may hold a space or ';' (a plain path stays as it was, so the
    # script of every existing manifest is byte-for-byte the same)
    lines += [f"cmake -S {shlex.quote(source)} -B /tmp/build -G {GENERATOR} {quoted} {launchers}", "started=$(date +%s)"]
    build = f"cmake --build /tmp/build --parallel {jobs}" + (f" --target {' '.join(build_targets)}" if build_targets else "")
    # the build's status is kept so where the time went is logged even for a build that fails
    lines += ["status=0", f"{build} || status=$?",
              # CPU and wall seconds per translation unit, slowest first, and their sums
              'echo "# build wall seconds: $(( $(date +%s) - started ))"',
              f"echo '# compile CPU seconds, wall seconds, object (slowest first)'; sort -rn {_TIMES}",
              f"awk '{{cpu += $1; n += 1}} END {{printf \"# %d compiles, %.0f CPU seconds\\n\", n, cpu}}' {_TIMES}",
              f"awk '/\\.cu\\.o$/ {{cpu += $1; n += 1}} END {{printf \"# %d .cu (HIP) compiles, %.0f CPU seconds\\n\", n, cpu}}' {_TIMES}",
              *(cache_stats_lines() if compiler_cache else []),
              'if [ "$status" -ne 0 ]; then exit "$status"; fi']
    if build_targets:
        lines += ["mkdir -p /out/bin /out/lib",
                  *(f"cp -a /tmp/build/bin/{name} /out/bin/" for name in build_targets),
                  "find /tmp/build -name 'lib*.so*' \\( -type f -o -type l \\) -exec cp -a {} /out/lib/ \\;"]
    else:
        lines.append("cmake --install /tmp/build")
    return "\n".join(lines) + "\n"


def vendored_build_defines(args: Mapping[str, object]) -> list[str]:
    """``-DLLAMA_BUILD_NUMBER``/``-DLLAMA_BUILD_COMMIT`` from ``vendored_build`` (none when it is absent)."""
    pin = args.get("vendored_build")
    if pin is None:
        return []
    if not isinstance(pin, Mapping):
        raise CairnError("cmake vendored_build must be a table { number = <build>, commit = \"<hex>\" }")
    number, commit = pin.get("number"), str(pin.get("commit", ""))
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0 or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise CairnError(f"cmake vendored_build {dict(pin)} needs a positive integer number and a hex commit "
                         "(e.g. { number = 11312, commit = \"0c1e57098\" })")
    return [f"-DLLAMA_BUILD_NUMBER={number}", f"-DLLAMA_BUILD_COMMIT={commit}"]


def check_vendored_build(archive: Path, args: Mapping[str, object]) -> None:
    """The sdist's ``CHANGELOG.md`` names ``vendored_build.commit`` in its own version's section.

    llama-cpp-python records each vendored update as "update llama.cpp to ggml-org/llama.cpp@<commit>"
    under ``## [<version>]``; the version is the archive's top directory (``llama_cpp_python-0.3.36``).
    Read from the archive without unpacking it on the host."""
    pin = args.get("vendored_build")
    if not isinstance(pin, Mapping):
        return
    commit = str(pin.get("commit", ""))
    try:
        with tarfile.open(archive) as tar:
            member = next((m for m in tar if m.isfile() and len(Path(m.name).parts) == 2
                           and Path(m.name).name == "CHANGELOG.md"), None)
            handle = tar.extractfile(member) if member else None
            text = handle.read().decode("utf-8", "replace") if handle else ""
            top = Path(member.name).parts[0] if member else ""
    except (OSError, tarfile.TarError) as exc:
        raise CairnError(f"{archive.name}: cannot read its CHANGELOG.md to check vendored_build ({exc})") from None
    if not text:
        raise CairnError(f"{archive.name} has no CHANGELOG.md at its top: vendored_build {commit} cannot be "
                         "checked — drop vendored_build or use the sdist that records its llama.cpp commit")
    version = top.rsplit("-", 1)[-1]
    section = re.search(rf"^## \[{re.escape(version)}\]\s*$(.*?)(?=^## \[|\Z)", text, re.M | re.S)
    named = re.findall(r"llama\.cpp@([0-9a-f]{7,40})", section.group(1) if section else "")
    if not any(c.startswith(commit) or commit.startswith(c) for c in named):
        raise CairnError(f"{archive.name}: its CHANGELOG.md section [{version}] names llama.cpp "
                         f"{', '.join(named) or 'no commit'}, not vendored_build's {commit} — update vendored_build "
                         "(number and commit of that upstream build) in the manifest")


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def cmake_in_image(source: Path, deps: Sequence[Path], out: Path, *, image: str, args: Mapping[str, object],
                   targets: Sequence[str], log: IO[str], jobs: int = 2,
                   compiler_cache: CompilerCache | None = None) -> None:
    """Run the configure/build/install script for ``source`` in ``image``; the install lands in ``out``.

    With ``compiler_cache``, compiles go through sccache and its S3 bucket (``cairn.execute.compiler_cache``);
    the output is the same either way."""
    archive = source.is_file()
    if archive:
        check_vendored_build(source, args)
    script = cmake_script(args, targets, len(deps), jobs, archive=archive, compiler_cache=compiler_cache is not None)
    log.write(script)
    mounts = ["-v", f"{source}:{ARCHIVE_IN_IMAGE if archive else '/src'}:ro"]
    for n, dep in enumerate(deps):
        mounts += ["-v", f"{dep}:/deps/{n}:ro"]
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "0")
    with tempfile.TemporaryDirectory(prefix=".cmake-", dir=out.parent) as work:
        run_in_build_image(image, script, env={"SOURCE_DATE_EPOCH": epoch, "LC_ALL": "C", "TZ": "UTC"},
                           mounts=[*mounts, "-v", f"{work}:/out"], targets=targets, log=log, timeout=4 * 3600,
                           compiler_cache=compiler_cache)
        for entry in sorted(Path(work).iterdir()):
            os.replace(entry, out / entry.name)
    check_device_code(out, args, targets)


def check_device_code(out: Path, args: Mapping[str, object], targets: Sequence[str]) -> None:
    """Every library named by ``device_libraries`` carries code for exactly ``targets`` (the audit's words)."""

    for name in _names(args, "device_libraries"):
        library = out / "lib" / name
        if not library.is_file():
            raise CairnError(f"the build installed no lib/{name} (device_libraries names it): "
                             "check the build's targets and options")
        check_coverage(library, targets)
