"""Stage planner: a coverage action per unpacked library component, and one for the release.

``coverage:<component>`` audits the component's unpacked tree (every ELF with device code, and per-target
kernel data files) and reads the package's own ``X-Rocm-Gpu-Architecture`` label from the .deb;
``coverage:release`` joins them per family and target. A family whose libraries miss one of its targets is
built and shown, but marked partial with the missing library named (cairn.publish reads this record).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn.coverage.model import ComponentCoverage, release_coverage
from cairn.coverage.run import measure_component
from cairn.model.targets import load_registry
from cairn.plan.context import StageContext, build_id, fetch_id
from cairn.plan.graph import Action

LAYOUT = 2
RELEASE_ID = "coverage:release"


def extend_plan(context: StageContext) -> None:
    actions = context.actions
    ids = []
    for comp in context.manifest.components:
        if comp.build.kind != "deb-unpack" or comp.source.kind != "deb":
            continue
        action_id = f"coverage:{comp.name}"
        actions[action_id] = Action(
            id=action_id, kind="coverage", deps=(fetch_id(comp.source), build_id(comp)), component=comp.name,
            inputs={"layout": LAYOUT, "component": comp.name, "package": comp.source.get("package")})
        ids.append(action_id)
    families = {fam: list(context.registry.expand(fam)) for fam in context.families}
    actions[RELEASE_ID] = Action(id=RELEASE_ID, kind="coverage-release", deps=tuple(ids),
                                 inputs={"layout": LAYOUT, "families": families})


def run_component(ctx: Any) -> None:
    fetched, built = (ctx.deps[d] for d in ctx.action.deps)
    debs = sorted(Path(fetched).glob("*.deb"))
    cov = measure_component(ctx.action.inputs["component"], ctx.action.inputs["package"], Path(built),
                            debs[0] if debs else None, ctx.log)
    (ctx.out / "coverage.json").write_text(json.dumps(cov.to_json(), indent=2, sort_keys=True) + "\n")


def run_release(ctx: Any) -> None:
    comps = [ComponentCoverage.from_json(json.loads((Path(ctx.deps[d]) / "coverage.json").read_text()))
             for d in ctx.action.deps]
    families = {f: tuple(t) for f, t in ctx.action.inputs["families"].items()}
    result = release_coverage(comps, families, load_registry())
    result["components"] = {c.component: c.to_json() for c in comps if c.has_device_code}
    (ctx.out / "coverage.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


# the action kinds this stage adds, and what runs each (declared in cairn.stages)
RUNNERS = {
    "coverage": run_component,
    "coverage-release": run_release,
}
