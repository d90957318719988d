"""Gate results of a build, and the two figures release engineers steer by.

*Gating pass rate* (per family): required gates passed / required gates expected, over the family's
images, one per gfx target it is built for. *Gating parity*: every family ran every required gate; a family that skipped one (not run,
blocked, or never planned) is named with the gate. Results come from ``<store>/last-build.json``:
a passed or not-run gate has ``gate.json`` in its tree, a failed one carries its reason in the build
record, a blocked or skipped one is not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.model.gate_result import GateResult
from cairn.store.report import read_actions

BLOCKED_PREFIX = "image blocked: "  # the reason of every gate of an image the linkage check blocked


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
        if not action_id.startswith("gate:"):
            continue
        _, gate, rest = [*action_id.split(":", 2), "", ""][:3]
        image, _, target = rest.partition("@")
        family = ""
        if info.output:
            result = GateResult.read(store / "trees" / info.output / "gate.json")
            rows.append(Row(gate, image, target, result.family, result.status, result.reason, result.digest))
            continue
        status = "failed" if info.status == "failed" else "not-run"
        rows.append(Row(gate, image, target, family, status, info.detail or info.status))
    return rows


def figures(rows: list[Row], required: tuple[str, ...], families: tuple[str, ...], family_of: dict[str, str]) -> dict[str, Any]:
    per_family: dict[str, dict[str, Any]] = {}
    parity_gaps: list[str] = []
    # an image blocked when it ran (a soname its wheels need is not in the release) counts like one blocked at
    # planning: it is named in the table with its reason, but it is not an image of the family to gate
    rows = [r for r in rows if not r.reason.startswith(BLOCKED_PREFIX)]
    for family in families:
        mine = [r for r in rows if (r.family or family_of.get(r.target)) == family and r.gate in required]
        # an image is gated once per gfx target it is built for: a family of three targets has three runtimes
        images = sorted({(r.image, r.target) for r in rows if (r.family or family_of.get(r.target)) == family})
        expected = len(images) * len(required)
        passed = sum(1 for r in mine if r.status == "passed")
        per_family[family] = {"passed": passed, "expected": expected,
                              "pass_rate": round(passed / expected, 4) if expected else 0.0}
        for gate in required:
            ran = [r for r in mine if r.gate == gate and r.status in ("passed", "failed")]
            if len(ran) < len(images) or not images:
                parity_gaps.append(f"{family} skips {gate}")
    return {"required": list(required), "families": per_family, "parity": not parity_gaps, "parity_gaps": parity_gaps}
