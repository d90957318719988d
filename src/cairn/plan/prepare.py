"""From command-line arguments to a Plan: load the manifest, probe the host, resolve the graph.

Shared by ``cairn plan`` and ``cairn build`` so both always show and run the same graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from cairn.errors import InputError, did_you_mean
from cairn.model.image_recipes import load_base
from cairn.model.manifest import Manifest, load_manifest
from cairn.model.targets import Registry, load_registry
from cairn.paths import default_manifest, releases_dir
from cairn.plan.graph import Plan
from cairn.plan.planner import PlanStage, plan_release
from cairn.plan.probe import Host, probe_host
from cairn.sources.fetch import path_digest


def resolve_manifest_path(arg: str | None) -> Path:
    """A path, or a bare release name looked up in ``manifests/releases/`` (``rocm-7.14.0``)."""
    if not arg:
        return default_manifest()
    path = Path(arg)
    if path.exists():
        return path
    named = releases_dir() / f"{arg.removesuffix('.toml')}.toml"
    if named.exists():
        return named
    known = ", ".join(sorted(p.stem for p in releases_dir().glob("*.toml")))
    raise InputError(arg, "no such manifest", f"give a path or one of: {known}")


def load(arg: str | None) -> tuple[Manifest, Registry]:
    registry = load_registry()
    return load_manifest(resolve_manifest_path(arg), registry), registry


def host_for(manifest: Manifest, store: Path | None = None) -> Host:
    """The one snapshot of the host planning reads: tools, services, apt and archive versions, the mirror."""
    urls = [str(c.source.get("url")) for c in manifest.components if c.source.kind in ("git", "archive")]
    debs = [c.source for c in manifest.components if c.source.kind == "deb"] + [g.source for g in manifest.grafts]
    host_apt = [str(s.get("package")) for s in debs if not s.get("suite")] + list(_base_pins_apt_checks(manifest))
    suite_pins = [(str(s.get("suite")), str(s.get("package"))) for s in debs if s.get("suite")]
    wanted = [str(s.get("sha256")) for s in debs if s.get("suite") and s.get("sha256")]
    return probe_host(urls, host_apt, suite_pins, store, wanted)


def _base_pins_apt_checks(manifest: Manifest) -> list[str]:
    """The image base's pinned packages when this host's apt can vouch for them (a bookworm base; a sid base
    is checked against the rootfs it produces instead): the images stage reads their versions from the snapshot."""
    try:
        base = load_base(name=manifest.release.base)
    except Exception:  # a broken recipe is reported by the images stage, which loads it again
        return []
    return sorted(base.pins()) if base.check_valid_until and not base.suites else []


def make_plan(manifest: Manifest, registry: Registry, families: list[str] | None = None, host: Host | None = None,
              *, stages: Sequence[PlanStage], store: Path | None = None) -> Plan:
    """The plan for ``families`` (default: the release's), each checked first (:func:`check_families`); a target
    chosen instead of its family gets a first note saying what the selection leaves out."""
    notes = check_families(manifest, registry, families or ())
    paths = {str(c.source.get("dir")): path_digest(str(c.source.get("dir"))) for c in manifest.components if c.source.kind == "path"}
    plan = plan_release(manifest, registry, host or host_for(manifest, store), tuple(families or ()), paths, stages=stages)
    return replace(plan, notes=(*notes, *plan.notes)) if notes else plan


def check_families(manifest: Manifest, registry: Registry, families: list[str] | tuple[str, ...]) -> list[str]:
    """Each ``--family`` must be one of the release's families or name only targets they build (a target is a
    family of itself): anything else is one line with the closest name, before any planning. Returns one note
    per target-instead-of-family selection, naming what it leaves out — ``--family gfx1100`` plans gfx1100 alone,
    without gfx1101, gfx1102 and what the release builds for the whole family only (llama.cpp)."""
    release = manifest.release
    members = {t: fam for fam in release.families for t in registry.expand(fam)}
    known = sorted({*release.families, *members})
    notes = []
    for chosen in families:
        if chosen in release.families:
            continue
        if not registry.is_family(chosen):
            longer = [name for name in release.families if name.startswith(chosen)]  # gfx110X: gfx110X-dgpu, not gfx1102
            hint = f"did you mean '{longer[0]}'?" if len(longer) == 1 else did_you_mean(chosen, known, "families and targets")
            raise InputError("--family", f"unknown gfx family '{chosen}'", hint)
        outside = [t for t in registry.expand(chosen) if t not in members]
        if outside:
            raise InputError("--family", f"{chosen} is not built by {release.name} {release.version} (none of its families "
                             f"holds {', '.join(outside)})", f"use one of its families: {', '.join(release.families)}")
        parents = sorted({members[t] for t in registry.expand(chosen)} - set(families))
        notes += [note for parent in parents if (note := _left_out(manifest, registry, chosen, parent))]
    return notes


def _left_out(manifest: Manifest, registry: Registry, chosen: str, family: str) -> str:
    """The one line for ``--family chosen`` where ``chosen`` is part of the release family ``family`` ("" when it
    leaves nothing out: gfx942 is all of gfx94X-dcgpu)."""
    others = [t for t in registry.expand(family) if t not in registry.expand(chosen)]
    recompiled = []  # a component whose family build uses a generic code object is compiled for the target alone
    for comp in manifest.components:
        chosen_targets = comp.build.arg("family_targets") if comp.build.target_specific else None
        generic = dict(chosen_targets).get(family) if chosen_targets is not None else None
        if generic:
            recompiled.append(f"{comp.name} is compiled for {chosen} alone, not the family's {generic}")
    parts = [", ".join(others)] if others else []
    if not parts and not recompiled:
        return ""
    what = f"this plan leaves out {parts[0]}" if parts else ""
    what = "; ".join(w for w in (what, *recompiled) if w)
    return f"--family {chosen} is part of the release's family {family}: {what} — give --family {family} for the family"
