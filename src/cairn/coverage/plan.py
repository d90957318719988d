"""Stage planner: a coverage action per unpacked library component, and one for the release.

``coverage:<component>`` audits the component's unpacked tree (every ELF with device code, and per-target
kernel data files) and reads the package's own ``X-Rocm-Gpu-Architecture`` label from the .deb;
``coverage:release`` joins them per family and target. A family whose libraries miss one of its targets is
built and shown, but marked partial with the missing library named (cairn.publish reads this record).
The runners that measure and join are in ``cairn.coverage.run``.
"""

from __future__ import annotations

from cairn.plan.context import StageContext, build_id, fetch_id
from cairn.plan.graph import Action

LAYOUT = 3  # 3: notes name files inside the tree, not in the store that held it
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
