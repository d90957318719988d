"""Resolve a manifest into the action graph. Pure: manifest + registry + host snapshot in, Plan out.

Actions per release:
- ``fetch:<source>`` once per distinct pinned input (two components from one monorepo commit share it);
- ``build:<component>`` for target-neutral builds, ``build:<component>@<family>`` for device-code builds (with
  ``compile_once``, ``build:<component>`` compiles every family's code objects and each ``@<family>`` cuts its own);
- ``assemble:sdk``: every target-neutral component merged into one relocatable SDK tree.
Later stages append their own actions (package, image, audit, gate, sign, publish) to the same graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, Protocol
from urllib.parse import urlparse

from cairn.errors import ManifestError
from cairn.model.manifest import Component, Manifest
from cairn.model.targets import Registry
from cairn.plan.context import LAYOUT_VERSIONS, StageContext, build_id, fetch_id
from cairn.plan.graph import Action, Plan, toposort
from cairn.plan.probe import Host
from cairn.plan.toolchain import IMAGE_ID, PUSH_ID, toolchain_actions


class PlanStage(Protocol):
    """A later stage as the planner sees it: a name and what it adds to the graph. The table of them
    (``cairn.stages.STAGES``) sits above every stage; the commands hand it in, so planning imports no stage."""

    @property
    def name(self) -> str: ...

    @property
    def extend_plan(self) -> Callable[[StageContext], None]: ...


@dataclass(frozen=True)
class Pipeline:
    """The later stages as the commands use them — to plan, to run, to say which stage an action is of. Made
    once, in ``cairn.stages``; ``cli.py`` hands it to the subcommands that plan or build (cibuildwheel's platform
    table is the model), so no stage package imports the table that imports every stage."""

    stages: Sequence[PlanStage]
    runners: Mapping[str, Callable[[Any], None]]
    stage_of: Callable[[Action], str]
    order: tuple[str, ...]


def plan_release(manifest: Manifest, registry: Registry, host: Host, families: tuple[str, ...] = (),
                 path_digests: dict[str, str] | None = None, *, stages: Sequence[PlanStage]) -> Plan:
    """The full action graph for ``manifest``, restricted to ``families`` when given.

    ``path_digests`` maps each ``path`` source directory to its content digest, so editing our own
    sources changes their fetch key. ``stages``: the later stages to plan, in pipeline order (``cairn.stages``
    ``STAGES`` or ``chosen(names)``; ``()`` plans the SDK only).
    """
    families = families or manifest.release.families
    for fam in families:
        registry.expand(fam)  # KeyError with a hint for unknown families
    actions: dict[str, Action] = {a.id: a for a in toolchain_actions(manifest, host)}
    toolchain = (IMAGE_ID, PUSH_ID) if actions else ()
    notes: list[str] = []
    by_name = {c.name: c for c in manifest.components}

    for sdk_id, name, reason in manifest.unavailable:
        notes.append(f"{sdk_id}: {name} not available — {reason}")
    for comp in manifest.components:
        fid = fetch_id(comp.source)
        if fid not in actions:
            actions[fid] = _fetch_action(fid, comp, host, (path_digests or {}).get(str(comp.source.get("dir")), ""))
        if comp.pin_unknown:
            notes.append(f"{comp.name}: pin unknown — {comp.pin_unknown}")
        if comp.build.target_specific:
            if comp.build.arg("families") is not None:
                raise ManifestError(manifest.path, f"{comp.name}: build.args.families is no longer read — every family "
                                    "of the release gets a per-family build", "remove build.args.families")
            per_family: dict[str, tuple[str, ...]] = {}
            for fam in families:
                targets = _component_targets(comp, fam, registry)
                if not targets:
                    notes.append(f"{comp.name}: no targets of {fam} left after exclusions; not built for it")
                    continue
                chosen = comp.build.arg("family_targets")
                if chosen is not None:  # the component says which code objects cover each family (llama.cpp)
                    targets = _chosen_targets(manifest, comp, fam, targets, registry)
                elif toolchain:  # LLVM 22 has generic targets: one more code object that covers the family's members
                    targets = (*targets, *sorted({g for t in targets if (g := registry.target(t).generic)} - set(targets)))
                per_family[fam] = targets
            if comp.build.arg("compile_once") and per_family:
                for action in _compile_once(comp, by_name, host, per_family, toolchain, manifest.glibc_floor):
                    actions[action.id] = action
                continue
            for fam, targets in per_family.items():
                action = _build_action(comp, by_name, host, family=fam, targets=targets, toolchain=toolchain,
                                       glibc_floor=manifest.glibc_floor)
                actions[action.id] = action
        else:
            action = _build_action(comp, by_name, host)
            actions[action.id] = action

    neutral = [build_id(c) for c in manifest.components if not c.build.target_specific]
    actions["assemble:sdk"] = Action(
        id="assemble:sdk",
        kind="assemble",
        inputs={
            "layout": LAYOUT_VERSIONS["assemble"],
            "release": manifest.release.name,
            "version": manifest.release.version,
            "manifest": manifest.embedded(),
            "source_date_epoch": manifest.release.source_date_epoch,
            "components": sorted(c.name for c in manifest.components if not c.build.target_specific),
        },
        deps=tuple(neutral),
    )
    context = StageContext(manifest, registry, host, tuple(families), actions, notes)
    for stage in stages:
        stage.extend_plan(context)
    ordered = _propagate_blocked(toposort(actions.values()))
    return Plan(str(manifest.path.name), manifest.digest, ordered, tuple(notes))


def _component_targets(comp: Component, family: str, registry: Registry) -> tuple[str, ...]:
    """A family's targets minus the component's own exclusions and its project's registry exclusions."""
    excluded = set(registry.expand_all(comp.exclude_targets)) if comp.exclude_targets else set()
    targets = registry.targets_for_project(family, comp.project) if comp.project else registry.expand(family)
    return tuple(t for t in targets if t not in excluded)


def _chosen_targets(manifest: Manifest, comp: Component, family: str, exact: tuple[str, ...],
                    registry: Registry) -> tuple[str, ...]:
    """``family_targets`` of a component: the code objects named for ``family`` (a generic target that
    covers every member), else the family's exact targets — never both, since each is a full compile.

    A generic entry must cover every target of the family: a code object that leaves a member out would
    make that member's GPU fail to load the library at run time."""
    chosen = dict(_thaw(comp.build.arg("family_targets")) or {})
    named = chosen.get(family)
    if named is None:
        return exact
    names = [named] if isinstance(named, str) else list(named)
    where = f"{comp.name}: family_targets.\"{family}\""
    for name in names:
        if not registry.known_processor(str(name)):
            raise ManifestError(manifest.path, f"{where} names unknown gfx target '{name}'",
                                "use a target or generic target from manifests/targets.toml")
    left_out = [t for t in exact if not any(registry.can_run(str(n), t) for n in names)]
    if left_out:
        raise ManifestError(manifest.path, f"{where} = {names} does not cover {', '.join(left_out)}",
                            "name a generic target whose members include every target of the family, or drop the entry")
    return tuple(str(n) for n in names)


def _fetch_action(fid: str, comp: Component, host: Host, content: str = "") -> Action:
    source = comp.source
    f = dict(source.fields)
    blocked = ""
    if comp.pin_unknown:
        blocked = f"pin unknown for {comp.name}: {comp.pin_unknown}"
    elif source.kind == "git":
        url = f["url"]
        if url.startswith(("http://", "https://")):
            hostname = urlparse(url).hostname or ""
            if hostname not in host.reachable_hosts:
                blocked = f"needs git access to {hostname}{urlparse(url).path.removesuffix('.git')}"
        if "git" not in host.tools:
            blocked = blocked or "needs git (apt-get install git)"
    elif source.kind == "archive":
        hostname = urlparse(f["url"]).hostname or ""
        if f["url"].startswith(("http://", "https://")) and hostname not in host.reachable_hosts:
            blocked = f"needs network access to {hostname} to download {PurePosixPath(urlparse(f['url']).path).name}"
    elif source.kind == "deb" and f.get("suite"):
        blocked = _suite_pin_blocked(comp, f, host)
    elif source.kind == "deb":
        if not {"apt-get", "dpkg-deb"} <= host.tools:
            blocked = "needs apt-get and dpkg-deb (a Debian host)"
        elif host.apt_versions and f["version"] not in host.apt_versions.get(f["package"], frozenset()):
            have = ", ".join(sorted(host.apt_versions.get(f["package"], ()))) or "none"
            blocked = f"apt cannot fetch {f['package']}={f['version']} (apt has: {have}); run apt-get update or add its apt_source"
    elif source.kind == "pypi" and "pip" not in host.tools:
        blocked = "needs pip"
    inputs: dict[str, Any] = {"layout": LAYOUT_VERSIONS["fetch"], "source": source.as_dict()}
    if source.kind == "path":
        inputs["content"] = content
    return Action(id=fid, kind="fetch", inputs=inputs, component=comp.name, blocked=blocked)


def _suite_pin_blocked(comp: Component, f: dict[str, Any], host: Host) -> str:
    """A suite pin fetches from the store's source mirror or the suite's pool: blocked when neither has it."""
    if f["sha256"] in host.mirrored:
        return ""
    if f["suite"] not in host.suite_versions:
        return f"cannot read the {f['suite']} index of the Debian archive and no mirror holds {f['package']}={f['version']}"
    offered = host.suite_versions[f["suite"]].get(f["package"], ())
    if f["version"] in offered:
        return ""
    newest = max(offered, key=_DebKey) if offered else "nothing"
    return (f"{comp.name}: pinned {f['package']}={f['version']} is no longer served by {f['suite']} and no mirror holds it; "
            f"{f['suite']} now offers {newest} — run: cairn pins refresh MANIFEST")


class _DebKey:
    """Sort key ordering Debian versions (for "the newest version the archive offers")."""

    def __init__(self, version: str) -> None:
        self.version = version

    def __lt__(self, other: _DebKey) -> bool:
        # lazy: cairn.remote, email, cairn.sources, 66 ms at start-up (python -X importtime)
        from cairn.sources.debversion import compare

        return compare(self.version, other.version) < 0


def _build_action(comp: Component, by_name: dict[str, Component], host: Host, family: str = "",
                  targets: tuple[str, ...] = (), toolchain: tuple[str, ...] = (), glibc_floor: str = "") -> Action:
    kind = comp.build.kind
    deps = [fetch_id(comp.source)]
    inputs: dict[str, Any] = {
        "layout": LAYOUT_VERSIONS[kind],
        "component": comp.name,
        "version": comp.version,
        "build": {"kind": kind, "args": _build_args(comp)},
    }
    blocked = ""
    if kind in ("hip", "cmake") and glibc_floor:
        inputs["glibc_floor"] = glibc_floor  # checked on every ELF the compile writes (docs/wheels.md)
    if kind in ("hip", "cmake"):
        # compiled code sees its dependencies' headers and libraries: they are inputs
        deps += [build_id(by_name[d]) for d in comp.depends if not by_name[d].build.target_specific]
    if kind == "hip" and toolchain:
        # compiled in the release's build image: its digest (a dependency output) is part of the key
        inputs["targets"] = list(targets)
        inputs["toolchain"] = {"image": toolchain[0], "push": toolchain[1]}
        inputs["in_image"] = 3  # bumped when the in-image compile script changes (cairn.execute.hip.in_image_script)
        deps += list(toolchain)
    elif kind == "hip":
        inputs["targets"] = list(targets)
        inputs["toolchain"] = host.hipcc_version
        if not host.hipcc_version:
            blocked = "needs hipcc (apt-get install hipcc rocm-device-libs)"
        else:
            missing = [t for t in targets if t not in host.hip_targets]
            if missing:
                blocked = f"needs a ROCm ≥ 6 toolchain for {', '.join(missing)} (this host's {host.hipcc_version} cannot target them)"
    if kind == "cmake" and toolchain:
        # configured, built and installed inside the release's build image: its digest is part of the key
        inputs["toolchain"] = {"image": toolchain[0], "push": toolchain[1]}
        inputs["targets"] = list(targets)
        deps += list(toolchain)
    elif kind == "cmake":
        blocked = ("needs a build image to run CMake in: name one with [release] toolchain = \"<rootfs recipe>\" "
                   "(e.g. toolchain-rocm7)")
    return Action(id=build_id(comp, family), kind="build", inputs=inputs, deps=tuple(dict.fromkeys(deps)),
                  component=comp.name, family=family, blocked=blocked)


def _compile_once(comp: Component, by_name: dict[str, Component], host: Host, per_family: dict[str, tuple[str, ...]],
                  toolchain: tuple[str, ...], glibc_floor: str) -> list[Action]:
    """``compile_once``: one compile, ``build:<component>``, for every code object the families need, and per family
    ``build:<component>@<family>``, that compile cut to the family's own code objects (``cairn split``, exact IDs).

    Why: a HIP translation unit's host half and its front end run once per compile whatever the number of code
    objects, so one compile for six families costs far less than six (bench/results/release_build.json). A family's
    build keeps its id, its ``targets`` and its output layout, so the wheels, images and gates that read it are the
    same; only its bytes' origin changes."""
    union = tuple(dict.fromkeys(t for targets in per_family.values() for t in targets))
    whole = _build_action(comp, by_name, host, targets=union, toolchain=toolchain, glibc_floor=glibc_floor)
    actions = [whole]
    for fam, targets in per_family.items():
        inputs = {
            "layout": LAYOUT_VERSIONS["split"],
            "component": comp.name,
            "version": comp.version,
            "build": {"kind": "split", "args": _build_args(comp)},
            "targets": list(targets),
        }
        actions.append(Action(id=build_id(comp, fam), kind="build", inputs=inputs, deps=(whole.id,),
                              component=comp.name, family=fam))
    return actions


def _build_args(comp: Component) -> Any:
    """The build args as inputs: everything in them shapes the output."""
    return _thaw(comp.build.args)


def _propagate_blocked(actions: tuple[Action, ...]) -> tuple[Action, ...]:
    """An action whose dependency is blocked is blocked too, naming the first blocked dependency."""
    result: dict[str, Action] = {}
    for action in actions:
        blocked_dep = next((d for d in action.deps if result[d].blocked), None)
        if blocked_dep and not action.blocked:
            action = replace(action, blocked=f"waits on {blocked_dep} ({_root_reason(result, blocked_dep)})")
        elif blocked_dep and action.kind == "build":
            # a build blocked for its own reason whose source is unreachable too: the source comes first
            action = replace(action, blocked=f"waits on {blocked_dep} ({_root_reason(result, blocked_dep)}); then {action.blocked}")
        result[action.id] = action
    return tuple(result.values())


def _root_reason(actions: dict[str, Action], action_id: str) -> str:
    reason = actions[action_id].blocked
    while reason.startswith("waits on "):
        return reason.split("(", 1)[1].rstrip(")") if "(" in reason else reason
    return reason


def _thaw(value: Any) -> Any:
    """Frozen build args (tuples of pairs) back to JSON-able dicts and lists."""
    if isinstance(value, tuple):
        if all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value) and value:
            return {k: _thaw(v) for k, v in value}
        return [_thaw(v) for v in value]
    return value
