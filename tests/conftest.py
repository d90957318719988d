"""Shared test helpers.

Tests use the real tools (hipcc, apt, dpkg-deb, git, Docker Engine, a registry, moto S3, pip). When one is
missing, a developer's run skips with the reason; under CI (``CI=true``) a missing service is a failure,
never a silent skip — ``.ci/run`` installs and starts everything the suite needs.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # test helper modules (fatbin_writer, …)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, reason: str) -> None:
    """Skip locally, fail in CI, when a real tool or service the test needs is absent."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


def need_tool(name: str, package: str = "") -> str:
    found = shutil.which(name)
    need(found is not None, f"'{name}' not installed (apt-get install {package or name})")
    return str(found)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """Downloads shared between test runs (real .debs and wheels are large)."""
    path = Path(os.environ.get("CAIRN_TEST_CACHE", Path.home() / ".cache" / "cairn-test"))
    path.mkdir(parents=True, exist_ok=True)
    return path
