"""The one way a test says what it needs from the machine: ``need`` and its forms.

Tests use the real tools (hipcc, apt, dpkg-deb, git, Docker Engine, a registry, moto S3, pip). Every external
requirement goes through ``need`` — directly, or as ``need_tool`` / ``need_module`` / the ``requires(…)`` mark —
and nowhere else (``tests/harness/test_requirements.py`` fails on any ``importorskip``, ``skipif`` or bare
``pytest.skip`` in tests/). When a requirement is missing, a developer's run skips with the reason; under CI
(``CI`` set to 1/true/yes/on) it is a failure, never a silent skip — ``.ci/run`` installs and starts everything
the suite needs, and fails when the run reports any skip at all.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

import pytest


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
    """``need`` as a mark, for a whole module (``pytestmark = requires(…)``) or one test; checked at setup by
    the root conftest."""
    return pytest.mark.requires(bool(condition), reason)
