"""Actions and the action graph: pure data, no I/O.

An action's identity for caching is its *key*: the sha256 of its canonical inputs (pins, recipe and
build arguments, tool versions) and of the output digests of the actions it depends on. Keys never hold
absolute paths, hostnames, users or clock times, so two machines computing the same plan agree on every
key and can share one action cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.model.manifest import canonical_json


@dataclass(frozen=True)
class Action:
    """One step of the build: ``id`` is human-readable (``build:rocsparse``), ``inputs`` are canonical."""

    id: str
    kind: str  # fetch | build | assemble | …
    inputs: Mapping[str, Any]
    deps: tuple[str, ...] = ()
    component: str = ""
    family: str = ""
    blocked: str = ""  # why this action cannot run on this host, in words a person can act on

    def key(self, dep_outputs: Mapping[str, str]) -> str:
        """The cache key, given the output digest of every dependency."""
        missing = [d for d in self.deps if d not in dep_outputs]
        if missing:
            raise ValueError(f"{self.id}: outputs of {missing} are not known yet")
        payload = {"kind": self.kind, "inputs": self.inputs, "deps": {d: dep_outputs[d] for d in sorted(self.deps)}}
        return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


@dataclass(frozen=True)
class Plan:
    """Actions in dependency order, plus what they were planned from."""

    manifest: str
    manifest_sha256: str
    actions: tuple[Action, ...]
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        ids = [a.id for a in self.actions]
        if len(ids) != len(set(ids)):
            raise ValueError("duplicate action ids in plan")

    def by_id(self) -> dict[str, Action]:
        return {a.id: a for a in self.actions}

    def dependents(self, action_id: str) -> set[str]:
        """Every action that transitively depends on ``action_id``."""
        out: set[str] = set()
        frontier = {action_id}
        while frontier:
            frontier = {a.id for a in self.actions if set(a.deps) & frontier} - out
            out |= frontier
        return out


def toposort(actions: Iterable[Action]) -> tuple[Action, ...]:
    """Dependencies first, ties in the given order; a cycle is reported with its path.

    >>> a, b = Action("a", "x", {}, ("b",)), Action("b", "x", {})
    >>> [x.id for x in toposort([a, b])]
    ['b', 'a']
    """
    pending = {a.id: a for a in actions}
    order: list[Action] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(action: Action) -> None:
        if action.id in done:
            return
        if action.id in visiting:
            cycle = [*visiting[visiting.index(action.id):], action.id]
            raise ValueError(f"action cycle: {' → '.join(cycle)}")
        visiting.append(action.id)
        for dep in action.deps:
            if dep not in pending:
                raise ValueError(f"{action.id} depends on unknown action {dep}")
            visit(pending[dep])
        visiting.pop()
        done.add(action.id)
        order.append(action)

    for action in list(pending.values()):
        visit(action)
    return tuple(order)


def closure_blocked(actions: dict[str, Action], start: str) -> str:
    """The first blocked reason among ``start`` and what it depends on ("" when all of it can run here): a
    stage asks it before planning work whose inputs could never be built on this host."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        current = stack.pop()
        if current in seen or current not in actions:
            continue
        seen.add(current)
        if actions[current].blocked:
            return actions[current].blocked
        stack.extend(actions[current].deps)
    return ""


def strongly_connected(edges: Mapping[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of a directed graph whose every node is a key of ``edges`` (Tarjan's
    algorithm, iterative: a graph can be thousands of nodes, and no recursion limit applies). The shard planner
    merges the shards of a component; the import-cycle test finds circles with it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.add(top)
                        if top == node:
                            break
                    out.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out
