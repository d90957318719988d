"""Every digest Cairn computes over files: a file's sha256, a tree's digest, and the digest of its own code.

One home, below every stage, so that a file is hashed one way everywhere and the stages that key actions on
"the code that decides this output" agree on what that means.

**Tree digest.** The sha256 of a canonical listing: for each entry, sorted by path, its type, its executable
bit, and the sha256 of its content (or the symlink's target). Owners, times and the other mode bits are not
part of it — outputs are normalized so those never vary.

**Code digest.** An action's key carries the digest of the Cairn code that decides its output, so a cached
output is reused only while that code is unchanged. It is taken over the code's *meaning*, not its bytes:
each module is parsed, its imports, docstrings, comments and function signatures' type annotations dropped, and
every top-level definition (function,
class, constant) is hashed under its own name, whichever module holds it. So a docstring fixed, an import
reordered, or a function moved to another module of the same set leaves every key — and every cached output
— as it was, while any change to what a function does changes it. Files that are *shipped* (scripts copied
into images, runtime sources in wheels) are hashed by their bytes instead (``files_digest``): their text is
the output.

Which modules each stage's key covers is declared once, here (``STAGE_CODE``), as data: a stage asks for
``stage_code_digest(name)`` and never lists files itself, so moving code between modules edits this table and
no stage's code — nor any key.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path

CHUNK = 1 << 20
SOURCE = Path(__file__).parent

# stage -> the modules (globs below src/cairn) whose definitions decide that stage's outputs
STAGE_CODE: dict[str, tuple[str, ...]] = {
    "wheels": ("wheels/*.py", "formats/elf.py", "model/wheel_recipes.py", "model/wheel_versions.py"),
    # what decides a verdict: not the planner (what it decides is the action's inputs, in the key anyway), nor
    # the report, the signing of verdicts or the command
    "gates": ("gates/run.py", "gates/static.py", "gates/container.py", "gates/llama.py", "gates/gpu_host.py", "audit/imagefs.py",
              "model/gate_result.py"),
    "linkage": ("containers/linkage.py", "gates/static.py", "audit/imagefs.py", "audit/archives.py", "audit/layers.py"),
    "layer-scan": ("audit/archives.py", "audit/layers.py", "audit/binary.py", "audit/bundle.py", "audit/model.py", "audit/sources.py"),
    "tiny-model": ("engines/llama/*.py",),
    # the user-install verdict: the gate and its probe, the commands the matrix prints, and the code that makes the
    # bundle and the published index it installs from
    "user-install": ("userinstall/gate.py", "userinstall/probe.py", "userinstall/run.py", "matrix/commands.py",
                     "matrix/model.py", "matrix/build.py", "publish/run.py", "publish/indexes.py", "publish/pages.py",
                     "model/gate_result.py"),
    "host-rootfs": ("userinstall/hosts.py", "containers/base.py"),
}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB pieces (a multi-GB library never sits in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_entries(root: Path, *, digests: bool = True) -> list[tuple[str, str, str]]:
    """(relative path, kind, digest) for every file, symlink and directory below ``root``, sorted. Without
    ``digests`` a file's digest is "" (an archive reads every file anyway: reading it twice doubled the work)."""
    entries: list[tuple[str, str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                entries.append((rel, "link", os.readlink(path)))
            elif path.is_dir():
                entries.append((rel, "dir", ""))
            else:
                kind = "exec" if os.stat(path).st_mode & 0o111 else "file"
                entries.append((rel, kind, file_sha256(path) if digests else ""))
    entries.sort()
    return entries


def tree_digest(root: Path) -> str:
    listing = "\n".join("\0".join(entry) for entry in tree_entries(root))
    return hashlib.sha256(listing.encode()).hexdigest()


def files_digest(paths: Iterable[Path], root: Path | None = None) -> str:
    """sha256 over files whose bytes are the output (shipped scripts, templates, data), sorted by path: each
    file's name — its path below ``root`` when given, so a file moved between folders counts — and content."""
    h = hashlib.sha256()
    for path in sorted(paths):
        name = path.relative_to(root).as_posix() if root else path.name
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class _Meaning(ast.NodeTransformer):
    """Strips what does not change behaviour: imports (anywhere), docstrings (of modules, classes, functions) and
    the type annotations of functions' arguments and results (no Cairn code reads them at run time; a class's
    annotated fields stay, since a dataclass is made of them)."""

    def visit_Import(self, node: ast.Import) -> None:
        return None

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def _unannotated(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        node.returns = None
        return self.generic_visit(node)

    visit_FunctionDef = _unannotated
    visit_AsyncFunctionDef = _unannotated

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return None

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = body[1:]  # type: ignore[attr-defined]
        return node


def _name_of(statement: ast.stmt) -> str:
    """The name a top-level statement defines ("" for one that defines none, such as a bare expression)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name
    if isinstance(statement, ast.Assign):
        return ",".join(ast.unparse(target) for target in statement.targets)
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return ast.unparse(statement.target)
    return ""


def module_definitions(path: Path) -> tuple[tuple[str, str], ...]:
    """(name, normalized form) of every top-level statement of a Python module, imports and docstrings left out."""
    tree = _Meaning().visit(ast.parse(path.read_text(), filename=str(path)))
    return tuple((_name_of(statement), ast.dump(statement, include_attributes=False)) for statement in tree.body)


def code_digest(modules: Iterable[Path]) -> str:
    """sha256 over what ``modules`` define, by name, whichever of them defines it (see the module docstring)."""
    definitions = sorted({item for path in modules for item in module_definitions(Path(path))})
    h = hashlib.sha256()
    for name, form in definitions:
        h.update(name.encode() + b"\0" + form.encode() + b"\0")
    return h.hexdigest()


@cache
def stage_code_digest(stage: str) -> str:
    """The code digest of ``stage``'s modules (``STAGE_CODE``); read once per process, as hundreds of actions ask."""
    return code_digest(path for pattern in STAGE_CODE[stage] for path in sorted(SOURCE.glob(pattern)))
