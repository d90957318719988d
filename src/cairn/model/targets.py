"""The gfx target registry (``manifests/targets.toml``) and the one API every stage uses for targets.

Answers four questions: which targets does a family hold, which families hold a target, what is a target
ID made of (``gfx90a:sramecc+:xnack-``), and can a code object built for X run on a device Y — by exact
processor with compatible features, by an LLVM generic target that contains the device, or by SPIR-V.
No other module may spell out a list of gfx names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from cairn.errors import ManifestError, did_you_mean
from cairn.model.reader import Field, Reader, Section, Table
from cairn.paths import manifests_dir

FEATURES = ("sramecc", "xnack")
SPIRV_PROCESSOR = "amdgcnspirv"
_ID_RE = re.compile(r"^(?P<proc>gfx[0-9a-z]+(?:-[0-9]+)*(?:-generic)?|amdgcnspirv)(?P<feats>(?::[a-z0-9]+[+-])*)$")


@dataclass(frozen=True, order=True)
class TargetId:
    """A processor plus pinned features; an absent feature means "any setting"."""

    processor: str
    features: tuple[tuple[str, bool], ...] = ()

    @classmethod
    def parse(cls, text: str) -> TargetId:
        """Parse ``gfx90a:xnack-:sramecc+`` (any feature order); raises ValueError on bad syntax."""
        match = _ID_RE.match(text.strip())
        if not match:
            raise ValueError(f"'{text}' is not a target ID (expected e.g. gfx90a or gfx90a:sramecc+:xnack-)")
        pinned: dict[str, bool] = {}
        for part in match["feats"].split(":")[1:]:
            name, sign = part[:-1], part[-1] == "+"
            if name not in FEATURES:
                raise ValueError(f"'{text}': unknown target feature '{name}' (known: {', '.join(FEATURES)})")
            if name in pinned:
                raise ValueError(f"'{text}': feature '{name}' given twice")
            pinned[name] = sign
        return cls(match["proc"], tuple(sorted(pinned.items())))

    def feature(self, name: str) -> bool | None:
        return dict(self.features).get(name)

    def __str__(self) -> str:
        return self.processor + "".join(f":{name}{'+' if on else '-'}" for name, on in self.features)


@dataclass(frozen=True)
class Target:
    """A GPU target Cairn can ship for."""

    name: str
    products: tuple[str, ...]
    mach: int
    kfd_version: int
    features: tuple[str, ...]
    generic: str | None
    exclude_projects: tuple[str, ...]

    @property
    def override_version(self) -> str:
        """The ``HSA_OVERRIDE_GFX_VERSION`` spelling (decimal major.minor.stepping)."""
        major, rest = divmod(self.kfd_version, 10000)
        minor, stepping = divmod(rest, 100)
        return f"{major}.{minor}.{stepping}"


@dataclass(frozen=True)
class Generic:
    """An LLVM generic processor: one code object for every member."""

    name: str
    mach: int
    features: tuple[str, ...]
    members: tuple[str, ...]


@dataclass(frozen=True)
class Match:
    """Why a code object runs on a device: ``via`` is "exact", a generic target name, or "spirv"."""

    code_object: TargetId
    via: str


@dataclass(frozen=True)
class Registry:
    """Everything in ``targets.toml``, validated."""

    path: Path
    targets: dict[str, Target]
    families: dict[str, tuple[str, ...]]
    generics: dict[str, Generic]
    processors: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    kernel_minimums: dict[str, str] = field(default_factory=dict)  # target or family name → oldest kernel release

    # -- names -------------------------------------------------------------
    def family_names(self) -> list[str]:
        """Every family, the implicit one-target families included."""
        return sorted(set(self.families) | set(self.targets))

    def is_family(self, name: str) -> bool:
        return name in self.families or name in self.targets

    def expand(self, family: str) -> tuple[str, ...]:
        """Targets of a family (a target name is a family of itself); KeyError with a hint otherwise."""
        if family in self.families:
            return self.families[family]
        if family in self.targets:
            return (family,)
        raise KeyError(f"unknown gfx family '{family}' — {did_you_mean(family, self.family_names(), 'families')}")

    def expand_all(self, families: list[str] | tuple[str, ...]) -> tuple[str, ...]:
        """Union of several families, in registry order, without repeats."""
        wanted = {t for fam in families for t in self.expand(fam)}
        return tuple(t for t in self.targets if t in wanted)

    def families_of(self, target: str) -> tuple[str, ...]:
        """Every family holding ``target``, itself first."""
        self.target(target)
        return (target, *sorted(name for name, members in self.families.items() if target in members))

    def min_kernel(self, target: str) -> tuple[str, str]:
        """(kernel release, the target or family declaring it): the highest minimum any family holding
        ``target`` declares; ("", "") when none does."""
        declared = [(self.kernel_minimums[name], name) for name in self.families_of(target) if name in self.kernel_minimums]
        return max(declared, key=lambda pair: kernel_key(pair[0])) if declared else ("", "")

    def target(self, name: str) -> Target:
        if name not in self.targets:
            raise KeyError(f"unknown gfx target '{name}' — {did_you_mean(name, self.targets, 'targets')}")
        return self.targets[name]

    def targets_for_project(self, family: str, project: str) -> tuple[str, ...]:
        """A family's targets minus those that exclude ``project`` (e.g. no hipBLASLt on gfx103X)."""
        return tuple(t for t in self.expand(family) if project not in self.targets[t].exclude_projects)

    def known_processor(self, name: str) -> bool:
        return name in self.targets or name in self.generics or name in self.processors or name == SPIRV_PROCESSOR

    def processor_features(self, name: str) -> tuple[str, ...]:
        if name in self.targets:
            return self.targets[name].features
        if name in self.generics:
            return self.generics[name].features
        if name in self.processors:
            return self.processors[name][1]
        return ()

    # -- target IDs -----------------------------------------------------------
    def parse_target_id(self, text: str) -> TargetId:
        """Parse and check a target ID against the registry; ValueError names the fix."""
        tid = TargetId.parse(text)
        if not self.known_processor(tid.processor):
            known = [*self.targets, *self.generics, *self.processors]
            raise ValueError(f"unknown gfx target '{tid.processor}' — {did_you_mean(tid.processor, known, 'targets')}")
        supported = self.processor_features(tid.processor)
        for name, _ in tid.features:
            if name not in supported:
                raise ValueError(f"'{text}': {tid.processor} has no '{name}' feature (it supports: {', '.join(supported) or 'none'})")
        return tid

    # -- machine values -----------------------------------------------------
    def name_for_mach(self, mach: int) -> str | None:
        """Processor name for an ELF ``EF_AMDGPU_MACH`` value (targets, generics and other processors)."""
        for name, target in self.targets.items():
            if target.mach == mach:
                return name
        for name, generic in self.generics.items():
            if generic.mach == mach:
                return name
        for name, (value, _) in self.processors.items():
            if value == mach:
                return name
        return None

    def target_for_kfd_version(self, version: int) -> Target | None:
        """The target a KFD node reports as ``gfx_target_version`` (e.g. 90010 → gfx90a)."""
        return next((t for t in self.targets.values() if t.kfd_version == version), None)

    # -- compatibility ------------------------------------------------------
    def can_run(self, code_object: TargetId | str, device: TargetId | str) -> Match | None:
        """Whether a code object built for ``code_object`` runs on ``device`` (clang's compatibility rule).

        Same processor: every feature the code object pins must be pinned the same way by the device, or
        left open by the device (a bare ``gfx90a`` query accepts either setting). Generic: the device's
        processor is a member of the generic target, with the same feature rule. SPIR-V runs everywhere
        (comgr compiles it at load time).
        """
        co = code_object if isinstance(code_object, TargetId) else TargetId.parse(code_object)
        dev = device if isinstance(device, TargetId) else TargetId.parse(device)
        if co.processor == SPIRV_PROCESSOR:
            return Match(co, "spirv")
        if not _features_compatible(co, dev):
            return None
        if co.processor == dev.processor:
            return Match(co, "exact")
        generic = self.generics.get(co.processor)
        if generic and dev.processor in generic.members:
            return Match(co, generic.name)
        return None


def kernel_key(release: str) -> tuple[int, ...]:
    """``6.14.4-300.fc42.x86_64`` → (6, 14, 4): the numeric head of a kernel release, for comparing."""
    match = re.match(r"^(\d+(?:\.\d+)*)", release.strip())
    return tuple(int(p) for p in match[1].split(".")) if match else ()


def _features_compatible(co: TargetId, dev: TargetId) -> bool:
    device_features = dict(dev.features)
    return all(not (name in device_features and device_features[name] != on) for name, on in co.features)


# -- loading -------------------------------------------------------------------
_FEATURES_DOC = "target features the processor supports: " + ", ".join(FEATURES)
_MIN_KERNEL_DOC = "oldest Linux kernel release ROCm works on for it (e.g. 6.18.4); cite the source in a comment"
TARGET = Table({
    "name": Field("string", required=True, doc="the processor name, e.g. gfx90a"),
    "products": Field("strings"),
    "mach": Field("integer", required=True, doc="ELF EF_AMDGPU_MACH value"),
    "kfd_version": Field("integer", required=True, doc="gfx_target_version the KFD reports, e.g. 90010"),
    "features": Field("strings", doc=_FEATURES_DOC),
    "generic": Field("string", doc="the LLVM generic target holding it"),
    "exclude_projects": Field("strings", doc="sub-projects not built for this target"),
    "min_kernel": Field("string", doc=_MIN_KERNEL_DOC),
})
GENERIC = Table({
    "name": Field("string", required=True), "mach": Field("integer", required=True),
    "features": Field("strings", doc=_FEATURES_DOC), "members": Field("strings", required=True),
})
PROCESSOR = Table({
    "name": Field("string", required=True), "mach": Field("integer", required=True),
    "features": Field("strings", doc=_FEATURES_DOC), "generic": Field("string"),
})
FAMILY = Table({"targets": Field("strings", required=True, doc="targets of the family, each a [[target]] name"),
                "min_kernel": Field("string", doc=_MIN_KERNEL_DOC)})
REGISTRY = Table({
    "target": Field("tables", table=TARGET),
    "family": Field("table", table=Table(values=Field("table", table=FAMILY)), doc="family name -> its targets"),
    "generic": Field("tables", table=GENERIC),
    "processor": Field("tables", table=PROCESSOR, doc="other processors code objects may be built for"),
}, doc="The Cairn gfx target registry (manifests/targets.toml)")


@cache
def load_registry(path: Path | None = None) -> Registry:
    """Load and validate the registry; every mistake is a ManifestError at ``file:line:col``."""
    if path is None:
        path = manifests_dir() / "targets.toml"
    return _build(Reader.load(path))


def _build(reader: Reader) -> Registry:
    doc = reader.doc
    data = reader.root(REGISTRY)
    targets: dict[str, Target] = {}
    for raw in data.tables("target"):
        name = raw.get("name")
        if not isinstance(name, str) or name in targets:
            raise ManifestError(doc.where(raw.keypath), f"target name missing or repeated: {name!r}", "give each [[target]] a unique name")
        targets[name] = Target(
            name=name,
            products=raw.strings("products"),
            mach=raw.integer("mach"),
            kfd_version=raw.integer("kfd_version"),
            features=raw.strings("features"),
            generic=raw.string("generic") if "generic" in raw else None,
            exclude_projects=raw.strings("exclude_projects"),
        )
    generics: dict[str, Generic] = {}
    for raw in data.tables("generic"):
        generics[raw.string("name")] = Generic(raw.string("name"), raw.integer("mach"), raw.strings("features"), raw.strings("members"))
    processors: dict[str, tuple[int, tuple[str, ...]]] = {}
    for raw in data.tables("processor"):
        processors[raw.string("name")] = (raw.integer("mach"), raw.strings("features"))
        raw.string("generic")  # not used yet, but a wrong type is as wrong here as on a [[target]]
    minimums: dict[str, str] = {}
    for raw in data.tables("target"):
        if "min_kernel" in raw:
            minimums[raw.string("name")] = _kernel_release(raw)
    families: dict[str, tuple[str, ...]] = {}
    family_table = data.table("family")
    for fam in family_table:
        raw = family_table.table(fam)
        if "min_kernel" in raw:
            minimums[fam] = _kernel_release(raw)
        for n, member in enumerate(raw.strings("targets")):
            if member not in targets:
                raise ManifestError(doc.where(("family", fam, "targets", n)), f"family '{fam}' lists unknown target '{member}'", did_you_mean(member, targets, "targets"))
        if fam in targets:
            raise ManifestError(doc.where(("family", fam)), f"family '{fam}' shadows the target of that name", "every target is already a family of itself; rename the family")
        families[fam] = tuple(t for t in targets if t in raw.strings("targets"))
    for name, target in targets.items():
        if target.generic and target.generic not in generics:
            raise ManifestError(doc.where(("target",)), f"target '{name}' names unknown generic '{target.generic}'", did_you_mean(target.generic, generics, "generics"))
        for feature in target.features:
            if feature not in FEATURES:
                raise ManifestError(doc.where(("target",)), f"target '{name}' has unknown feature '{feature}'", f"use {' or '.join(FEATURES)}")
    return Registry(doc.path, targets, families, generics, processors, minimums)


def _kernel_release(raw: Section) -> str:
    """A table's ``min_kernel``, checked: ``major.minor[.patch]``."""
    text = raw.string("min_kernel")
    if not re.match(r"^\d+\.\d+(\.\d+)?$", text):
        raise raw.fail(("min_kernel",), f"min_kernel '{text}' is not a kernel release", "write major.minor[.patch], e.g. 6.18.4")
    return text

