"""No two modules of cairn import each other, through any chain, and no two packages do.

import-linter's layers contract (``nox -s lint``) keeps the floors in order but is blind to a circle between two
modules of one package; a circle there is what function-local imports were once written to hide. grimp (which
import-linter itself builds on) reads every import, function-local ones included."""

from __future__ import annotations

import grimp
import pytest

from cairn.plan.graph import strongly_connected


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The circles: strongly connected components of more than one node (the planner's own Tarjan)."""
    full = {node: set(targets) for node, targets in edges.items()}
    for target in {t for targets in edges.values() for t in targets}:
        full.setdefault(target, set())
    return sorted(sorted(c) for c in strongly_connected(full) if len(c) > 1)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("cairn")


def test_no_module_imports_itself_through_a_chain(graph: grimp.ImportGraph) -> None:
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def test_no_package_imports_itself_through_a_chain(graph: grimp.ImportGraph) -> None:
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if package(imported) != package(module):
                edges.setdefault(package(module), set()).add(package(imported))
    assert _cycles(edges) == []


def test_the_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
