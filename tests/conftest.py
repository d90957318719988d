"""Shared test helpers, and the one way a test says what it needs from the machine.

Tests use the real tools (hipcc, apt, dpkg-deb, git, Docker Engine, a registry, moto S3, pip). Every external
requirement goes through ``need`` — directly, or as ``need_tool`` / ``need_module`` / the ``requires(…)`` mark —
and nowhere else (``test_requirements.py`` fails on any ``importorskip``, ``skipif`` or bare ``pytest.skip``
in tests/). When a requirement is missing, a developer's run skips with the reason; under CI (``CI`` set to
1/true/yes/on) it is a failure, never a silent skip — ``.ci/run`` installs and starts everything the suite
needs, and fails when the run reports any skip at all.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The Debian 12 ROCm 5.2.3 release: built on the host toolchain in minutes, so most tests build slices of it;
# the default release (ROCm 7.2.4, default.toml) is built in the pinned build image by its own tests.
LEGACY = "rocm-5.2.3"
LEGACY_MANIFEST = ROOT / "manifests" / "releases" / f"{LEGACY}.toml"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # test helper modules (fatbin_writer, …)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


IN_CI = in_ci()


def need(condition: object, reason: str) -> None:
    """Skip locally, fail in CI, when a real tool, service or host property the test needs is absent.

    Callable from a test, a fixture or a module's top level (the whole module then skips, or errors in CI).
    """
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI must provide this: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def need_tool(name: str, package: str = "") -> str:
    found = shutil.which(name)
    need(found is not None, f"'{name}' not installed (apt-get install {package or name})")
    return str(found)


def need_module(name: str, install: str = "pip install -e '.[test]'") -> ModuleType:
    """The imported module, or the requirement reported like any other (instead of ``pytest.importorskip``)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        need(False, f"Python module {name} not importable ({install}): {exc}")
        raise  # unreachable: need() skipped or failed


def requires(condition: object, reason: str) -> pytest.MarkDecorator:
    """``need`` as a mark, for a whole module (``pytestmark = requires(…)``) or one test; checked at setup."""
    return pytest.mark.requires(bool(condition), reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires(condition, reason): an external requirement, checked by conftest.need")


def pytest_runtest_setup(item: pytest.Item) -> None:
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


@pytest.fixture(scope="session")
def toolchain_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``registry/cairn/toolchain@sha256:…``: the ROCm 7.2 release's build image, built and pushed by Cairn
    itself (``cairn build --only push:toolchain``) into the services' registry, once per session."""
    import json
    import subprocess

    from cairn.services.engine import engine_host, registry_address

    registry, _ = registry_address()
    need(bool(engine_host() and registry), "no Docker Engine and registry (start them: cairn services start)")
    need_tool("mmdebstrap")
    store = tmp_path_factory.mktemp("toolchain-store")
    manifest = ROOT / "manifests" / "releases" / "default.toml"
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", str(manifest), "--only", "push:toolchain",
                             "--store", str(store)], capture_output=True, text=True, cwd=ROOT, timeout=3000)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    actions = json.loads((store / "last-build.json").read_text())["actions"]
    pushed = json.loads((store / "trees" / actions["push:toolchain"]["output"] / "push.json").read_text())
    return f"{registry}/{pushed['reference']}"
