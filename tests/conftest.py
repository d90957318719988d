"""The suite's hooks and the fixtures shared across its folders.

Tests use the real tools (hipcc, apt, dpkg-deb, git, Docker Engine, a registry, moto S3, pip). Every external
requirement goes through ``need`` (tests/support/requirements.py) — directly, or as ``need_tool`` /
``need_module`` / the ``requires(…)`` mark checked here — and nowhere else. When a requirement is missing, a
developer's run skips with the reason; under CI (``CI`` set to 1/true/yes/on) it is a failure, never a silent skip.

Helpers are imported from the ``support`` package (tests/ is on ``pythonpath``), never from this file nor from a
test module.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import servers
from support.paths import DEFAULT_SLICE_FAMILY, ROOT, SLICE_RECORD
from support.requirements import need, need_tool

# the S3 tests' ``s3`` (the module's BUCKET on a moto server) and ``keys`` fixtures
pytest_plugins = ("support.s3",)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires(condition, reason): an external requirement, checked by conftest.need")
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM (``timeout``, a CI runner cancelling the job) ends the run as Ctrl-C does, so session fixtures are
    torn down: without it the private dockerd and registry outlived pytest, with their GBs under /tmp."""
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: the test run was told to stop")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    servers.running_test(item)  # before its fixtures: moto_s3 refuses a test without the s3 mark
    for mark in item.iter_markers("requires"):
        need(*mark.args)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """Downloads shared between test runs (real .debs and wheels are large)."""
    path = Path(os.environ.get("CAIRN_TEST_CACHE", Path.home() / ".cache" / "cairn-test"))
    path.mkdir(parents=True, exist_ok=True)
    return path


SERVICE_TOOLS = (("dockerd", "docker.io"), ("docker-registry", ""), ("mmdebstrap", ""), ("skopeo", ""), ("hipcc", ""))


@pytest.fixture(scope="session")
def services() -> Iterator[object]:
    """The Docker Engine and registry of ``cairn services`` (the running ones, or a private pair for the session)."""
    import tempfile

    from cairn.services import current, start, stop

    for tool, package in SERVICE_TOOLS:
        need_tool(tool, package)
    state = current()
    if state is not None:
        yield state
        return
    own = Path(tempfile.mkdtemp(prefix="cairn-svc-", dir="/tmp"))
    previous = os.environ.get("CAIRN_SERVICES_DIR")
    os.environ["CAIRN_SERVICES_DIR"] = str(own)
    state, _ = start(own, die_with_parent=True)  # a SIGKILLed or OOM-killed session takes them along
    try:
        yield state
    finally:
        stop(own)
        shutil.rmtree(own, ignore_errors=True)  # the engine's images and layers: GBs a CI disk needs back
        if previous is None:
            os.environ.pop("CAIRN_SERVICES_DIR", None)
        else:
            os.environ["CAIRN_SERVICES_DIR"] = previous


@pytest.fixture(scope="session")
def default_slice(services: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the default release (ROCm 7.2.4) built for one family, Strix Halo, as `nox -s build`
    builds every family: the debs, the build image, compiles in it, wheels, images, gates and the bundle. Built
    once per session; the toolchain, split and default-release tests read it, and build more into copies.
    ``CAIRN_SLICE_FROM`` may name a store to start from (hard links), for local runs; CI builds from nothing."""
    import subprocess

    store = tmp_path_factory.mktemp("default-slice") / ".cairn"
    seed = os.environ.get("CAIRN_SLICE_FROM")
    if seed:  # a store that already holds (part of) the slice, hard-linked in: the build below still runs and
        # reuses only what its keys match, so a stale seed costs time, never correctness
        subprocess.run(["cp", "-al", seed, str(store)], check=True)
        lock = store / "lock"
        if lock.exists():  # a hard-linked lock file would be the seed's lock: this store gets its own
            lock.unlink()
            lock.touch()
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", "--family", DEFAULT_SLICE_FAMILY,
                             "--store", str(store), "--jobs", "2"], capture_output=True, text=True, cwd=ROOT,
                            timeout=3600, preexec_fn=lambda: os.umask(0o022))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # the slice's own record: later tests build more into this store, and each build rewrites last-build.json
    shutil.copyfile(store / "last-build.json", store / SLICE_RECORD)
    return store



@pytest.fixture(scope="session")
def toolchain_image(default_slice: Path) -> str:
    """``registry/cairn/toolchain@sha256:…``: the default release's build image, as Cairn built and pushed it
    (``push:toolchain`` of the default slice) into the services' registry."""
    import json

    from cairn.services.engine import registry_address

    registry, _ = registry_address()
    actions = json.loads((default_slice / SLICE_RECORD).read_text())["actions"]
    pushed = json.loads((default_slice / "trees" / actions["push:toolchain"]["output"] / "push.json").read_text())
    return f"{registry}/{pushed['reference']}"
