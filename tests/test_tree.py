"""The test tree's shape: test modules sit in tests/<stage>/ folders, share helpers only through tests/support
(and fixtures through conftest.py), and run the command line through the one ``support.cli.cairn``.

A test module importing another one made the suite's behaviour depend on import order and file placement; a copy
of ``cairn(...)`` per file drifted (timeouts, environments, whether a failure raised). These checks keep both
from coming back, and each is shown to catch what it looks for."""

from __future__ import annotations

import ast

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
