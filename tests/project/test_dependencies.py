"""What `pip install .` brings is what the engine imports: the front door (`nox -s build`) installs the project
with no extras, so a module the pipeline imports but the project does not declare is a traceback on a fresh
machine (a missing ``gguf`` once stopped the default build while planning)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support import ROOT

SRC = ROOT / "src" / "cairn"
# code that runs inside images or installed wheels, not in the pipeline's own interpreter
IN_IMAGE = (SRC / "containers" / "scripts", SRC / "wheels" / "runtime", SRC / "engines" / "llama" / "gate.py")


def imported_top_levels(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def pipeline_imports() -> dict[str, list[str]]:
    """Third-party top-level modules the pipeline imports, with the files that import each."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if any(path == part or part in path.parents for part in IN_IMAGE):
            continue
        for name in imported_top_levels(path):
            if name not in sys.stdlib_module_names and name not in ("cairn", "__future__"):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}


def test_every_module_the_pipeline_imports_is_a_declared_dependency() -> None:
    providers = packages_distributions()
    deps = declared()
    missing = []
    for module, files in sorted(pipeline_imports().items()):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists & deps:
            missing.append(f"{module} (from {', '.join(sorted(dists)) or 'no installed distribution'}; imported by {files[0]})")
    assert not missing, "not in [project].dependencies: " + "; ".join(missing)


def test_the_check_sees_the_imports_that_matter() -> None:
    found = pipeline_imports()
    assert {"gguf", "numpy", "botocore", "tuf", "docker", "rich"} <= found.keys()
    assert not any(re.match(r"llama_cpp", name) for name in found), "in-image code is left out"
