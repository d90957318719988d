"""The wheels stage's part of the action graph (``extend_plan``); its runners are in ``cairn.wheels.run``.

Actions added after ``assemble:sdk``:

- ``package:rocm-sdk-core``, ``package:rocm-sdk-devel``, ``package:rocm-sdk-libraries@<family>``,
  ``package:rocm-sdk-device@<gfx>`` (the family wheel cut to each of its targets), ``package:rocm-sdk`` (meta,
  static extras per family and per device) and, for each target of a family of several, ``package:rocm-sdk@<gfx>``
  (the meta wheel of the target's own index, ``<release>+<gfx>``, whose family extra is the target's device
  wheel: not in any family's index);
- ``package:<project>@<family>`` for HIP extensions (every ``hip-extension`` recipe whose component the
  manifest builds, e.g. cairn-smoke) and device-code source recipes (PyTorch, vLLM);
- ``package:<recipe>`` for pure-Python source recipes (SGLang), built once for all families;
- ``fetch-sdist:<file>`` / ``fetch:pypi:<file>`` + ``mirror:<file>`` for pinned sdists and mirrored wheels;
- ``index:<family>``: the family's simple index over every wheel above that belongs to it.

Planning is pure (patchelf's version comes from the host snapshot): the tools that shape the bytes (patchelf,
zlib, this stage's layout and the runtime sources shipped in wheels) are inputs of every key.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from packaging.version import Version

from cairn import digest
from cairn.errors import ManifestError
from cairn.model.manifest import Framework
from cairn.model.wheel_recipes import Recipe, known_recipes, load_recipe
from cairn.model.wheel_versions import extra_name, framework_version, rocm_major, sdk_version
from cairn.plan.context import LAYOUT_VERSIONS, StageContext, build_id, fetch_id
from cairn.plan.graph import Action, closure_blocked
from cairn.plan.probe import Host
from cairn.wheels import frameworks, index, sdk, wheelfile

LAYOUT = 1


@cache
def code_digest() -> str:
    """The digest of this stage's own modules (``cairn.digest.code_digest``): what they write changes only when
    what they do changes."""
    return digest.stage_code_digest("wheels")


def tool_inputs(host: Host) -> dict[str, Any]:
    return {"layout": LAYOUT, "wheel_layout": wheelfile.LAYOUT, "zlib": wheelfile.ZLIB_VERSION,
            "patchelf": host.patchelf_version, "runtime": sdk.runtime_digest(), "code": code_digest()}


def extend_plan(context: StageContext) -> None:
    """Add packaging, mirror and index actions for every family of the plan."""
    manifest, registry, actions = context.manifest, context.registry, context.actions
    release = manifest.release
    version = sdk_version(release.version, release.channel, release.source_date_epoch)
    base = {"release": release.name, "channel": release.channel, "sdk_version": version,
            "source_date_epoch": release.source_date_epoch, "tools": tool_inputs(context.host)}
    expansion = [build_id(c) for c in manifest.components if c.sdk != "core" and not c.build.target_specific]
    tree_deps = ("assemble:sdk", *expansion)
    blocked_tools = "" if "patchelf" in context.host.tools else "needs patchelf (apt-get install patchelf)"
    per_family: dict[str, list[str]] = {fam: [] for fam in context.families}

    def add(action: Action, families: tuple[str, ...] = ()) -> None:
        actions[action.id] = action
        for fam in families or context.families:
            per_family[fam].append(action.id)

    def serve(action_id: str, families: tuple[str, ...] = ()) -> None:
        """Put an already planned action's wheels into more families' indexes (a file two recipes mirror)."""
        for fam in families or context.families:
            if action_id not in per_family[fam]:
                per_family[fam].append(action_id)

    # per family, Python -> the engines its index serves that Python (the release's own Python gets every wheel)
    claims: dict[str, dict[str, list[str]]] = {}

    grafts = {part: _graft_fetches(context, part) for part in (sdk.CORE, sdk.LIBRARIES)}
    add(Action("package:rocm-sdk-core", "package", {**base, "part": sdk.CORE, **grafts[sdk.CORE][0], **_rewrites(context)},
               (*tree_deps, *grafts[sdk.CORE][1]), blocked=blocked_tools))
    add(Action("package:rocm-sdk-devel", "package", {**base, "part": sdk.DEVEL}, (*tree_deps, "package:rocm-sdk-core"),
               blocked=blocked_tools))
    devices = list(dict.fromkeys(t for fam in release.families for t in registry.expand(fam)))
    add(Action("package:rocm-sdk", "package", {**base, "part": "meta", "families": list(release.families),
                                                "devices": devices}))
    for fam in context.families:
        targets = registry.expand(fam)
        libraries = f"package:rocm-sdk-libraries@{fam}"
        add(Action(libraries, "package", {**base, "part": sdk.LIBRARIES, "family": fam, "targets": list(targets),
                                          **grafts[sdk.LIBRARIES][0], **_rewrites(context)},
                   (*tree_deps, "package:rocm-sdk-core", *grafts[sdk.LIBRARIES][1]), family=fam, blocked=blocked_tools), (fam,))
        for target in targets:  # one target's cut of the family wheel; a target of two families is cut once
            device = f"package:rocm-sdk-device@{target}"
            if device in actions:
                per_family[fam].append(device)
                continue
            add(Action(device, "package", {**base, "part": "device", "family": fam, "target": target,
                                           "family_targets": list(targets)},
                       (libraries,), family=fam), (fam,))
            if len(targets) == 1:  # the family's index already serves that one target's code alone
                continue
            # the target's own index: never in the family's (there it would be every GPU's rocm-sdk)
            actions[f"package:rocm-sdk@{target}"] = Action(
                f"package:rocm-sdk@{target}", "package",
                {**base, "part": "meta-target", "families": list(release.families), "devices": devices,
                 "family": fam, "target": target}, (device,), family=fam)

    for recipe in _hip_extensions(context):
        comp = manifest.component(recipe.component)
        for fam in context.families:
            built = build_id(comp, fam)
            if built not in actions:
                continue
            add(Action(f"package:{recipe.project}@{fam}", "package", {
                **base, "part": "hip-extension", "recipe": recipe.name, "recipe_sha256": recipe.digest,
                "project": recipe.project, "package": recipe.package, "component": comp.name,
                "library": comp.build.arg("library", f"lib{comp.name}.so"), "build": built,
                "targets": list(actions[built].inputs.get("targets", registry.expand(fam))),
                "build_version": framework_version(comp.version, version), "description": recipe.description,
                "requires": [f"rocm-sdk[{extra_name(fam)}]=={version}"],
            }, (built, "package:rocm-sdk-core"), component=comp.name, family=fam, blocked=blocked_tools), (fam,))

    for recipe in _recipes_of_kind(context, "engine"):
        comp = manifest.component(recipe.component)
        if comp.version not in recipe.versions:
            raise ManifestError(manifest.path, f"component '{comp.name}' is version {comp.version}, which the engine recipe "
                                f"{recipe.name} does not list", f"add [versions.\"{comp.version}\"] to recipes/wheels/{recipe.path.name}")
        if comp.source.kind != "pypi":
            raise ManifestError(manifest.path, f"component '{comp.name}' is packaged by the engine recipe {recipe.name}, "
                                "which takes its Python package from a pinned sdist", "give it a source.pypi = { … } pin")
        fetch = fetch_id(comp.source)
        served = recipe.served_pythons(comp.version)
        _check_requirements(comp, recipe, manifest.path)
        engine_families = []
        for fam in context.families:
            built = build_id(comp, fam)
            if built not in actions:
                continue
            engine_families.append(fam)
            add(Action(f"package:{recipe.project}@{fam}", "package", {
                **base, "part": "engine", "recipe": recipe.name, "recipe_sha256": recipe.digest,
                "project": recipe.project, "package": recipe.package, "component": comp.name, "build": built,
                "fetch": fetch, "sdist": comp.source.get("filename"),
                "device_libraries": list(comp.build.arg("device_libraries", ()) or ()),
                "targets": list(actions[built].inputs.get("targets", registry.expand(fam))),
                "build_version": framework_version(comp.version, version), "description": recipe.description,
                "requires": [f"rocm-sdk[{extra_name(fam)}]=={version}"],
                "tools_rpath": f"/usr/local/lib/python{release.python[0]}/dist-packages/{recipe.package}/lib",
                "requires_python": f">={min(served, key=Version)}" if served else ">=3.8",
            }, (built, fetch, "package:rocm-sdk-core", f"package:rocm-sdk-libraries@{fam}"), component=comp.name,
                family=fam, blocked=blocked_tools), (fam,))
            for python in served:  # the index claims these Pythons for the engine (and the SDK it pulls in)
                claims.setdefault(fam, {}).setdefault(python, []).append(recipe.project)
        for item in recipe.mirror_files(comp.version) if engine_families else ():
            _mirror_action(context, recipe, item, add, serve, tuple(engine_families), required_by=recipe.project)

    sdk_blocked = closure_blocked(actions, "assemble:sdk")
    for framework in manifest.frameworks:
        recipe = load_recipe(framework.recipe)
        if recipe.kind != "mirror" or not python_blocked(recipe, framework.version, release.python):
            recipe = _recipe_for(framework, manifest.path, release.python)  # nothing to pin when nothing fits
        if recipe.kind == "mirror":
            _plan_mirror(context, recipe, framework, add, serve)
        elif recipe.kind == "source":
            _plan_source(context, recipe, framework, base, version, sdk_blocked, add)

    for fam, members in per_family.items():
        # what the matrix's commands install from the index: the SDK with the family's extra or one target's
        sdk_roots = [f"rocm-sdk[{extra_name(fam)}]", *(f"rocm-sdk[device-{t}]" for t in registry.expand(fam))]
        unchecked = sorted({load_recipe(f.recipe).project for f in manifest.frameworks
                            if load_recipe(f.recipe).kind == "source"})
        pythons = {python: {"python": python, "every": True, "roots": sdk_roots, **({"unchecked": unchecked} if unchecked else {})}
                   for python in release.python}
        for python, roots in claims.get(fam, {}).items():  # further Pythons an engine's recipe serves
            pythons.setdefault(python, {"python": python, "every": False, "roots": [*roots, *sdk_roots]})
        actions[f"index:{fam}"] = Action(f"index:{fam}", "index", {"layout": index.LAYOUT, "code": code_digest(), "family": fam,
                                                                  "sdk_version": version,
                                                                  "claims": [pythons[p] for p in sorted(pythons, key=Version)]},
                                         tuple(sorted(members)), family=fam)


def _graft_fetches(context: StageContext, part: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The ``[[wheels.graft]]`` pins ``part``'s wheel carries (inputs of its key; none: no key change) and the
    fetch actions of their .debs, planned like every suite-pinned deb."""
    pins = [g for g in context.manifest.grafts if g.wheel == part]
    if not pins:
        return {}, ()
    deps = []
    for item in pins:
        fid = fetch_id(item.source)
        deps.append(fid)
        if fid in context.actions:
            continue
        fields = dict(item.source.fields)
        host = context.host
        offered = host.suite_versions.get(fields["suite"], {}).get(fields["package"], ())
        blocked = "" if fields["sha256"] in host.mirrored or fields["version"] in offered else (
            f"graft {fields['package']}={fields['version']} is served neither by {fields['suite']} nor by a mirror "
            "— run: cairn pins check MANIFEST")
        context.actions[fid] = Action(fid, "fetch", {"layout": LAYOUT_VERSIONS["fetch"], "source": item.source.as_dict()},
                                      blocked=blocked)
    inputs = {"grafts": [dict(g.source.fields) for g in pins], "graft_wheels": {g.package: g.wheel for g in pins}}
    return inputs, tuple(deps)


def _rewrites(context: StageContext) -> dict[str, Any]:
    """The reviewed symbol-version rewrites (inputs of the SDK wheels that apply them; none: no key change)."""
    entries = [r.as_dict() for r in context.manifest.symbol_versions]
    return {"symbol_versions": entries} if entries else {}


def _hip_extensions(context: StageContext) -> list[Recipe]:
    return _recipes_of_kind(context, "hip-extension")


def _recipes_of_kind(context: StageContext, kind: str) -> list[Recipe]:
    """Recipes of ``kind`` that package a per-family component this manifest builds."""
    names = {c.name for c in context.manifest.components if c.build.target_specific}
    found = []
    for name in known_recipes():
        recipe = load_recipe(name)
        if recipe.kind == kind and recipe.component in names:
            found.append(recipe)
    return found


def _recipe_for(framework: Framework, manifest_path: Any, pythons: tuple[str, ...] = ()) -> Recipe:
    recipe = load_recipe(framework.recipe)
    if framework.version not in recipe.versions:
        raise ManifestError(manifest_path, f"recipe '{recipe.name}' has no version {framework.version} "
                            f"(it pins: {', '.join(recipe.versions)})", f"add [versions.\"{framework.version}\"] to {recipe.path.name}")
    _check_pin(framework, recipe, manifest_path, pythons)
    return recipe


def _check_pin(framework: Framework, recipe: Recipe, manifest_path: Any, pythons: tuple[str, ...] = ()) -> None:
    """The manifest's pin of a framework is exactly what its recipe's version builds or mirrors (or both say
    no pin is known): a release manifest names every input, and never one the build would not use."""
    where = framework.where or manifest_path
    version, recipe_file = framework.version, f"recipes/wheels/{recipe.path.name}"
    mine = framework.source.as_dict() if framework.source and not framework.pin_unknown else None
    if recipe.kind == "mirror" and framework.files:
        # every wheel the recipe mirrors for the release's Pythons, each by sha256 — no more, no fewer
        wanted = {f.filename: {"pypi": {"name": f.name, "version": f.version, "filename": f.filename, "sha256": f.sha256}}
                  for f in recipe.mirror_files(version) if not f.python or not pythons or f.python in pythons}
        pinned = {f.get("filename"): f.as_dict() for f in framework.files}
        extra = [_pin_text(pinned[n]) for n in sorted(pinned) if wanted.get(n) != pinned[n]]
        absent = [_pin_text(wanted[n]) for n in sorted(wanted) if pinned.get(n) != wanted[n]]
        if extra or absent:
            said = (f"pins {', '.join(extra)}, which {recipe_file} does not mirror for {version}" if extra else "")
            said += ("; and " if extra and absent else "") + (f"leaves out {', '.join(absent)}" if absent else "")
            raise ManifestError(where, f"framework '{framework.name}' {said}", "pin the same files and sha256s in both")
        return
    if recipe.kind == "mirror":
        theirs = [{"pypi": {"name": f.name, "version": f.version, "filename": f.filename, "sha256": f.sha256}}
                  for f in recipe.mirror_files(version)]
        if mine is None:
            raise ManifestError(where, f"framework '{framework.name}' says no pin is known, but {recipe_file} mirrors "
                                f"{', '.join(_pin_text(t) for t in theirs)} for {version}", "pin that file's sha256 in the manifest")
        if mine not in theirs:
            raise ManifestError(where, f"framework '{framework.name}' pins {_pin_text(mine)} "
                                f"but {recipe_file} mirrors {', '.join(_pin_text(t) for t in theirs)} for {version}",
                                "pin the same file and sha256 in both")
        return
    if recipe.kind != "source":
        return
    theirs_source, theirs_unknown = recipe.source(version), recipe.pin_unknown(version)
    if mine is None:
        if not theirs_unknown:
            raise ManifestError(where, f"framework '{framework.name}' says no pin is known, but {recipe_file} pins "
                                f"{_pin_text(theirs_source.as_dict()) if theirs_source else '?'} for {version}",
                                "copy the recipe's pin into the manifest")
        return
    if theirs_unknown or theirs_source is None or theirs_source.as_dict() != mine:
        recipe_pin = f"pin_unknown ({theirs_unknown})" if theirs_unknown else (_pin_text(theirs_source.as_dict()) if theirs_source else "nothing")
        raise ManifestError(where, f"framework '{framework.name}' pins {_pin_text(mine)} but {recipe_file} "
                            f"has {recipe_pin} for {version}", "pin the same source in both")


def _pin_text(source: dict[str, Any]) -> str:
    """A pin as a person compares it: the file and its digest, or the repository and commit."""
    kind, fields = next(iter(source.items()))
    if kind == "pypi":
        return f"{fields.get('filename')} (sha256 {str(fields.get('sha256', '?'))[:16]}…)"
    if kind == "git":
        return f"{fields.get('url')}@{fields.get('commit', fields.get('ref', '?'))}"
    return f"{fields.get('url')} ({fields.get('sha256') or fields.get('sha512') or '?'})"


def check_rocm_major(context: StageContext, recipe: Recipe, framework: Framework, project: str, version: str) -> None:
    """Refuse a wheel built for another ROCm major than the release's: an index never mixes ROCm majors
    (a ROCm 7 plugin in a 5.2.3 index installs, then fails to load its libamdhip64.so.7 at run time)."""
    release = context.manifest.release
    major, ours = rocm_major(project, version), Version(release.version).major
    if major is None or major == ours:
        return
    manifest = context.manifest.path
    verb = "mirrors" if recipe.kind == "mirror" else "builds"
    raise ManifestError(framework.where or manifest,
                        f"framework '{framework.name}' {verb} {project} {version} (recipes/wheels/{recipe.path.name}), built for "
                        f"ROCm {major}, into the indexes of this ROCm {release.version} release: an index never mixes ROCm majors",
                        f"remove [frameworks.{framework.name}] from {Path(str(manifest)).name}, or give it a recipe version "
                        f"built for ROCm {ours}")


def python_blocked(recipe: Recipe, version: str, pythons: tuple[str, ...]) -> str:
    """Why a mirror recipe's version has nothing for the release's Pythons ("" when it has): the registry
    serves those wheels only for other interpreters, and an image runs exactly one."""
    files = recipe.mirror_files(version)
    if not files or any(not f.python or f.python in pythons for f in files):
        return ""
    served = sorted({f.python for f in files}, key=Version)
    span = served[0] if len(served) == 1 else f"{served[0]}–{served[-1]}"
    return (f"{recipe.project} {version} is served for Python {span} only ({len(files)} wheels in "
            f"recipes/wheels/{recipe.path.name}), and this release's images run Python {', '.join(pythons)}")


def _check_requirements(comp: Any, recipe: Recipe, manifest_path: Any) -> None:
    """The manifest's ``requirements`` of an engine component are exactly the files its recipe mirrors for that
    version, each by sha256: the release manifest names every input, and never one the build would not use."""
    wanted = {f.filename: {"pypi": {"name": f.name, "version": f.version, "filename": f.filename, "sha256": f.sha256}}
              for f in recipe.mirror_files(comp.version)}
    pinned = {str(f.get("filename")): f.as_dict() for f in comp.requirements}
    extra = [_pin_text(pinned[n]) for n in sorted(pinned) if wanted.get(n) != pinned[n]]
    absent = [_pin_text(wanted[n]) for n in sorted(wanted) if pinned.get(n) != wanted[n]]
    if not extra and not absent:
        return
    recipe_file = f"recipes/wheels/{recipe.path.name}"
    said = f"pins {', '.join(extra)}, which {recipe_file} does not mirror for {comp.version}" if extra else ""
    said += ("; and " if extra and absent else "") + (f"leaves out {', '.join(absent)}" if absent else "")
    raise ManifestError(comp.requirements_where or manifest_path, f"component '{comp.name}' requirements {said}",
                        "pin the same files and sha256s in both (requirements = [{ name, version, filename, sha256 }])")


def _mirror_action(context: StageContext, recipe: Recipe, item: Any, add: Any, serve: Any, families: tuple[str, ...] = (),
                   required_by: str = "") -> None:
    """``fetch:pypi:<file>`` + ``mirror:<file>`` for one pinned wheel, served in ``families`` (all when empty).

    A file two recipes mirror (numpy for JAX and for llama-cpp-python) is one action, planned by the first and
    served to the second's families too. ``required_by``: the project whose run-time requirement it is; its
    wheels go wherever that project's wheel goes (every cell of the family), not to one framework's cells."""
    action_id = f"mirror:{item.filename}"
    if action_id in context.actions:
        serve(action_id, families)
        return
    fetch = f"fetch:pypi:{item.filename}"
    source = {"pypi": {"name": item.name, "version": item.version, "filename": item.filename, "sha256": item.sha256}}
    if fetch not in context.actions:
        context.actions[fetch] = Action(fetch, "fetch", {"layout": LAYOUT_VERSIONS["fetch"], "source": source},
                                        blocked="" if "pip" in context.host.tools else "needs pip")
    inputs = {"layout": LAYOUT, "code": code_digest(), "recipe": recipe.name, "recipe_sha256": recipe.digest,
              "project": item.name, "filename": item.filename,
              "families": {fam: list(context.registry.expand(fam)) for fam in context.families}}
    if required_by:
        inputs["required_by"] = required_by
    add(Action(action_id, "mirror", inputs, (fetch,)), families)


def _plan_mirror(context: StageContext, recipe: Recipe, framework: Framework, add: Any, serve: Any) -> None:
    pythons = set(context.manifest.release.python)
    families = {fam: list(context.registry.expand(fam)) for fam in context.families}
    for item in recipe.mirror_files(framework.version):
        check_rocm_major(context, recipe, framework, item.name, item.version)
    why = python_blocked(recipe, framework.version, context.manifest.release.python)
    if why:  # planned, never run and never in an index: the bundle gives the framework's cells this reason
        action_id = f"mirror:{recipe.project}-{framework.version}"
        context.actions[action_id] = Action(action_id, "mirror", {"layout": LAYOUT, "recipe": recipe.name,
                                                                  "project": recipe.project, "families": families},
                                            blocked=why)
        return
    for item in recipe.mirror_files(framework.version):
        if item.python and item.python not in pythons:
            continue
        _mirror_action(context, recipe, item, add, serve)


def source_inputs(recipe: Recipe, framework: Framework, base: dict[str, Any], sdk: str, family: str,
                  targets: tuple[str, ...], python: str) -> dict[str, Any]:
    """The exact build of one source recipe: commands, environment, pins, expected output."""
    spec = recipe.build
    build_version = framework_version(framework.version, sdk)
    values = {"version": framework.version, "build_version": build_version, "sdk": sdk, "family": family,
              "py": python.replace(".", ""), "python_version": python}
    env = {key: frameworks.render(value, values) for key, value in spec.env}
    if spec.arch_env:
        env[spec.arch_env] = spec.arch_separator.join(targets)
    source = recipe.source(framework.version)
    assert source is not None
    return {
        **base, "part": "framework", "recipe": recipe.name, "recipe_sha256": recipe.digest, "project": recipe.project,
        "version": framework.version, "build_version": build_version, "device_code": spec.device_code,
        "targets": list(targets), "python": python, "source": source.as_dict(),
        "env": dict(sorted(env.items())),
        "commands": [[frameworks.render(arg, values) for arg in cmd] for cmd in spec.commands],
        "build_requires": list(spec.build_requires),
        "requires": [frameworks.render(r, values) for r in spec.requires],
        "upstream_wheel": frameworks.render(spec.wheel, {**values, "build_version": build_version if spec.device_code else framework.version}),
        "wheel": wheelfile.wheel_filename(recipe.project, build_version, _tag_of(frameworks.render(spec.wheel, values))),
    }


def _tag_of(filename: str) -> str:
    return wheelfile.parse_filename(filename)[2]


def _plan_source(context: StageContext, recipe: Recipe, framework: Framework, base: dict[str, Any], sdk: str,
                 sdk_blocked: str, add: Any) -> None:
    release, host = context.manifest.release, context.host
    source = recipe.source(framework.version)
    assert source is not None
    fields = dict(source.fields)
    if source.kind == "pypi":
        fetch = f"fetch-sdist:{fields['filename']}"
        fetch_action = Action(fetch, "fetch-sdist", {"layout": LAYOUT, "source": source.as_dict()},
                              blocked="" if "pip" in host.tools else "needs pip")
    else:
        fetch = f"fetch:{recipe.name}@{framework.version}"
        pin = recipe.pin_unknown(framework.version)
        fetch_action = Action(fetch, "fetch", {"layout": LAYOUT_VERSIONS["fetch"], "source": source.as_dict()},
                              blocked=f"pin unknown for {recipe.project} {framework.version}: {pin}" if pin else "")
    context.actions.setdefault(fetch, fetch_action)
    check_rocm_major(context, recipe, framework, recipe.project, framework.version)
    python = release.python[0]
    spec = recipe.build
    families = context.families if spec.device_code else ("",)
    for fam in families:
        targets = tuple(t for t in context.registry.expand(fam) if t not in spec.exclude_targets) if fam else ()
        inputs = {**source_inputs(recipe, framework, base, sdk, fam, targets, python), "fetch": fetch}
        reasons = []
        pin = recipe.pin_unknown(framework.version)
        if pin:
            reasons.append(f"a pinned {recipe.project} {framework.version} source ({pin})")
        if spec.device_code:
            major = Version(release.version).major
            if spec.min_rocm and major < spec.min_rocm:
                reasons.append(f"a ROCm ≥ {spec.min_rocm} SDK (this release ships ROCm {release.version})")
            elif sdk_blocked:
                reasons.append(f"a ROCm ≥ {spec.min_rocm or 6} toolchain: rocm-sdk-devel {sdk} built from this manifest "
                               f"on a TheRock build host (this host has {host.hipcc_version or 'no hipcc'})")
        if "pip" not in host.tools:
            reasons.append("pip")
        deps = [fetch]
        if spec.device_code:
            deps += ["package:rocm-sdk-core", "package:rocm-sdk-devel", f"package:rocm-sdk-libraries@{fam}", "package:rocm-sdk"]
            for other in spec.depends_frameworks:
                upstream = next((f for f in context.manifest.frameworks if f.name == other), None)
                if upstream is None:
                    raise ManifestError(context.manifest.path, f"recipe '{recipe.name}' builds on framework '{other}', which the manifest does not list",
                                        f"add [frameworks.{other}]")
                deps.append(f"package:{load_recipe(upstream.recipe).project}@{fam}")
        action_id = f"package:{recipe.project}" + (f"@{fam}" if fam else "")
        add(Action(action_id, "package", inputs, tuple(deps), component=recipe.name, family=fam,
                   blocked=("needs " + "; ".join(reasons)) if reasons else ""), (fam,) if fam else ())
