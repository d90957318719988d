"""Measured timings live in ``bench/results/``, not in the code's prose.

A docstring that says "≈0.15 s" or "about 30 ms" was true on one machine on one day and goes stale without any
test noticing; the renovation review found six. Docstrings and comments say *why* something is fast or slow and
point to the bench that measures it. The one exception is the ``# lazy:`` comment, whose measured start-up cost
is the reason the import stays inside its function (``tests/project/test_imports.py`` checks its form).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from support import ROOT

SOURCE = ROOT / "src" / "cairn"
# a number with a unit of time, not part of a word or a longer number ("int8s", "sha256s", "1.5")
TIME_FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?(?:ms|s|seconds|minutes)\b")


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a module, ``# lazy:`` comments left out."""
    text = path.read_text()
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.append((first.lineno, first.value.value))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and not token.string.startswith("# lazy:"):
            found.append((token.start[0], token.string))
    return found


def timing_figures(path: Path, root: Path = ROOT) -> list[str]:
    return [f"{path.relative_to(root)}:{line}: {match.group(0)!r}"
            for line, text in prose(path) for match in TIME_FIGURE.finditer(text)
            if float(match.group(1)) != 0]  # "never the 0 s a cache hit took" states no measurement


def test_no_docstring_or_comment_states_a_measured_time() -> None:
    found = [figure for path in sorted(SOURCE.rglob("*.py")) for figure in timing_figures(path)]
    assert not found, "measured timings belong in bench/results/, not in the code's prose:\n" + "\n".join(found)


def test_the_check_finds_a_figure_in_a_docstring_and_in_a_comment(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text('"""Loads in about 30 ms."""\n\nX = 1  # ≈0.15 s on the test machine\n'
                      'Y = 2  # lazy: cryptography, 5 ms at start-up\nZ = "waits 5 s"\n')
    assert timing_figures(module, tmp_path) == ["probe.py:1: '30 ms'", "probe.py:3: '0.15 s'"]
