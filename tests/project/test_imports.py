"""A function-local import in src/cairn says why it is not at the top of its module (issue 39).

Imports go at the top of their module. One stays inside a function only where importing it lazily is
measured to matter for start-up, or where it cannot be at the top: an optional dependency that may be absent,
or a genuine import cycle. The reason is a ``# lazy:`` comment on the import's line or the line before; a run of
consecutive imports shares the comment above its first one. The comment is one of

    # lazy: <what it loads>, <N> ms at start-up (python -X importtime)     N ≥ LAZY_MS_MIN
    # lazy: an optional dependency ...
    # lazy: a genuine cycle ...

The in-image scripts (src/cairn/containers/scripts) are not cairn modules: they run inside the images with only
the standard library and the image's wheels, and their bytes are part of the images' action keys.
"""

from __future__ import annotations

import ast
import re

import pytest

from support import ROOT

SRC = ROOT / "src" / "cairn"
EXEMPT = (SRC / "containers" / "scripts",)
LAZY_MS_MIN = 2  # below this a lazy import does not matter for start-up on the test machine (noise)
MEASURED = re.compile(r"# lazy: (?P<what>\S[^,]*(?:, \S[^,]*)*), (?P<ms>\d+) ms at start-up \(python -X importtime\)$")
REASONED = re.compile(r"# lazy: (an optional dependency|a genuine cycle)\b\S*( \S+)+$")


def _function_local_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)]
    return sorted(set(found), key=lambda n: n.lineno)


def _comment_problem(comment: str) -> str | None:
    """None when ``comment`` (the text from ``#``) is a well-formed lazy reason, else what is wrong with it."""
    measured = MEASURED.match(comment)
    if measured:
        if int(measured["ms"]) < LAZY_MS_MIN:
            return f"{measured['ms']} ms is below {LAZY_MS_MIN} ms: move the import to the top of the module"
        return None
    if REASONED.match(comment):
        return None
    return (f"malformed {comment!r}: write '# lazy: <what it loads>, <N> ms at start-up (python -X importtime)', "
            "'# lazy: an optional dependency …' or '# lazy: a genuine cycle …'")


def problems(source: str, where: str) -> list[str]:
    """Each function-local import of ``source`` without a well-formed ``# lazy:`` reason, as ``where:line: why``."""
    lines = source.splitlines()
    imports = _function_local_imports(ast.parse(source))
    import_lines = {ln for node in imports for ln in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    found = []
    for node in imports:
        own = lines[node.lineno - 1]
        if "# lazy:" in own:
            comment = own[own.index("# lazy:"):].strip()
        else:
            above = node.lineno - 1  # 1-based number of the line above
            while above in import_lines:  # a run of imports shares the comment above its first one
                above -= 1
            previous = lines[above - 1].strip() if above >= 1 else ""
            if not previous.startswith("# lazy:"):
                found.append(f"{where}:{node.lineno}: function-local import {ast.unparse(node)!r} has no "
                             "'# lazy:' comment: move it to the top of the module, or say why it stays")
                continue
            comment = previous
        problem = _comment_problem(comment)
        if problem:
            found.append(f"{where}:{node.lineno}: {problem}")
    return found


def test_every_function_local_import_in_src_says_why_it_is_lazy() -> None:
    files = [p for p in sorted(SRC.rglob("*.py")) if not any(p.is_relative_to(e) for e in EXEMPT)]
    assert len(files) > 100
    found = [problem for path in files for problem in problems(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "\n".join(found)


GOOD_MEASURED = '''
def run():
    # lazy: boto3, botocore, 120 ms at start-up (python -X importtime)
    import boto3
'''
GOOD_RUN = '''
def run():
    # lazy: cairn.stages, cairn.gates, 400 ms at start-up (python -X importtime)
    from cairn.stages import PIPELINE
    from cairn.gates import run as gates_run
    return PIPELINE, gates_run
'''
GOOD_INLINE = '''
def check():
    import llama_cpp  # lazy: an optional dependency, absent where cairn runs
'''
GOOD_CYCLE = '''
def checks():
    # lazy: a genuine cycle, checks_host imports this module at its top
    from cairn.doctor.checks_host import HOST_CHECKS
'''
MISSING = '''
def run():
    x = 1
    import json
'''
MISSING_AFTER_CODE = '''
def run():
    # lazy: boto3, 120 ms at start-up (python -X importtime)
    import boto3
    client = boto3.client("s3")
    import json
'''
MALFORMED = '''
def run():
    # lazy: it is faster
    import boto3
'''
TOO_CHEAP = '''
class Reader:
    def read(self):
        # lazy: json, 1 ms at start-up (python -X importtime)
        import json
'''
NOT_LOCAL = '''
import json

def run():
    return json
'''


@pytest.mark.parametrize("source", [GOOD_MEASURED, GOOD_RUN, GOOD_INLINE, GOOD_CYCLE, NOT_LOCAL])
def test_a_reasoned_lazy_import_passes(source: str) -> None:
    assert problems(source, "m.py") == []


@pytest.mark.parametrize(("source", "line", "why"), [
    (MISSING, 4, "has no '# lazy:' comment"),
    (MISSING_AFTER_CODE, 6, "has no '# lazy:' comment"),
    (MALFORMED, 4, "malformed '# lazy: it is faster'"),
    (TOO_CHEAP, 5, "1 ms is below 2 ms"),
])
def test_an_unreasoned_or_malformed_lazy_import_fails(source: str, line: int, why: str) -> None:
    found = problems(source, "m.py")
    assert len(found) == 1
    assert found[0].startswith(f"m.py:{line}: ") and why in found[0]
