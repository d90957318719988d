"""Why a framework image cannot be built by this release — derived from what the plan puts in the index.

A framework image installs wheels from the family's index. For each wheel its recipe needs, the plan
either publishes it (a ``package:``/``mirror:`` action the ``index:<family>`` action depends on), plans it
but cannot build it (that action's own blocked reason), or never plans it — then the wheels recipe that
would make it says why (a source build needing a newer ROCm toolchain, a mirror that lists only some of
the files). The reason names the exact missing wheel; nothing generic.
"""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name
from packaging.version import Version

from cairn.errors import CairnError
from cairn.model.image_recipes import ImageRecipe
from cairn.model.wheel_recipes import known_recipes, load_recipe
from cairn.plan.context import StageContext
from cairn.plan.graph import Action
from cairn.plan.ids import parse_action_id


def published(context: StageContext, family: str) -> dict[str, Action]:
    """canonical project name → the action that puts its wheel in ``index:<family>``."""
    index = context.actions.get(f"index:{family}")
    found: dict[str, Action] = {}
    for dep in index.deps if index else ():
        action = context.actions.get(dep)
        if action is None:
            continue
        ref = parse_action_id(dep)  # package:<project>[@family]; per-family SDK parts add it
        named = ref.name
        for project in (action.inputs.get("project") or "", named if ref.kind == "package" else "",
                        f"{named}-{family}" if ref.where else ""):
            if project:
                found[canonicalize_name(project)] = action
    return found


def _wheels_recipes() -> dict[str, object]:
    """canonical project → wheels recipe (cairn.model.wheel_recipes), for the wheels no action publishes."""
    found: dict[str, object] = {}
    for name in known_recipes():
        try:
            recipe = load_recipe(name)
        except CairnError:
            continue
        found[canonicalize_name(recipe.project)] = recipe
        for files in dict(recipe.files).values():
            for item in files:
                found.setdefault(canonicalize_name(item.name), recipe)
    return found


def _why_missing(context: StageContext, project: str, family: str, framework: str) -> str:
    """The end of "needs <project>, which …": why the index of ``family`` has no wheel of ``project``."""
    rocm = context.manifest.release.version
    planned = context.actions.get(f"package:{project}@{family}") or context.actions.get(f"package:{project}")
    if planned is not None and planned.blocked:
        return f"{project} for ROCm {rocm}, which is planned but cannot be built here ({planned.blocked})"
    recipes = _wheels_recipes()
    recipe = recipes.get(canonicalize_name(project))
    own = next((r for r in recipes.values() if r.name == framework and r.kind == "mirror"), None)  # type: ignore[attr-defined]
    if recipe is None and own is not None:
        recipe = own  # the framework's own mirror recipe lists what it mirrors: say what it leaves out
    if recipe is None:
        return f"{project}, which no wheels recipe builds or mirrors"
    kind, build, name = recipe.kind, recipe.build, recipe.name  # type: ignore[attr-defined]
    if kind == "source" and build.min_rocm and Version(rocm).major < build.min_rocm:
        return (f"{project} built for ROCm, which this release cannot build: the {name} source build needs a "
                f"ROCm ≥ {build.min_rocm} toolchain (this release ships ROCm {rocm})")
    if kind == "mirror":
        mirrored = sorted({f"{item.name} {item.version}" for files in dict(recipe.files).values() for item in files})  # type: ignore[attr-defined]
        return f"{project}, which is not mirrored into the index (the {name} wheels recipe mirrors only {', '.join(mirrored)})"
    return f"{project}, whose recipe {name} is not in this release's manifest [frameworks]"


_ROCM_MAJOR = re.compile(r"rocm(\d+)")


def _other_rocm(project: str, rocm: str) -> str:
    """A clause when a published wheel's name says it is built for another ROCm major (jax-rocm7-plugin)."""
    match = _ROCM_MAJOR.search(canonicalize_name(project).replace("-", ""))
    if match and int(match.group(1)) != Version(rocm).major:
        return f"{project} is built for ROCm {match.group(1)} (this release ships ROCm {rocm})"
    return ""


def blocked_reason(context: StageContext, recipe: ImageRecipe, family: str, version: str) -> str:
    """"" when every wheel ``recipe`` needs is published in ``index:<family>``, else the exact reason."""
    rocm = context.manifest.release.version
    if recipe.source_git:
        missing = [c for c in recipe.needs_components if not any(x.name == c for x in context.manifest.components)]
        if missing:
            return f"{recipe.name} {version} needs {', '.join(missing)} in the release's components (the manifest has none)"
        return f"{recipe.name} needs a pinned commit of {recipe.source_git} and git access to {recipe.source_git.split('/')[2]}"
    index = f"index:{family}"
    if index not in context.actions:
        return (f"{recipe.name} {version} installs {', '.join(recipe.wheels)} from the release's wheel index and this "
                f"plan has no {index} (plan the wheels stage before the images stage)")
    have = published(context, family)
    wheels = list(recipe.wheels_for(family))
    present = [w for w in wheels if (a := have.get(canonicalize_name(w))) is not None and not a.blocked]
    missing = [_why_missing(context, w, family, recipe.name) for w in wheels if w not in present]
    wrong = [c for c in (_other_rocm(w, rocm) for w in present) if c]
    if not missing and not wrong:
        return ""
    reason = f"{recipe.name} {version}: " + (f"{', '.join(present)} is in {index}, but " if present else "")
    if missing:
        reason += ("its runtime needs " if present else "needs ") + "; and ".join(missing)
    if wrong:
        reason += ("; also " if missing else "") + "; ".join(wrong)
    return reason
