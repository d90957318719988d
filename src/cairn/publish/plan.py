"""Stage planner: ``bundle:release`` — the release bundle ``cairn publish`` signs and uploads.

Runs after the wheels, images and gates stages (the last stage in ``cairn.stages``). The action
depends on every ``index:<family>`` and ``package:*`` action and on every image, push and gate action of
the plan that this host can run. What cannot run here (no Docker Engine, no registry, no GPU) is not a
dependency: it is written into the action's inputs with its reason, and the bundle records it as a gate
that did *not run*, with that reason — so a build without containers still ends with a signed release
whose matrix says plainly what was not checked, and never claims a gate passed that did not run.

The runner that writes the bundle is ``cairn.publish.run.run_bundle``.

The output tree is a bundle in the format ``cairn.matrix.bundle.load_bundle`` reads::

    bundle.json                                   release, pins, artifacts (sha256), cells
    files/wheels/<family>/<wheel>                 every wheel of the family's index (hard links)
    files/dockerfiles/<target>/<image>/Dockerfile the rendered Dockerfile of every built image
    gates/<gate>--<image>@<target>.json           every gate result (passed, failed, not-run + reason)
"""

from __future__ import annotations

from cairn.errors import CairnError
from cairn.model.wheel_recipes import load_recipe
from cairn.plan.context import StageContext
from cairn.plan.graph import Action, closure_blocked

LAYOUT = 1
ACTION_ID = "bundle:release"
DEFAULT_REQUIRED = {"dev": ["static-coverage"]}
# Debian's ROCm 5.x runs on the amdgpu KFD of the distribution kernel; the manifest declares no range.
REQUIREMENTS = {"driver_name": "amdgpu",
                "driver": {"minimum": "", "below": "", "note": "in-kernel amdgpu KFD; no range declared by the release manifest"},
                "kernel": {"minimum": "", "below": "", "note": "no range declared by the release manifest"}}


def extend_plan(context: StageContext) -> None:
    """Add ``bundle:release`` over everything runnable that the earlier stages planned."""
    actions = context.actions
    release = context.manifest.release
    wanted = [a for a in actions.values() if a.kind in ("index", "image-build", "image-push", "gate", "user-install")
              or a.kind in ("package", "mirror") or _pinned_deb(a)]
    deps, missing = [], {}
    for action in wanted:
        reason = closure_blocked(actions, action.id)
        if reason:
            missing[action.id] = reason
        else:
            deps.append(action.id)
    families = {fam: list(context.registry.expand(fam)) for fam in context.families}
    products = {t: list(context.registry.targets[t].products) for ts in families.values() for t in ts
                if t in context.registry.targets}
    frameworks = _frameworks(context, deps)
    inputs = {
        "layout": LAYOUT,
        "release": {"name": release.name, "version": release.version, "channel": release.channel,
                    "source_date_epoch": release.source_date_epoch, "manifest_sha256": context.manifest.digest,
                    "base_os": release.base_os, "python": list(release.python),
                    "required_gates": {ch: list(g) for ch, g in sorted(context.manifest.gates.items())} or DEFAULT_REQUIRED},
        "families": families,
        "products": products,
        "frameworks": frameworks,
        # components, the debs the SDK wheels graft, and the reviewed symbol-version rewrites: the provenance's
        # resolvedDependencies name every input of the wheels' bytes
        "pins": {**{c.name: c.source.identity for c in context.manifest.components},
                 **{f"graft:{g.package}": g.source.identity for g in context.manifest.grafts},
                 **{f"symbol-version:{r.file}:{r.version}": f"{r.library}:{','.join(r.symbols)}@{r.version}->{r.to}"
                    for r in context.manifest.symbol_versions}},
        "not_built": dict(sorted(missing.items())),
        "planned_gates": sorted({a.id for a in wanted if a.kind in ("gate", "user-install")}),
        "planned_images": sorted({a.id for a in wanted if a.kind == "image-build"}),
        "image_gates": {a.id: list(a.inputs["recipe"].get("gates", [])) for a in sorted(wanted, key=lambda a: a.id)
                        if a.kind == "image-build"},
        "image_frameworks": _image_frameworks(context),
        "wheel_frameworks": _wheel_frameworks(context, deps),
        "blocked_frameworks": _blocked_frameworks(context, frameworks),
        "requirements": REQUIREMENTS,
    }
    actions[ACTION_ID] = Action(ACTION_ID, "bundle", inputs, tuple(sorted(deps)))


_OWN_CELLS = ("hip-extension", "engine")  # package parts whose project has cells of its own (cairn.wheels.plan)


def _pinned_deb(action: Action) -> bool:
    """A fetch of a .deb pinned by sha256: its bytes are published as the release's source mirror."""
    return action.kind == "fetch" and "sha256" in action.inputs.get("source", {}).get("deb", {})


def _frameworks(context: StageContext, deps: list[str]) -> dict[str, list[list[str]]]:
    """Per family, the (project, version) pairs its cells ship: every HIP extension and every engine packaged
    for the family (llama-cpp-python: a cell of its own per target, so its wheel, image, signature and gates are
    the engine's, not folded into another framework's cell), and every manifest framework whose wheel (built or
    mirrored) this host can produce."""
    actions = context.actions
    runnable = set(deps)
    out: dict[str, list[list[str]]] = {}
    for fam in context.families:
        found = {(a.inputs["project"], a.inputs.get("build_version", "")) for a in actions.values()
                 if a.kind == "package" and a.family == fam and a.id in runnable and a.inputs.get("part") in _OWN_CELLS}
        for framework in context.manifest.frameworks:
            produced = [a for a in actions.values() if a.id in runnable and a.component == framework.recipe
                        and a.family in ("", fam) and a.kind == "package"]
            mirrored = [a for a in actions.values() if a.id in runnable and a.kind == "mirror"
                        and a.inputs.get("recipe") == framework.recipe and fam in a.inputs.get("families", {})]
            if produced or mirrored:
                found.add((framework.name, framework.version))
        out[fam] = [list(f) for f in sorted(found)]
    return out


def _blocked_frameworks(context: StageContext, shipped: dict[str, list[list[str]]]) -> dict[str, dict[str, str]]:
    """Manifest frameworks no family ships because their wheels cannot be had at all (a mirror with no wheel
    for the release's Python): name → version and reason, so their cells say so instead of vanishing."""
    out: dict[str, dict[str, str]] = {}
    names = {name for cells in shipped.values() for name, _ in cells}
    for framework in context.manifest.frameworks:
        if framework.name in names:
            continue
        blocked = next((a.blocked for a in context.actions.values() if a.kind == "mirror" and a.blocked
                        and a.inputs.get("recipe") == framework.recipe), "")
        if blocked:
            out[framework.name] = {"version": framework.version, "reason": blocked}
    return dict(sorted(out.items()))


def _wheel_frameworks(context: StageContext, deps: list[str]) -> dict[str, str]:
    """Package/mirror action → the framework whose cells its wheels belong to (absent = every cell: the SDK)."""
    out: dict[str, str] = {}
    shared = _framework_files(context)
    for action in context.actions.values():
        if action.id not in deps or action.kind not in ("package", "mirror"):
            continue
        part = action.inputs.get("part")
        if action.kind == "mirror" and action.inputs.get("required_by"):
            # an engine's run-time requirement goes with the engine's cells; a file a framework mirrors too (numpy
            # for JAX, one action: cairn.wheels.plan) stays in every cell, so neither loses it
            if action.inputs.get("filename") not in shared:
                out[action.id] = action.inputs["required_by"]
            continue
        if action.kind == "package" and part in _OWN_CELLS:
            out[action.id] = action.inputs["project"]
        elif (action.kind == "package" and part == "framework") or action.kind == "mirror":
            recipe = action.inputs.get("recipe") or action.component
            out[action.id] = next((f.name for f in context.manifest.frameworks if f.recipe == recipe), recipe)
    return dict(sorted(out.items()))


def _framework_files(context: StageContext) -> set[str]:
    """The wheel files the manifest's mirrored frameworks pin (what their own recipes mirror)."""
    found: set[str] = set()
    for framework in context.manifest.frameworks:
        try:
            recipe = load_recipe(framework.recipe)
        except CairnError:
            continue  # the wheels stage refused it already, with its own line
        if recipe.kind == "mirror":
            found.update(item.filename for item in recipe.mirror_files(framework.version))
    return found


def _image_frameworks(context: StageContext) -> dict[str, str]:
    """Image recipe → the framework its cells ship ("" = the runtime image every cell of a target uses)."""
    out: dict[str, str] = {}
    for action in context.actions.values():
        if action.kind != "image-build":
            continue
        recipe = action.inputs["recipe"]
        name = recipe["name"]
        if recipe.get("kind") == "runtime":
            out[name] = ""
        elif recipe.get("component"):
            package = next((a for a in context.actions.values() if a.kind == "package" and a.component == recipe["component"]
                            and a.inputs.get("project")), None)
            out[name] = package.inputs["project"] if package else recipe["component"]
        else:
            out[name] = next((f.name for f in context.manifest.frameworks if f.recipe == name), name)
    return dict(sorted(out.items()))
