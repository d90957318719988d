"""A release diff (``cairn.diff/v1``, what ``cairn diff --json`` and a published ``diff.json`` hold) as lines of
text. Beside the matrix, because the matrix names its release's diff and `cairn matrix` prints it; ``cairn diff``
prints its own comparisons with it too.
"""

from __future__ import annotations

from typing import Any


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
