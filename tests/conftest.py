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


# The default slice takes most of a CI run's wall time (its llama.cpp compile alone is over 20 minutes on two
# cores), and much of the rest of the suite waits on Docker, mmdebstrap and pip rather than the CPU. So the
# modules that read the slice run last, and the slice is built in the background from the first test on: the
# two overlap instead of adding up. Only when the collected tests include a reader of the slice: a test that asks
# for the fixture, or one marked ``default_slice`` that asks for it by name (``request.getfixturevalue``).
SLICE_FIXTURE = "default_slice"
_SLICE_WANTED = pytest.StashKey[bool]()
_SLICE_BUILD = pytest.StashKey["SliceBuild"]()


class SliceBuild:
    """The slice's ``cairn build``, running: the store it builds into and where its output goes."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        import subprocess

        self.store = tmp_path_factory.mktemp("default-slice") / ".cairn"
        seed = os.environ.get("CAIRN_SLICE_FROM")
        if seed:  # a store that already holds (part of) the slice, hard-linked in: the build below still runs and
            # reuses only what its keys match, so a stale seed costs time, never correctness
            subprocess.run(["cp", "-al", seed, str(self.store)], check=True)
            lock = self.store / "lock"
            if lock.exists():  # a hard-linked lock file would be the seed's lock: this store gets its own
                lock.unlink()
                lock.touch()
        self.output = self.store.parent / "build.out"
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cairn.cli", "build", "--family", DEFAULT_SLICE_FAMILY, "--store", str(self.store),
                 "--jobs", "2"], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=lambda: os.umask(0o022))

    def finish(self, timeout: float = 3600) -> Path:
        """Wait for the build; the store, once it built the whole slice (or the build's last lines as the failure)."""
        import subprocess

        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        assert status == 0, self.output.read_text(errors="replace")[-6000:]
        # the slice's own record: later tests build more into this store, and each build rewrites last-build.json
        # (unlinked first: a seed's record is stale, and a hard-linked one written in place would change the seed)
        (self.store / SLICE_RECORD).unlink(missing_ok=True)
        shutil.copyfile(self.store / "last-build.json", self.store / SLICE_RECORD)
        return self.store

    def stop(self) -> None:
        """A session that ends before a test read the slice (``-x``, Ctrl-C) does not leave the build running."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # as Ctrl-C: the build stops its containers and releases its lock
            try:
                self.process.wait(timeout=120)
            except Exception:
                self.process.kill()
                self.process.wait()


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: only the tests that will run count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    readers = {item.nodeid.split("::")[0] for item in items
               if SLICE_FIXTURE in getattr(item, "fixturenames", ()) or item.get_closest_marker(SLICE_FIXTURE)}
    items.sort(key=lambda item: item.nodeid.split("::")[0] in readers)  # stable: whole modules move, in order
    config.stash[_SLICE_WANTED] = bool(readers)


@pytest.fixture(scope="session", autouse=True)
def _slice_in_background(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if not request.config.stash.get(_SLICE_WANTED, False):
        yield
        return
    try:
        request.getfixturevalue("services")
    except (pytest.skip.Exception, pytest.fail.Exception):
        yield  # no services here: the slice's readers meet the same failure (or skip) when they ask for it
        return
    build = request.config.stash[_SLICE_BUILD] = SliceBuild(tmp_path_factory)
    try:
        yield
    finally:
        build.stop()


@pytest.fixture(scope="session")
def default_slice(request: pytest.FixtureRequest, services: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the default release (ROCm 7.2.4) built for one family, Strix Halo, as `nox -s build`
    builds every family: the debs, the build image, compiles in it, wheels, images, gates and the bundle. Built
    once per session, in the background from the session's first test on (see SliceBuild); the toolchain, split
    and default-release tests read it, and build more into copies. ``CAIRN_SLICE_FROM`` may name a store to
    start from (hard links), for local runs; CI builds from nothing."""
    build = request.config.stash.get(_SLICE_BUILD, None) or SliceBuild(tmp_path_factory)
    return build.finish()


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
