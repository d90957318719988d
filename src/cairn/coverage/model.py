"""Per-component and per-release coverage records: pure data, computed from audits, compared with labels.

A component's *measured* targets are those every bundle of every one of its libraries carries (a target
one bundle lacks fails at the first kernel from that bundle), intersected with the targets of its per-target
data files (rocBLAS's Tensile kernels, hipBLASLt's) when it ships any. Debian's ``X-Rocm-Gpu-Architecture``
is the *declared* set; any difference between the two is reported, never silently trusted either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.model.targets import Registry, TargetId

SCHEMA = "cairn.coverage/v1"
_DATA_TARGET = re.compile(r"(gfx[0-9a-f]{3,4}(?:-generic)?|gfx[0-9]+-[0-9]+-generic)")


def data_file_target(name: str) -> str | None:
    """``Kernels.so-000-gfx1100.hsaco`` → ``gfx1100``; None when the name names no target."""
    match = _DATA_TARGET.search(name)
    return match[1] if match else None


@dataclass(frozen=True)
class ComponentCoverage:
    component: str
    package: str
    declared: tuple[str, ...]  # the archive's label ("" when the package states none)
    libraries: Mapping[str, tuple[str, ...]]  # device-code library -> targets in every bundle
    data_targets: tuple[str, ...] = ()  # targets of per-target data files (Tensile kernels), () when none
    notes: tuple[str, ...] = field(default=())

    @property
    def has_device_code(self) -> bool:
        return bool(self.libraries) or bool(self.data_targets)

    def covers(self, target: str, registry: Registry) -> list[str]:
        """The libraries (or data files) of this component that cannot run on ``target`` (empty: covered)."""
        device = TargetId.parse(target)
        missing = [lib for lib, targets in sorted(self.libraries.items())
                   if not any(registry.can_run(TargetId.parse(t), device) for t in targets)]
        if self.data_targets and not any(registry.can_run(TargetId.parse(t), device) for t in self.data_targets):
            missing.append(f"{self.component} per-target kernel files")
        return missing

    def measured(self, registry: Registry, candidates: Iterable[str]) -> tuple[str, ...]:
        """Which of ``candidates`` (gfx targets) every library and data file of the component covers."""
        return tuple(t for t in candidates if not self.covers(t, registry))

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "component": self.component, "package": self.package,
                "declared": list(self.declared), "libraries": {k: list(v) for k, v in sorted(self.libraries.items())},
                "data_targets": list(self.data_targets), "notes": list(self.notes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ComponentCoverage:
        return cls(component=data["component"], package=data["package"], declared=tuple(data["declared"]),
                   libraries={k: tuple(v) for k, v in data["libraries"].items()},
                   data_targets=tuple(data["data_targets"]), notes=tuple(data.get("notes", ())))


def label_differences(cov: ComponentCoverage, registry: Registry) -> dict[str, list[str]]:
    """Declared-but-not-measured and measured-but-not-declared targets (only for shipped targets)."""
    if not cov.declared:
        return {}
    if not cov.has_device_code:
        return {"declared_but_no_device_code": sorted(cov.declared)}
    shipped = list(registry.targets)
    measured = set(cov.measured(registry, shipped))
    declared = {t for t in cov.declared if t in shipped}
    gaps = {"declared_not_measured": sorted(declared - measured), "measured_not_declared": sorted(measured - declared)}
    return {k: v for k, v in gaps.items() if v}


def release_coverage(components: Iterable[ComponentCoverage], families: Mapping[str, tuple[str, ...]],
                     registry: Registry) -> dict[str, Any]:
    """Per family and target: is every library of the release able to run there, and if not, which misses."""
    components = list(components)
    comps = [c for c in components if c.has_device_code]
    result: dict[str, Any] = {"schema": SCHEMA, "families": {}, "labels": {}}
    for family, targets in families.items():
        per_target = {}
        for target in targets:
            missing = sorted(f"{c.component}: {lib}" for c in comps for lib in c.covers(target, registry))
            per_target[target] = {"complete": not missing, "missing": missing}
        result["families"][family] = {"complete": all(v["complete"] for v in per_target.values()),
                                      "targets": per_target}
    for comp in components:
        diff = label_differences(comp, registry)
        if diff:
            result["labels"][comp.component] = {"package": comp.package, **diff}
    return result
