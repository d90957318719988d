"""What ``cairn pins check`` finds for each deb pin of a manifest: pure, given the archive's indexes.

A pin is *current* when its suite still serves exactly that version with that sha256, *stale* when the suite
now serves another version (the pin still builds from the source mirror until it is refreshed), *gone* when the
suite serves the package no more, and *mismatch* when the suite serves the pinned version with other bytes —
never refreshed silently: somebody must look at why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from cairn.model.manifest import Manifest
from cairn.sources.debian import DebEntry, newest


@dataclass(frozen=True)
class PinStatus:
    component: str
    package: str
    suite: str
    pinned: str
    sha256: str
    status: str  # current | stale | gone | mismatch
    offered: str = ""  # newest version the suite serves now ("" when none)
    offered_sha256: str = ""
    declared_targets: tuple[str, ...] = ()  # the archive's X-Rocm-Gpu-Architecture for the pinned version

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "declared_targets": list(self.declared_targets)}


def check_pins(manifest: Manifest, index_of: Callable[[str], Mapping[str, list[DebEntry]]]) -> list[PinStatus]:
    """Every suite-pinned deb of ``manifest`` against ``index_of(suite)`` (host-fetched, passed in)."""
    results = []
    pinned = [(comp.name, comp.source) for comp in manifest.components]
    pinned += [(f"graft:{g.package}", g.source) for g in manifest.grafts]  # what the SDK wheels carry
    for name, source in pinned:
        if source.kind != "deb" or not source.get("suite"):
            continue
        package, version, sha256, suite = (source.get(k) for k in ("package", "version", "sha256", "suite"))
        entries = index_of(suite).get(package, [])
        best = newest(entries) if entries else None
        exact = next((e for e in entries if e.version == version), None)
        if exact is not None and exact.sha256 != sha256:
            status = "mismatch"
        elif exact is not None and best is not None and best.version == version:
            status = "current"
        elif best is not None:
            status = "stale"
        else:
            status = "gone"
        results.append(PinStatus(
            component=name, package=package, suite=suite, pinned=version, sha256=sha256, status=status,
            offered=best.version if best else "", offered_sha256=best.sha256 if best else "",
            declared_targets=exact.gpu_archs if exact else (),
        ))
    return results
