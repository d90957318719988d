"""Gate results of a build, and the two figures release engineers steer by.

*Gating pass rate* (per family): cells passed / cells gated, a cell being one of the family's images for one gfx
target it is built for, gated when every required gate of it ran, passed when every one passed. *Gating parity*: every family ran every required gate; a family that skipped one (not run,
blocked, or never planned) is named with the gate. Results come from ``<store>/last-build.json``:
a passed or not-run gate has ``gate.json`` in its tree, a failed one carries its reason in the build
record, a blocked or skipped one is not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.model.gate_result import GateResult
from cairn.plan.ids import parse_action_id, parse_gate_id
from cairn.store.report import read_actions

BLOCKED_PREFIX = "image blocked: "  # the reason of every gate of an image the linkage check blocked
# the "image" of a gate over a target's published wheels rather than one image (user-install, cairn.userinstall): it
# is no cell of its own; its verdict per image (evidence "images") becomes that image's row, and a result without
# that split counts for every image cell of the target
TARGET_WIDE = "wheels"


@dataclass(frozen=True)
class Row:
    gate: str
    image: str
    target: str
    family: str
    status: str
    reason: str
    digest: str = ""


def collect(store: Path) -> list[Row]:
    rows = []
    for action_id, info in sorted(read_actions(store).items()):
        if parse_action_id(action_id).kind != "gate":
            continue
        ref = parse_gate_id(action_id)
        gate, image, target = ref.gate, ref.image, ref.target
        family = ""
        if info.output:
            result = GateResult.read(store / "trees" / info.output / "gate.json")
            per_image = result.evidence.get("images") if image == TARGET_WIDE else None
            if isinstance(per_image, dict) and per_image:
                rows += [Row(gate, name, target, result.family, v["status"], v["reason"]) for name, v in sorted(per_image.items())]
            else:
                rows.append(Row(gate, image, target, result.family, result.status, result.reason, result.digest))
            continue
        status = "failed" if info.status == "failed" else "not-run"
        rows.append(Row(gate, image, target, family, status, info.detail or info.status))
    return rows


def figures(rows: list[Row], required: tuple[str, ...], families: tuple[str, ...], family_of: dict[str, str]) -> dict[str, Any]:
    """Per family, the pass rate over its *gated* cells and what was not gated; parity over the families.

    A cell is one image for one gfx target. It is gated when every required gate of it ran (passed or failed),
    and it passes when every one passed. The pass rate counts gated cells only — a cell whose gate did not run
    says nothing about quality — and is None when no cell was gated; the cells left ungated are counted and
    named in the parity gaps, which fail ``cairn gate`` just as a failed gate does."""
    per_family: dict[str, dict[str, Any]] = {}
    parity_gaps: list[str] = []
    # an image blocked when it ran (a soname its wheels need is not in the release) counts like one blocked at
    # planning: it is named in the table with its reason, but it is not an image of the family to gate — nor is
    # its cell made one by a verdict of another kind (the user-install row of its framework's pip command)
    blocked = {(r.image, r.target) for r in rows if r.reason.startswith(BLOCKED_PREFIX)}
    rows = [r for r in rows if (r.image, r.target) not in blocked]
    wide = [r for r in rows if r.image == TARGET_WIDE and r.gate in required]
    rows = [r for r in rows if r.image != TARGET_WIDE]
    for family in families:
        mine = [r for r in rows if (r.family or family_of.get(r.target)) == family]
        # an image is gated once per gfx target it is built for: a family of three targets has three runtimes
        cells = sorted({(r.image, r.target) for r in mine})
        status = {(r.image, r.target, r.gate): r.status for r in mine if r.gate in required}
        for r in wide:  # a target-wide verdict is every image cell's of that target
            status.update({(image, target, r.gate): r.status for image, target in cells if target == r.target})
        gated = [c for c in cells if all(status.get((*c, g)) in ("passed", "failed") for g in required)]
        passed = [c for c in gated if all(status[(*c, g)] == "passed" for g in required)]
        per_family[family] = {"passed": len(passed), "gated": len(gated), "not_gated": len(cells) - len(gated),
                              "pass_rate": round(len(passed) / len(gated), 4) if gated else None}
        for gate in required:
            ran = [c for c in cells if status.get((*c, gate)) in ("passed", "failed")]
            if len(ran) < len(cells) or not cells:
                parity_gaps.append(f"{family} skips {gate}")
    return {"required": list(required), "families": per_family, "parity": not parity_gaps, "parity_gaps": parity_gaps}
