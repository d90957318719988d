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


def render(diff: dict[str, Any]) -> list[str]:
    """The text form: one line per change, grouped by facet."""
    a, b = diff["a"], diff["b"]
    lines = [f"{a['input']} ({a['kind']} {a['name']} {a['version']}) → {b['input']} ({b['kind']} {b['name']} {b['version']})"]
    for key, (old, new) in diff["release"].items():
        lines.append(f"  release {key}: {old} → {new}")
    for facet in ("components", "frameworks"):
        part = diff.get(facet)
        if not part:
            continue
        for item in part["added"]:
            lines.append(f"  + {facet[:-1]} {item['name']} {_pin(item)}")
        for item in part["removed"]:
            lines.append(f"  - {facet[:-1]} {item['name']} {_pin(item)}")
        for item in part["changed"]:
            fields = "; ".join(f"{k} {v[0]} → {v[1]}" for k, v in item.items() if k != "name")
            lines.append(f"  ~ {facet[:-1]} {item['name']}: {fields}")
    for facet in ("families", "targets"):
        part = diff.get(facet)
        if part and (part["gained"] or part["lost"]):
            lines.append(f"  {facet}: " + ", ".join([*(f"+{x}" for x in part["gained"]), *(f"-{x}" for x in part["lost"])]))
    for channel, change in (diff.get("required_gates") or {}).items():
        lines.append(f"  required gates on {channel}: " + ", ".join([*(f"+{x}" for x in change["gained"]), *(f"-{x}" for x in change["lost"])]))
    cells = diff.get("cells")
    if cells:
        lines += [f"  + cell {c}" for c in cells["added"]] + [f"  - cell {c}" for c in cells["removed"]]
        for cell in cells["changed"]:
            if "framework_version" in cell:
                lines.append(f"  ~ cell {cell['cell']}: framework {cell['framework_version'][0]} → {cell['framework_version'][1]}")
            for w in cell.get("wheels", []):
                lines.append(f"  ~ cell {cell['cell']}: wheel {_file(w['from'])} → {_file(w['to'])}")
            for i in cell.get("images", []):
                lines.append(f"  ~ cell {cell['cell']}: image {i['image']} {i['from'] or '(none)'} → {i['to'] or '(none)'}")
            for g in cell.get("gates", []):
                lines.append(f"  ~ cell {cell['cell']}: gate {g['gate']} {g['from']} → {g['to']}")
    if diff["identical"]:
        lines.append("  no differences in what both record")
    lines += [f"  not compared: {line}" for line in diff["not_compared"]]
    return lines


def _pin(item: dict[str, str]) -> str:
    return " ".join(v for v in (item.get("version"), f"({item['pin']})" if item.get("pin") else None) if v)


def _file(side: dict[str, str] | None) -> str:
    return f"{side['file']} sha256:{side['sha256'][:12]}" if side else "(none)"
