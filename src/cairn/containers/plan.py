"""Stage planner: base image, then per gfx target a runtime and a smoke image, each built then pushed.

Actions (ids): ``image:base`` → ``push:base``; for every target T of every family F:
``image:runtime@T`` (base + the rocm-sdk-core wheel of ``index:F``) → ``push:runtime@T`` →
``image:smoke@T`` (+ the cairn-smoke wheel of ``index:F``) → ``push:smoke@T``. Wheels are installed by
pip from the family index, pinned by sha256, so an image holds exactly what the index publishes.
Framework images the manifest asks for (``[frameworks]``) are planned the same way and blocked with the
exact missing wheel when the index cannot provide it (cairn.containers.frameworks). Inputs hold
everything that shapes an image (recipe, template and script digests, labels, tags, epoch); pushes are
keyed by the registry's identity, so a new registry gets the images again while the images stay cached.
The runners that build and push are in ``cairn.containers.run``.
"""

from __future__ import annotations

from pathlib import Path

from cairn.containers.frameworks import blocked_reason as framework_blocked
from cairn.containers.linkage import plan_linkage
from cairn.containers.render import TEMPLATE_SUFFIX, dockerfiles_dir
from cairn.digest import files_digest
from cairn.formats.oci import LAYOUT_VERSION, ZLIB_VERSION, rfc3339
from cairn.model.image_recipes import BaseRecipe, ImageRecipe, containers_dir, load_base, load_recipes
from cairn.model.manifest import Component
from cairn.plan.context import StageContext
from cairn.plan.graph import Action
from cairn.services.engine import START_HINT

SCRIPTS = {"opt/cairn/bin/cairn-check": "cairn_check", "opt/cairn/bin/cairn-smoke": "cairn_smoke",
           "opt/cairn/bin/cairn-jax": "cairn_jax", "opt/cairn/bin/cairn-llama": "cairn_llama"}
FRAMEWORK_SCRIPTS = {"jax": ["opt/cairn/bin/cairn-jax"]}  # the gate scripts a framework image carries
SCRIPTS_DIR = Path(__file__).parent / "scripts"


def template_digest(template: str) -> str:
    folder = dockerfiles_dir()
    return files_digest([folder / f"{template}{TEMPLATE_SUFFIX}", *folder.glob("_*.j2")])


def scripts_digest() -> str:
    return files_digest([SCRIPTS_DIR / f"{module}.py" for module in SCRIPTS.values()])


def labels_for(context: StageContext, recipe: ImageRecipe | None, target: str, family: str, title: str) -> dict[str, str]:
    release = context.manifest.release
    return {
        "org.opencontainers.image.version": release.version,
        "org.opencontainers.image.revision": context.manifest.digest,
        "org.opencontainers.image.source": recipe.source_url if recipe else "https://github.com/cairn-rocm/cairn",
        "org.opencontainers.image.created": rfc3339(release.source_date_epoch),
        "org.opencontainers.image.title": title,
        "dev.cairn.gfx-target": target,
        "dev.cairn.gfx-family": family,
        "dev.cairn.rocm-version": release.version,
    }


def extend_plan(context: StageContext) -> None:
    recipes = load_recipes()
    base = load_base(name=context.manifest.release.base)
    engine_blocked = "" if context.host.docker_host else f"needs a Docker Engine — {START_HINT}"
    registry, registry_id = context.host.registry, context.host.registry_id
    push_blocked = "" if registry else f"needs an OCI registry — {START_HINT}"
    release = context.manifest.release
    actions = context.actions

    actions["image:base"] = _base_action(context, base)
    actions["push:base"] = _push_action("push:base", "image:base", registry_id, push_blocked)
    for family in context.families:
        index = f"index:{family}"
        index_blocked = "" if index in actions else (
            f"needs {index}: images install the release's wheels from the family index "
            f"(the wheels stage plans it, before the images stage: cairn.stages)")
        for target in context.registry.expand(family):
            runtime = recipes["runtime"]
            image_id = f"image:runtime@{target}"
            actions[image_id] = _image_action(
                context, runtime, target, family, version=release.version, blocked=index_blocked or engine_blocked,
                deps=["push:base", "image:base", "assemble:sdk", *([index] if not index_blocked else [])],
                parts=[{"dep": "assemble:sdk", "src": "share/cairn/manifest.json",
                        "dest": "opt/cairn/share/cairn/manifest.json"}],
                scripts=["opt/cairn/bin/cairn-check"], links={"opt/rocm": f"{_site(release.python[0])}/_rocm_sdk_core"})
            actions[f"push:runtime@{target}"] = _push_action(f"push:runtime@{target}", image_id, registry_id, push_blocked)
            smoke = recipes["smoke"]
            component = next((c for c in context.manifest.components if c.name == smoke.component), None)
            package = f"package:{smoke.component}@{family}"
            if component is None or (index in actions and package not in actions[index].deps):
                context.notes.append(f"smoke image for {target}: {index} publishes no {smoke.component} wheel; not built")
            else:
                actions[f"image:smoke@{target}"] = _image_action(
                    context, smoke, target, family, version=component.version, blocked=index_blocked or engine_blocked,
                    deps=[f"push:runtime@{target}", image_id, *([index] if not index_blocked else [])],
                    parts=[], scripts=["opt/cairn/bin/cairn-smoke"])
                actions[f"push:smoke@{target}"] = _push_action(f"push:smoke@{target}", f"image:smoke@{target}",
                                                               registry_id, push_blocked)
            _plan_engine_image(context, recipes.get("llama-cpp"), target, family, index, image_id,
                               blocked=index_blocked or engine_blocked, push_blocked=push_blocked, registry_id=registry_id)
            for framework in context.manifest.frameworks:
                recipe = recipes.get(framework.recipe)
                if recipe is None:
                    context.notes.append(f"framework {framework.name}: no container recipe '{framework.recipe}' "
                                         f"in {containers_dir()}")
                    continue
                blocked = framework_blocked(context, recipe, family, framework.version)
                wheels = list(recipe.wheels_for(family))
                env = _library_env([*runtime.wheels_for(family), *wheels], release.python[0])
                deps = [f"push:runtime@{target}", image_id, *([index] if not index_blocked else [])]
                if wheels and not blocked and not index_blocked:
                    # every DT_NEEDED of the wheels' native code, checked over the runtime image before building
                    first = f"image:runtime@{context.registry.expand(family)[0]}"
                    link = plan_linkage(recipe.name, family, release.version, first, index, wheels, env,
                                        _site(release.python[0]), release.python[0])
                    actions.setdefault(link.id, link)
                    deps.append(link.id)
                action = _image_action(context, recipe, target, family, version=framework.version,
                                       blocked=blocked or index_blocked or engine_blocked, deps=deps, parts=[],
                                       scripts=FRAMEWORK_SCRIPTS.get(recipe.name, []), wheels=wheels, env=env)
                actions[action.id] = action
                if not blocked:  # an image this release can make is pushed and gated; one it cannot is only named
                    actions[f"push:{recipe.name}@{target}"] = _push_action(f"push:{recipe.name}@{target}", action.id,
                                                                           registry_id, push_blocked)


def _library_env(wheels: list[str], python: str) -> dict[str, str]:
    """The environment a framework image needs for the wheels it and its runtime parent install: the family's
    SDK libraries are found through LD_LIBRARY_PATH (framework plugins' RUNPATHs name /opt/rocm/lib, which is
    the core wheel only)."""
    if any(w.startswith("rocm-sdk-libraries") for w in wheels):
        return {"LD_LIBRARY_PATH": f"{_site(python)}/_rocm_sdk_libraries/lib"}
    return {}


def _plan_engine_image(context: StageContext, recipe: ImageRecipe | None, target: str, family: str, index: str,
                       runtime_id: str, *, blocked: str, push_blocked: str, registry_id: str) -> None:
    """``image:llama-cpp@<target>``: the runtime (which has the family's SDK libraries wheel: hipBLAS, rocBLAS)
    + the family's llama-cpp-python wheel from the index, and the engine's tools (relinked against that
    wheel) in /opt/llama.cpp/bin."""
    if recipe is None or not any(c.name == recipe.component for c in context.manifest.components):
        return
    package = f"package:{recipe.wheels[0]}@{family}"
    if index in context.actions and package not in context.actions[index].deps:
        context.notes.append(f"{recipe.name} image for {target}: {index} publishes no {recipe.wheels[0]} wheel; not built")
        return
    component = context.manifest.component(recipe.component)
    # the engine's run-time requirements go in with it, from the same index (the manifest mirrors each into it):
    # the wheels are installed --no-deps, so one left out is an `import llama_cpp` that fails in the image
    wheels = list(dict.fromkeys([*recipe.wheels_for(family), *(r.get("name") for r in component.requirements)]))
    action = _image_action(
        context, recipe, target, family, version=component.version, blocked=blocked,
        deps=[f"push:runtime@{target}", runtime_id, *([index] if index in context.actions else []), package],
        parts=[{"dep": package, "src": "tools", "dest": "opt/llama.cpp/bin"}], scripts=["opt/cairn/bin/cairn-llama"],
        wheels=wheels, extra_labels=_engine_labels(component), base_labels=True)
    context.actions[action.id] = action
    push = f"push:{recipe.name}@{target}"
    context.actions[push] = _push_action(push, action.id, registry_id, push_blocked)


def _engine_labels(component: Component) -> dict[str, str]:
    """What an engine image says it was built from: the pinned source by sha256 and the upstream build it is
    (``vendored_build``, what ``llama-server --version`` prints). The base image's digest is known only once
    the parent is built: ``run_image`` adds it (``base_labels``)."""
    labels = {}
    if component.source.get("sha256"):
        labels["dev.cairn.source-digest"] = f"sha256:{component.source.get('sha256')}"
        labels["dev.cairn.source-name"] = str(component.source.get("filename") or component.source.get("url") or "")
    pin = component.build.arg("vendored_build")
    pin = dict(pin) if isinstance(pin, tuple) else pin  # the loaded manifest keeps a table as frozen pairs
    if isinstance(pin, dict) and pin.get("number") and pin.get("commit"):
        labels[f"dev.cairn.{component.name}-build"] = f"b{pin['number']}-{pin['commit']}"
    return labels


def _site(python: str) -> str:
    """Where Debian's pip installs for root (``--break-system-packages``): the image's site-packages."""
    return f"/usr/local/lib/python{python}/dist-packages"


def _base_action(context: StageContext, base: BaseRecipe) -> Action:
    release = context.manifest.release
    blocked = "" if "mmdebstrap" in context.host.tools else "needs mmdebstrap (apt-get install mmdebstrap)"
    # the host's apt can only vouch for a recipe of its own kind of suite (bookworm); a sid recipe's lock is
    # checked against the rootfs mmdebstrap produced (check_lock), which fails naming every difference
    if not blocked and base.check_valid_until and not base.suites:
        pins = base.pins()
        have = context.host.apt_versions
        wrong = [f"{p}={v}" for p, v in pins.items() if have and v not in have.get(p, frozenset())]
        if wrong:
            blocked = f"apt cannot fetch {', '.join(wrong)} (the Debian point release moved): re-lock: cairn pins lock recipes/containers/{release.base}.toml"
    tag = f"{base.name}-{release.source_date_epoch}"
    return Action(
        id="image:base", kind="image-base", blocked=blocked,
        inputs={"layout": LAYOUT_VERSION, "zlib": ZLIB_VERSION, "recipe": base.to_json(), "recipe_file": release.base,
                "epoch": release.source_date_epoch, "tag": tag,
                "labels": {**labels_for(context, None, "", "", f"{base.repo}:{tag}"),
                           "org.opencontainers.image.version": base.name},
                "tool": context.host.mmdebstrap_version})


def _push_action(action_id: str, image_id: str, registry_id: str, blocked: str) -> Action:
    return Action(id=action_id, kind="image-push", deps=(image_id,), blocked=blocked,
                  inputs={"layout": LAYOUT_VERSION, "registry_id": registry_id})


def _image_action(context: StageContext, recipe: ImageRecipe, target: str, family: str, *, version: str,
                  blocked: str, deps: list[str], parts: list[dict[str, str]], scripts: list[str],
                  links: dict[str, str] | None = None, wheels: list[str] | None = None,
                  env: dict[str, str] | None = None, extra_labels: dict[str, str] | None = None,
                  base_labels: bool = False) -> Action:
    release = context.manifest.release
    python = release.python[0]
    tags = list(recipe.render_tags(rocm=release.version, target=target, version=version, python=python))
    return Action(
        id=f"image:{recipe.name}@{target}", kind="image-build", deps=tuple(deps), family=family, blocked=blocked,
        inputs={
            "layout": LAYOUT_VERSION, "zlib": ZLIB_VERSION, "recipe": recipe.to_json(),
            "template": template_digest(recipe.template),
            "scripts": scripts_digest(), "target": target, "family": family, "release": release.name,
            "rocm": release.version, "version": version, "python": python, "epoch": release.source_date_epoch,
            "tags": tags, "labels": {**labels_for(context, recipe, target, family, f"{recipe.repo}:{tags[0]}"), **(extra_labels or {})},
            "parent": deps[0], "parent_image": deps[1] if len(deps) > 1 else "", "parts": parts,
            "script_files": scripts, "links": dict(sorted((links or {}).items())),
            "index": next((d for d in deps if d.startswith("index:")), ""),
            "wheels": list(recipe.wheels_for(family) if wheels is None else wheels), "env": dict(sorted((env or {}).items())),
            "linkage": next((d for d in deps if d.startswith("linkage:")), ""),
            "engine": "docker legacy builder, --no-cache, --network host",
            **({"base_labels": True} if base_labels else {}),
        })
