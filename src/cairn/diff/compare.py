"""Compare two ``ReleaseView``s facet by facet; a facet only one side carries is named as not compared.

The result is plain JSON (schema ``cairn.diff/v1``) so ``--json`` and the text rendering show the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cairn.diff.views import CellView, ReleaseView

SCHEMA = "cairn.diff/v1"

# facet -> what it is, for "not compared" lines
_FACETS = {
    "components": "component pins",
    "frameworks": "framework pins",
    "families": "families",
    "targets": "gfx targets",
    "required_gates": "required gates",
    "cells": "cells, wheels, images and gate results",
}


def compare(a: ReleaseView, b: ReleaseView) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "a": {"input": a.label, "kind": a.kind, "name": a.facts.get("name"), "version": a.facts.get("version")},
        "b": {"input": b.label, "kind": b.kind, "name": b.facts.get("name"), "version": b.facts.get("version")},
        "release": {k: [a.facts[k], b.facts[k]] for k in a.facts if k in b.facts and a.facts[k] != b.facts[k]},
        "not_compared": [],
    }
    for facet, what in _FACETS.items():
        left, right = getattr(a, facet), getattr(b, facet)
        if left is None or right is None:
            missing = [v.label for v in (a, b) if getattr(v, facet) is None]
            out["not_compared"].append(f"{what}: {' and '.join(missing)} {'does' if len(missing) == 1 else 'do'} not record them")
            continue
        out[facet] = _COMPARE[facet](left, right)
    out["identical"] = not out["release"] and not any(_nonempty(out[f]) for f in _FACETS if f in out)
    return out


def _nonempty(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_nonempty(v) for v in value.values())
    return bool(value)


def _named(left: dict[str, dict[str, str]], right: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Components or frameworks: added, removed, and each changed field of the ones in both."""
    changed = []
    for name in sorted(set(left) & set(right)):
        fields = {k: [left[name].get(k), right[name].get(k)] for k in sorted(set(left[name]) | set(right[name]))
                  if k in left[name] and k in right[name] and left[name][k] != right[name][k]}
        if fields:
            changed.append({"name": name, **fields})
    return {"added": [{"name": n, **right[n]} for n in sorted(set(right) - set(left))],
            "removed": [{"name": n, **left[n]} for n in sorted(set(left) - set(right))],
            "changed": changed}


def _sets(left: tuple[str, ...], right: tuple[str, ...]) -> dict[str, list[str]]:
    return {"gained": [x for x in right if x not in left], "lost": [x for x in left if x not in right]}


def _gates(left: dict[str, tuple[str, ...]], right: dict[str, tuple[str, ...]]) -> dict[str, dict[str, list[str]]]:
    out = {}
    for channel in sorted(set(left) | set(right)):
        change = _sets(left.get(channel, ()), right.get(channel, ()))
        if change["gained"] or change["lost"]:
            out[channel] = change
    return out


def _cells(left: dict[str, CellView], right: dict[str, CellView]) -> dict[str, Any]:
    changed = []
    for key in sorted(set(left) & set(right)):
        entry = _cell(left[key], right[key])
        if entry:
            changed.append({"cell": key, **entry})
    return {"added": sorted(set(right) - set(left)), "removed": sorted(set(left) - set(right)), "changed": changed}


def _cell(a: CellView, b: CellView) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.framework_version != b.framework_version:
        out["framework_version"] = [a.framework_version, b.framework_version]
    wheels = [{"wheel": w, "from": {"file": a.wheels[w][0], "sha256": a.wheels[w][1]} if w in a.wheels else None,
               "to": {"file": b.wheels[w][0], "sha256": b.wheels[w][1]} if w in b.wheels else None}
              for w in sorted(set(a.wheels) | set(b.wheels)) if a.wheels.get(w) != b.wheels.get(w)]
    images = [{"image": i, "from": a.images.get(i), "to": b.images.get(i)}
              for i in sorted(set(a.images) | set(b.images)) if a.images.get(i) != b.images.get(i)]
    gates = [{"gate": g, "from": a.gates.get(g, "not-run"), "to": b.gates.get(g, "not-run")}
             for g in sorted(set(a.gates) | set(b.gates)) if a.gates.get(g, "not-run") != b.gates.get(g, "not-run")]
    for name, items in (("wheels", wheels), ("images", images), ("gates", gates)):
        if items:
            out[name] = items
    return out


# each facet's comparison takes the two sides' values of that facet (their types differ by facet)
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {"components": _named, "frameworks": _named, "families": _sets,
                                                  "targets": _sets, "required_gates": _gates, "cells": _cells}
