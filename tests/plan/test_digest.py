"""The code digest that keys actions follows what Cairn's code does, not how its files are arranged.

A renovation moves functions between modules, reorders imports and rewrites docstrings: none of that may rebuild
a release. A change to what a function computes must.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cairn.digest import code_digest, file_sha256, files_digest, tree_digest

ONE = '''"""Module docstring."""
from __future__ import annotations

import os

LIMIT = 3


def twice(x):
    """Doubles."""
    return 2 * x  # a comment


def home():
    import pathlib
    return pathlib.Path(os.environ["HOME"])
'''


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_docstrings_comments_and_imports_do_not_count(tmp_path: Path) -> None:
    before = code_digest([write(tmp_path / "a", "m.py", ONE)])
    edited = (ONE.replace('"""Doubles."""', '"""Returns twice its argument."""').replace("# a comment", "")
              .replace("import os\n", "import os\nimport sys\n").replace("    import pathlib\n", "    from pathlib import Path as _P\n"))
    assert code_digest([write(tmp_path / "b", "m.py", edited)]) == before


def test_a_definition_moved_to_another_module_of_the_set_does_not_count(tmp_path: Path) -> None:
    before = code_digest([write(tmp_path / "a", "m.py", ONE), write(tmp_path / "a", "n.py", "")])
    kept, moved = ONE.split("def twice")
    after = code_digest([write(tmp_path / "b", "m.py", kept), write(tmp_path / "b", "helpers.py", "def twice" + moved)])
    assert after == before


def test_what_the_code_does_counts(tmp_path: Path) -> None:
    before = code_digest([write(tmp_path / "a", "m.py", ONE)])
    assert code_digest([write(tmp_path / "b", "m.py", ONE.replace("2 * x", "3 * x"))]) != before
    assert code_digest([write(tmp_path / "c", "m.py", ONE.replace("LIMIT = 3", "LIMIT = 4"))]) != before
    assert code_digest([write(tmp_path / "d", "m.py", ONE.replace("def home", "def house"))]) != before
    assert code_digest([write(tmp_path / "e", "m.py", ONE + "\nprint(LIMIT)\n")]) != before


def test_shipped_files_count_by_their_bytes(tmp_path: Path) -> None:
    script = write(tmp_path / "a", "s.py", ONE)
    before = files_digest([script])
    write(tmp_path / "a", "s.py", ONE.replace("# a comment", "# another"))
    assert files_digest([script]) != before


def test_file_and_tree_digests(tmp_path: Path) -> None:
    blob = write(tmp_path / "t", "f.bin", "x" * (3 << 20))
    assert file_sha256(blob) == hashlib.sha256(blob.read_bytes()).hexdigest()
    first = tree_digest(tmp_path / "t")
    blob.chmod(0o755)
    assert tree_digest(tmp_path / "t") != first  # the executable bit is part of a tree's identity


def test_every_module_a_stage_key_covers_exists() -> None:
    """A module moved without its entry in ``STAGE_CODE`` would silently drop out of every key that covered it."""
    from cairn.digest import SOURCE, STAGE_CODE, stage_code_digest

    for stage, patterns in STAGE_CODE.items():
        for pattern in patterns:
            assert sorted(SOURCE.glob(pattern)), f"{stage}: {pattern} matches no module"
        assert len(stage_code_digest(stage)) == 64


def test_a_function_signature_typed_anew_does_not_count_but_a_dataclass_field_does(tmp_path: Path) -> None:
    typed = "from typing import Any\n\n\ndef run(ctx: Any) -> None:\n    return ctx.out\n"
    before = code_digest([write(tmp_path / "a", "m.py", typed)])
    retyped = typed.replace("ctx: Any) -> None", "ctx: 'ActionContext') -> 'Path'")
    assert code_digest([write(tmp_path / "b", "m.py", retyped)]) == before
    record = "@dataclass\nclass R:\n    a: int = 0\n"
    assert code_digest([write(tmp_path / "c", "m.py", record)]) != code_digest([write(tmp_path / "d", "m.py", record.replace("a: int", "b: int"))])
