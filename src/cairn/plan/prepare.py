"""From command-line arguments to a Plan: load the manifest, probe the host, resolve the graph.

Shared by ``cairn plan`` and ``cairn build`` so both always show and run the same graph.
"""

from __future__ import annotations

from pathlib import Path

from cairn.errors import InputError
from cairn.model.manifest import Manifest, load_manifest
from cairn.model.targets import Registry, load_registry
from cairn.paths import default_manifest, releases_dir
from cairn.plan.graph import Plan
from cairn.plan.planner import plan_release
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
    debs = [c.source for c in manifest.components if c.source.kind == "deb"]
    host_apt = [str(s.get("package")) for s in debs if not s.get("suite")] + list(_base_pins_apt_checks(manifest))
    suite_pins = [(str(s.get("suite")), str(s.get("package"))) for s in debs if s.get("suite")]
    wanted = [str(s.get("sha256")) for s in debs if s.get("suite") and s.get("sha256")]
    return probe_host(urls, host_apt, suite_pins, store, wanted)


def _base_pins_apt_checks(manifest: Manifest) -> list[str]:
    """The image base's pinned packages when this host's apt can vouch for them (a bookworm base; a sid base
    is checked against the rootfs it produces instead): the images stage reads their versions from the snapshot."""
    from cairn.model.image_recipes import load_base

    try:
        base = load_base(name=manifest.release.base)
    except Exception:  # a broken recipe is reported by the images stage, which loads it again
        return []
    return sorted(base.pins()) if base.check_valid_until and not base.suites else []


def make_plan(manifest: Manifest, registry: Registry, families: list[str] | None = None, host: Host | None = None,
              stages: list[str] | None = None, store: Path | None = None) -> Plan:
    for fam in families or ():
        if not registry.is_family(fam):
            try:
                registry.expand(fam)
            except KeyError as exc:
                raise InputError("--family", str(exc.args[0]).split(" — ")[0], str(exc.args[0]).split(" — ")[-1]) from None
    paths = {str(c.source.get("dir")): path_digest(str(c.source.get("dir"))) for c in manifest.components if c.source.kind == "path"}
    return plan_release(manifest, registry, host or host_for(manifest, store), tuple(families or ()), paths, stages)
