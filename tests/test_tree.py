"""The test tree's shape: test modules sit in tests/<stage>/ folders, share helpers only through tests/support
(and fixtures through conftest.py), and run the command line through the one ``support.cli.cairn``.

A test module importing another one made the suite's behaviour depend on import order and file placement; a copy
of ``cairn(...)`` per file drifted (timeouts, environments, whether a failure raised). These checks keep both
from coming back, and each is shown to catch what it looks for."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from support import TESTS

FLAT_ALLOWED = {"conftest.py", "test_tree.py"}


def is_test_module(name: str) -> bool:
    """``name`` (a dotted import) names a test module or a conftest, not a helper."""
    parts = name.split(".")
    return any(part.startswith("test_") or part == "conftest" for part in parts)


def offences(relative: str, source: str) -> list[str]:
    """What ``source`` (the file at ``relative`` under tests/) does that the tree forbids."""
    found = []
    for node in ast.walk(ast.parse(source, relative)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else [f"<relative {node.module}>"]
            if node.level:
                found.append(f"{relative}:{node.lineno}: relative import (test modules are not a package)")
        else:
            names = []
        for name in names:
            if is_test_module(name):
                found.append(f"{relative}:{node.lineno}: imports {name} (share it through tests/support or conftest)")
        if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "cairn"
                and not relative.startswith("support/")):
            found.append(f"{relative}:{node.lineno}: defines cairn() (use support.cli.cairn)")
    return found


def test_no_test_module_sits_flat_in_tests() -> None:
    flat = sorted(p.name for p in TESTS.glob("*.py") if p.name not in FLAT_ALLOWED)
    assert flat == [], f"move these into tests/<stage>/ (or tests/support): {flat}"


def test_no_test_module_imports_another_nor_defines_its_own_cairn() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS).as_posix()
        if relative.startswith("fixtures/"):
            continue
        found += offences(relative, path.read_text())
    assert found == []


def test_the_checks_catch_what_they_look_for() -> None:
    assert offences("publish/test_a.py", "from test_publish_s3 import env\n")
    assert offences("publish/test_a.py", "def f():\n    from conftest import need\n")
    assert offences("publish/test_a.py", "import tests.publish.test_publish_s3\n")
    assert offences("publish/test_a.py", "from .test_b import x\n")
    assert offences("cli/test_a.py", "def t():\n    def cairn(*args):\n        pass\n")
    assert offences("support/cli.py", "def cairn(*args):\n    pass\n") == []
    assert offences("publish/test_a.py", "from support.s3 import env\nfrom cairn.cli import main\n") == []


def test_a_test_that_starts_moto_without_the_s3_mark_fails_naming_itself(tmp_path: Path) -> None:
    """``-m "not s3"`` promises a run with no moto: an unmarked test that would start it fails instead (before
    moto is even imported), so a missing mark is found on the first run, not by a surprised CI job."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    shutil.copytree(TESTS / "support", tmp_path / "support", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "test_probe.py").write_text(
        "import pytest\nfrom support.servers import moto_s3\n\n"
        "def test_unmarked():\n    with moto_s3('b'):\n        pass\n\n"
        "@pytest.mark.s3\ndef test_marked_is_let_through():\n    pass\n")
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                          "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                         cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "test_probe.py::test_unmarked starts moto S3 but is not marked s3" in run.stdout, run.stdout
    assert "1 failed, 1 passed" in run.stdout, run.stdout
