"""The ``user-install`` gate: a cell's own commands, run as its user runs them, on stock hosts.

Every other gate runs in Cairn's images, whose system libraries hide what a wheel forgot to carry; this one
installs the way the matrix page tells a user to. The published repository is served over HTTP from loopback
(a threaded ``http.server``; containers use the host's network, since the private engine may have no bridge),
and for every cell of the target, on every stock host its wheels' tags admit:

1. ``python3 -m venv`` — a fresh venv, nothing else installed;
2. the cell's ``pip install --index-url …`` exactly as ``cairn.matrix.commands.pip_command`` prints it for the
   matrix page, then the same arguments through uv (``uv pip install …``; uv's binary is mounted, the host has
   no network but the served index);
3. ``cairn.userinstall.probe``: every ELF of the installed wheels loads with ``ctypes`` (llama.cpp's HIP backend
   library included), every top-level module imports, ``python -m rocm_sdk test`` reports the runtime loaded
   and the device ("no GPU" here), not a load failure.

On the highest host *below* the cell's glibc floor (its wheels' ``manylinux_2_N`` tags, PEP 600) pip and uv must
refuse: exit non-zero with a resolver message and nothing installed — never install and then fail to load. A
wheel tagged ``linux_x86_64`` claims every Linux, so every host admits it and none checks a refusal.

Each cell has a verdict of its own (``evidence["cells"]``, by framework): the JAX cell failing to load AMD's plugin
says nothing about the llama.cpp cell beside it, and the bundle gives every cell its own result. Within a cell the
first failure is the verdict's reason and names the host, the installer, the command and the library; the cell
stops there (each install of a GPU cell moves gigabytes). The gate's own status is the worst of its cells'.

``every_host`` decides how many admitted hosts a cell installs on: all of them where the release's channel requires
the gate (nightly and up), else the oldest one whose Python the cell serves — a dev build's gate in minutes, on the
host closest to the cell's floor. The refusal below the floor is checked either way.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from requests.exceptions import RequestException

from cairn.errors import CairnError
from cairn.matrix.commands import pip_command
from cairn.matrix.model import Cell, load_matrix
from cairn.services import docker_client

REPORT = "USER-INSTALL-REPORT "
INSTALL_EXIT = "USER-INSTALL-EXIT "
PROBE = Path(__file__).with_name("probe.py")
INSTALLERS = ("pip", "uv")
# what pip and uv say when no wheel fits the host (the resolver refusing), as opposed to any other failure
RESOLVER_REFUSAL = re.compile(r"No matching distribution found|Could not find a version that satisfies|"
                              r"is not a supported wheel on this platform|No solution found when resolving|"
                              r"no wheels? with a matching platform tag|only has wheels with the following platform", re.IGNORECASE)
_RANK = {"passed": 0, "not-run": 1, "failed": 2}  # two verdicts of one framework: the worse one holds
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_")


@dataclass(frozen=True)
class HostImage:
    name: str  # debian-13
    glibc: str  # 2.41, read from the host root's libc6
    reference: str  # the image in the private engine
    python: str = ""  # 3.13: the host's python3 ("" = unknown: any cell's wheels are tried)

    @property
    def glibc_version(self) -> tuple[int, int]:
        major, minor = self.glibc.split(".")[:2]
        return int(major), int(minor)


def wheel_tags(filename: str) -> frozenset[Tag]:
    """The tags of a wheel file name, a PEP 825 variant's too (``…-py3-none-linux_x86_64-gfx1151.whl``: the label
    after the platform names the variant, not a tag)."""
    try:
        return parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        stem, _, _label = filename.removesuffix(".whl").rpartition("-")
        try:
            return parse_wheel_filename(stem + ".whl")[3]
        except InvalidWheelFilename:
            raise CairnError(f"{filename}: not a wheel file name — the matrix lists only wheels") from None


def wheel_floor(filename: str) -> tuple[int, int]:
    """The lowest glibc a wheel installs on by its tags (the most lenient of its platform tags): ``(2, 39)`` for
    ``manylinux_2_39_x86_64``, ``(0, 0)`` for ``linux_x86_64`` or ``any`` (no promise, so no host refuses it)."""
    tags = wheel_tags(filename)
    floors = []
    for tag in tags:
        platform = tag.platform
        match = _MANYLINUX.match(platform)
        if match:
            floors.append((int(match.group(1)), int(match.group(2))))
        elif platform.split("_x86_64")[0] in _LEGACY:
            floors.append(_LEGACY[platform.split("_x86_64")[0]])
        else:
            floors.append((0, 0))
    return min(floors)


def cell_floor(cell: Cell) -> tuple[tuple[int, int], str]:
    """The highest floor over the cell's wheels, and the wheel that sets it ("" when none promises a glibc)."""
    floor, which = (0, 0), ""
    for wheel in cell.wheels:
        mine = wheel_floor(wheel.filename)
        if mine > floor:
            floor, which = mine, wheel.filename
    return floor, which


def runs_python(cell: Cell, host: HostImage) -> bool:
    """Whether every project of the cell has a wheel the host's ``python3`` installs (``py3``, its own ``cp3X``,
    or an ``abi3`` wheel of an older one), as pip chooses: llama-cpp-python's index serves numpy for 3.11–3.14, so
    its cell installs on a host whose python3 is 3.13; a project with only ``cp314`` wheels says nothing there."""
    if not host.python:
        return True
    major, minor = (int(x) for x in host.python.split(".")[:2])
    fitting: dict[str, bool] = {}
    for wheel in cell.wheels:
        project = canonicalize_name(wheel.filename.split("-", 1)[0])
        fits = any(_fits(t.interpreter, t.abi, major, minor) for t in wheel_tags(wheel.filename))
        fitting[project] = fitting.get(project, False) or fits
    return all(fitting.values())


def _fits(interpreter: str, abi: str, major: int, minor: int) -> bool:
    if interpreter in ("py3", f"py{major}{minor}", f"cp{major}{minor}"):
        return True
    match = re.fullmatch(r"cp(\d)(\d+)", interpreter)
    return bool(match and abi == "abi3" and (int(match.group(1)), int(match.group(2))) <= (major, minor))


def choose_hosts(floor: tuple[int, int], hosts: Iterable[HostImage], every_host: bool = True) -> tuple[list[HostImage], HostImage | None]:
    """The hosts whose glibc meets ``floor`` (they must install and load), oldest first, and the highest one below
    it (it must refuse). Without ``every_host`` only the oldest admitted host installs: the one nearest the floor,
    where a symbol a wheel's tag forgot would show first."""
    ordered = sorted(hosts, key=lambda h: h.glibc_version)
    admitted = [h for h in ordered if h.glibc_version >= floor]
    below = [h for h in ordered if h.glibc_version < floor]
    return (admitted if every_host else admitted[:1]), (below[-1] if below else None)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """``root`` over HTTP on a free loopback port for as long as the block runs; yields ``http://127.0.0.1:PORT/``."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="user-install-index", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def installer_command(installer: str, command: str) -> str:
    """The cell's pip command for ``installer``: as printed for pip, the same arguments through ``uv pip`` for uv."""
    if not command.startswith("pip install "):
        raise CairnError(f"the matrix's command {command!r} is not a pip install — cairn.matrix.commands changed")
    return command if installer == "pip" else "uv " + command


def projects_of(command: str) -> list[str]:
    """The projects a pip command pins (``"rocm-sdk[device-gfx1100]==7.2.4"`` → ``rocm-sdk``)."""
    return [re.split(r"[\[=<>!~ ]", arg.strip('"'))[0] for arg in command.split()[2:]
            if not arg.startswith("-") and "://" not in arg]


def uv_binary() -> Path:
    """The uv executable mounted into the hosts (its Python package's binary, never a shell shim)."""
    try:
        # lazy: an optional dependency at run time, said in one line when it is absent
        from uv import find_uv_bin
    except ImportError:
        raise CairnError("uv is not installed — pip install uv (the user-install gate installs with uv too)") from None
    return Path(find_uv_bin()).resolve()


def _script(command: str, projects: list[str]) -> str:
    return "\n".join([
        "set -u",
        "python3 -m venv /tmp/venv || exit 90",
        ". /tmp/venv/bin/activate",
        f"{command}",
        "rc=$?",
        f"echo \"{INSTALL_EXIT}$rc\"",
        "if [ $rc -eq 0 ]; then exec python /cairn-probe/probe.py; fi",
        "exec python /cairn-probe/probe.py --refusal " + " ".join(projects),
    ])


def run_on_host(host: HostImage, command: str, projects: list[str], log: IO[str], timeout: int = 3600) -> tuple[int, str, dict[str, Any]]:
    """Run one installer command in a fresh container of ``host``: (install exit code, output, probe report)."""

    client = docker_client(timeout=timeout + 60)
    uv = uv_binary()
    options: dict[str, Any] = {
        "network_mode": "host",
        "volumes": {str(PROBE.parent): {"bind": "/cairn-probe", "mode": "ro"}, str(uv): {"bind": "/opt/uv/uv", "mode": "ro"}},
        "environment": {"PATH": "/opt/uv:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                        "HOME": "/tmp", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
                        "UV_NO_CONFIG": "1", "UV_CACHE_DIR": "/tmp/uv-cache", "UV_PYTHON_DOWNLOADS": "never"},
    }
    log.write(f"+ [{host.name}, glibc {host.glibc}] {command}\n")
    started = time.monotonic()
    container = client.containers.create(host.reference, ["/bin/bash", "-c", _script(command, projects)], **options)
    try:
        container.start()
        try:
            container.wait(timeout=timeout)
            late = ""
        except RequestException:  # the engine did not answer in time: the run is a failure, said as one
            late = f"\nerror: timed out after {timeout}s on {host.name}\n"
        output = container.logs(stdout=True, stderr=True).decode(errors="replace") + late
    finally:
        container.remove(force=True)
    log.write(output + f"\n({time.monotonic() - started:.1f}s)\n")
    code = next((int(line[len(INSTALL_EXIT):]) for line in output.splitlines() if line.startswith(INSTALL_EXIT)), -1)
    report_line = next((line for line in output.splitlines() if line.startswith(REPORT)), "")
    report = json.loads(report_line[len(REPORT):]) if report_line else {}
    return code, output, report


def _install_error(output: str) -> str:
    """The installer's own error line (pip's ``ERROR: …``, uv's ``error: …``/``×``), else its last line."""
    lines = [line.strip() for line in output.split(INSTALL_EXIT)[0].splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("ERROR:", "error:", "×", "╰─▶"))]
    return (" ".join(errors[:2]) if errors else (lines[-1] if lines else "no output"))[:400]


@dataclass(frozen=True)
class CellVerdict:
    status: str  # passed | failed | not-run
    reason: str


def check_cell(cell: Cell, base_url: str, hosts: list[HostImage], installers: tuple[str, ...], log: IO[str],
               runs: list[dict[str, Any]], every_host: bool = True) -> CellVerdict:
    """Run the cell on its hosts; appends each run to ``runs`` and returns the cell's verdict (its first failure)."""
    command = pip_command(cell, base_url)
    if command is None:
        return CellVerdict("not-run", f"not-run: {cell.id} prints no pip command (no wheels, or no index to name)")
    usable = [h for h in hosts if runs_python(cell, h)]
    if not usable:
        why = (f"no stock host runs a Python this cell has wheels for "
               f"({', '.join(f'{h.name}: {h.python}' for h in hosts)})")
        runs.append({"cell": cell.id, "skipped": why})
        return CellVerdict("not-run", f"not-run: {why}")
    failure = _install_and_refuse(cell, command, base_url, usable, installers, log, runs, every_host)
    if failure:
        return CellVerdict("failed", failure)
    done = sorted({f"{r['host']}/{r['installer']}" + (" refused" if r["expect"] == "refusal" else "")
                   for r in runs if r.get("cell") == cell.id and "host" in r})
    return CellVerdict("passed", f"installed from the served index with its own command and loaded every library: {', '.join(done)}")


def _install_and_refuse(cell: Cell, command: str, base_url: str, usable: list[HostImage], installers: tuple[str, ...],
                        log: IO[str], runs: list[dict[str, Any]], every_host: bool) -> str:
    """The refusal below the cell's floor, then the installs on its admitted hosts: the first failure, or ""."""
    floor, setter = cell_floor(cell)
    admitted, below = choose_hosts(floor, usable, every_host)
    projects = projects_of(command)
    floor_text = f"glibc {floor[0]}.{floor[1]} ({setter})" if setter else "no glibc floor (no manylinux tag)"
    if below is not None:
        for installer in installers:
            line = installer_command(installer, command)
            started = time.monotonic()
            code, output, report = run_on_host(below, line, projects, log)
            run = {"cell": cell.id, "host": below.name, "glibc": below.glibc, "installer": installer, "command": line,
                   "expect": "refusal", "install_exit": code, "seconds": round(time.monotonic() - started, 1)}
            runs.append(run)
            if code == 0 or report.get("installed"):
                return (f"{below.name} (glibc {below.glibc}) is below {floor_text} but {installer} installed "
                        f"{', '.join(report.get('installed', [])) or 'it'}: `{line}`")
            if not RESOLVER_REFUSAL.search(output):
                return (f"{below.name} (glibc {below.glibc}): {installer} failed without a resolver refusal: "
                        f"`{line}`: {_install_error(output)}")
    if not admitted:
        return f"{cell.id}: no stock host meets {floor_text} (hosts: {', '.join(f'{h.name} {h.glibc}' for h in usable)})"
    for host in admitted:
        for installer in installers:
            line = installer_command(installer, command)
            started = time.monotonic()
            code, output, report = run_on_host(host, line, projects, log)
            run = {"cell": cell.id, "host": host.name, "glibc": host.glibc, "installer": installer, "command": line,
                   "expect": "install", "install_exit": code, "seconds": round(time.monotonic() - started, 1),
                   "report": {k: report.get(k) for k in ("installed", "elf_files", "loaded", "imported", "failures")}}
            runs.append(run)
            if code != 0:
                return f"{host.name} (glibc {host.glibc}): `{line}` exited {code}: {_install_error(output)}"
            failures = report.get("failures")
            if failures is None:
                return f"{host.name} (glibc {host.glibc}): `{line}`: the probe reported nothing: {output.strip()[-300:]}"
            if failures:
                more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
                return f"{host.name} (glibc {host.glibc}): `{line}`: {failures[0]}{more}"
    return ""


def staged_matrix(repo: Path) -> Path:
    """The staging matrix of the one release a scratch repository holds."""
    found = sorted(repo.glob("staging/*/matrix.json"))
    if len(found) != 1:
        raise CairnError(f"{repo}: expected one staged release's matrix.json, found {len(found)} — publish one bundle with --stage-only")
    return found[0]


def user_install_gate(repo: Path, target: str, hosts: list[HostImage], log: IO[str], installers: tuple[str, ...] = INSTALLERS,
                      every_host: bool = True) -> tuple[str, str, dict[str, Any]]:
    """(status, reason, evidence) for the cells of ``target`` in the staged release published at ``repo``: each
    cell's own verdict in ``evidence["cells"]`` (by framework), the worst of them as the gate's status."""
    matrix = load_matrix(staged_matrix(repo))
    cells = [c for c in matrix.cells if c.gfx_target == target]
    runs: list[dict[str, Any]] = []
    verdicts: dict[str, dict[str, str]] = {}
    evidence: dict[str, Any] = {"hosts": {h.name: h.glibc for h in hosts}, "every_host": every_host, "runs": runs, "cells": verdicts}
    if not any(c.wheels for c in cells):
        return "not-run", f"not-run: no cell of {target} lists wheels: nothing to install", evidence
    with serve(repo) as base_url:
        evidence["index"] = base_url
        for cell in cells:
            verdict = check_cell(cell, base_url, hosts, installers, log, runs, every_host)
            log.write(f"{cell.id}: {verdict.status}: {verdict.reason}\n")
            # the bundle matches a verdict to a framework's cells of the target: of two Pythons, the worse one holds
            prior = verdicts.get(cell.framework.name)
            if prior is None or _RANK[verdict.status] > _RANK[prior["status"]]:
                verdicts[cell.framework.name] = {"status": verdict.status, "reason": verdict.reason, "cell": cell.id}
    return (*overall(verdicts), evidence)


def overall(verdicts: dict[str, dict[str, str]]) -> tuple[str, str]:
    """The gate's status over its cells (failed > passed > not-run: one cell that installs and then falls over fails
    the target's gate, and a cell not tried does not hide a pass beside it) and a reason naming each cell."""
    statuses = {v["status"] for v in verdicts.values()}
    status = "failed" if "failed" in statuses else "passed" if "passed" in statuses else "not-run"
    first = [f"{name}: {v['reason'].removeprefix('not-run: ')}" for name, v in verdicts.items() if v["status"] == status]
    others = [f"{name} {v['status']}" for name, v in verdicts.items() if v["status"] != status]
    reason = "; ".join(first) + (f" (also: {', '.join(others)})" if others else "")
    return status, (f"not-run: {reason}" if status == "not-run" else reason)


def image_verdicts(cells: dict[str, dict[str, str]], images: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each planned image's user-install verdict (``images``: image → the framework its cells ship): a framework's
    image has its cell's verdict; the runtime image ("" framework) stands for the SDK every cell installs, proven when
    any cell installed and loaded it (a JAX plugin that cannot load fails JAX's cell, not the SDK's)."""
    out: dict[str, dict[str, str]] = {}
    for image, framework in sorted(images.items()):
        if framework:
            out[image] = cells.get(framework) or {"status": "not-run", "reason": f"not-run: no cell of {framework} lists wheels"}
            continue
        passed = [v for v in cells.values() if v["status"] == "passed"]
        if passed:
            out[image] = {"status": "passed", "reason": f"the SDK's wheels installed and loaded in {len(passed)} cell(s): "
                          + "; ".join(v["cell"] for v in passed)}
        else:
            status, reason = overall(cells) if cells else ("not-run", "not-run: no cell of the target lists wheels")
            out[image] = {"status": status, "reason": reason}
    return out
