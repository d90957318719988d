"""Release manifests (``manifests/releases/*.toml``): the typed model and its strict loader.

A manifest pins everything a release is made of. The loader rejects, with ``file:line:col: what — fix``:
unknown keys (with the closest valid one), floating refs (branch or tag names, short hashes, missing
sha256), unknown gfx targets or families, duplicate components, missing dependencies, dependency cycles
and bad versions. The schema is documented in ``docs/manifests.md``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from packaging.version import InvalidVersion, Version

from cairn.errors import Location, ManifestError, did_you_mean
from cairn.model import tomlpos
from cairn.model.reader import Field, Reader, Section, Table
from cairn.model.targets import Registry, load_registry
from cairn.names import safe_name

CHANNELS = ("dev", "nightly", "prerelease", "stable")
SOURCE_KINDS = ("git", "archive", "deb", "pypi", "path")
BUILD_KINDS = ("deb-unpack", "hip", "cmake", "copy", "wheel-unpack")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX128 = re.compile(r"^[0-9a-f]{128}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_DEB_VERSION = re.compile(r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")

_SOURCE_FIELDS: dict[str, tuple[set[str], set[str]]] = {  # kind -> (required, optional)
    "git": ({"url", "commit"}, {"subdir", "ref"}),
    "archive": ({"url"}, {"sha256", "sha512", "strip"}),
    "deb": ({"package", "version", "sha256"}, {"apt_source", "arch", "suite"}),
    "pypi": ({"name", "version", "filename", "sha256"}, set()),
    "path": ({"dir"}, set()),
}


@dataclass(frozen=True)
class Source:
    """Where a component's bytes come from, with the pin that proves them."""

    kind: str
    fields: tuple[tuple[str, Any], ...]

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.fields).get(key, default)

    @property
    def identity(self) -> str:
        """One stable string per distinct input, so two components sharing a checkout share its fetch."""
        f = dict(self.fields)
        if self.kind == "git":
            return f"git:{f['url']}@{f.get('commit', '?')}"
        if self.kind == "archive":
            return f"archive:{f.get('sha256') or f.get('sha512') or f['url']}"
        if self.kind == "deb":
            return f"deb:{f['package']}={f['version']}"
        if self.kind == "pypi":
            return f"pypi:{f['filename']}"
        return f"path:{f['dir']}"

    def as_dict(self) -> dict[str, Any]:
        return {self.kind: dict(self.fields)}


@dataclass(frozen=True)
class Build:
    kind: str
    args: tuple[tuple[str, Any], ...] = ()

    def arg(self, key: str, default: Any = None) -> Any:
        return dict(self.args).get(key, default)

    @property
    def target_specific(self) -> bool:
        """Builds that compile device code run once per gfx family."""
        return self.kind in ("hip",) or bool(self.arg("per_family", False))


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    sdk: str  # "core" or "expansion.<name>"
    source: Source
    build: Build
    depends: tuple[str, ...] = ()
    exclude_targets: tuple[str, ...] = ()
    project: str = ""  # the upstream sub-project name that targets.toml exclusions refer to
    pin_unknown: str = ""  # set when no pin is known: the plan reports it, the build refuses it
    description: str = ""
    # an engine's run-time Python requirements, every wheel by sha256 (``requirements = [{ name, version, filename,
    # sha256 }]``): mirrored into each index that serves the engine's wheel, which then installs by itself
    requirements: tuple[Source, ...] = ()
    requirements_where: Location | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Framework:
    """``[frameworks.<name>]``: a recipe, its version and the pin of what it is built from (or why none is known).

    ``source`` is the upstream input the recipe's version builds or mirrors — a PyPI sdist or wheel by
    sha256, a git commit; ``pin_unknown`` says why there is none. The wheels stage checks the recipe's version
    pins exactly this input, so the release manifest alone names everything a release is made of.
    """

    name: str
    recipe: str
    version: str
    source: Source | None = None
    pin_unknown: str = ""
    where: Location | None = field(default=None, compare=False, repr=False)  # of its pin, for later errors
    files: tuple[Source, ...] = ()  # a mirror's every wheel (``files = [{ name, version, filename, sha256 }]``)


@dataclass(frozen=True)
class Graft:
    """``[[wheels.graft]]``: a Debian package whose shared libraries the SDK wheels carry (under mangled
    sonames) because no manylinux host is required to have them; ``wheel`` is the one wheel that carries them
    (``core``, or ``libraries``: every family's libraries wheel). A release input like any other deb."""

    source: Source  # kind "deb", pinned by version, sha256 and suite
    wheel: str

    @property
    def package(self) -> str:
        return str(self.source.get("package"))


@dataclass(frozen=True)
class SymbolVersion:
    """``[[wheels.symbol_version]]``: a reviewed rewrite of one version requirement of a prebuilt library
    (``file``, its soname) to an older, behaviour-equivalent version, so one symbol does not raise a wheel's tag."""

    file: str
    library: str
    version: str
    to: str
    symbols: tuple[str, ...]
    why: str
    rename: tuple[tuple[str, str], ...] = ()  # (symbol, new name): a fortified call made the plain one it checks

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"file": self.file, "library": self.library, "version": self.version, "to": self.to,
                                 "symbols": list(self.symbols), "why": self.why}
        if self.rename:  # only then: an entry without renames keeps the key it had
            entry["rename"] = dict(self.rename)
        return entry


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    channel: str
    source_date_epoch: int
    base_os: str
    families: tuple[str, ...]
    python: tuple[str, ...] = ("3.11",)
    description: str = ""
    toolchain: str = ""  # rootfs recipe of the build image compiles run in ("" = the host's toolchain)
    base: str = "base"  # rootfs recipe every image of the release starts FROM


@dataclass(frozen=True)
class Manifest:
    path: Path
    release: Release
    components: tuple[Component, ...]
    sdks: dict[str, str]  # sdk id -> description
    frameworks: tuple[Framework, ...]
    gates: dict[str, tuple[str, ...]] = field(default_factory=dict)  # channel -> required gate names
    data: dict[str, Any] = field(default_factory=dict)
    # (sdk id, component, reason): what an SDK would hold but this release's sources cannot provide
    unavailable: tuple[tuple[str, str, str], ...] = ()
    glibc_floor: str = ""  # [wheels] glibc_floor: the newest glibc our own compiles may need ("" = unchecked)
    grafts: tuple[Graft, ...] = ()  # [[wheels.graft]]
    symbol_versions: tuple[SymbolVersion, ...] = ()  # [[wheels.symbol_version]]

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON of the parsed manifest: names exactly one set of pins."""
        return hashlib.sha256(canonical_json(self.data).encode()).hexdigest()

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def targets(self, registry: Registry) -> tuple[str, ...]:
        return registry.expand_all(self.release.families)

    def embedded(self) -> dict[str, Any]:
        """What every built artifact carries as ``share/cairn/manifest.json``."""
        return {"schema": "cairn.manifest/v1", "file": self.path.name, "sha256": self.digest, "manifest": self.data}


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


# -- the declared tables -----------------------------------------------------------------------------------
FRAMEWORK_SOURCE_KINDS = ("pypi", "git", "archive")
_PIN_KEYS = ("commit", "sha256")  # required, unless pin_unknown says why no pin is known
_SOURCE_TYPES = {"strip": "integer"}  # every other source field is a string

SOURCE_TABLES = {
    kind: Table({key: Field(_SOURCE_TYPES.get(key, "string"), required=key in required and key not in _PIN_KEYS)
                 for key in sorted(required | optional)}, what=f"source.{kind}")
    for kind, (required, optional) in _SOURCE_FIELDS.items()
}
SOURCE = Table({kind: Field("table", table=SOURCE_TABLES[kind]) for kind in SOURCE_KINDS}, one_of=True,
               doc="where the bytes come from, with the pin that proves them: exactly one kind")
_NAME_RE = _NAME.pattern
RELEASE = Table({
    "name": Field("string", required=True, nonempty=True),
    "version": Field("string", required=True, nonempty=True, doc="PEP 440 version of the release"),
    "channel": Field("string", required=True, nonempty=True, enum=CHANNELS),
    "source_date_epoch": Field("integer", required=True, minimum=315532800, doc="Unix time every timestamp is clamped to",
                               error=("source_date_epoch must be an integer Unix time ≥ 315532800 (1980, the zip epoch)",
                                      "set it to the release's commit time, e.g. 1752537600")),
    "base_os": Field("string", required=True, nonempty=True),
    "families": Field("strings", required=True, doc="gfx families of manifests/targets.toml"),
    "python": Field("strings", doc='Python versions, e.g. "3.11"'),
    "description": Field("string", nonempty=True),
    "toolchain": Field("string", nonempty=True, pattern=_NAME_RE, doc="rootfs recipe of the build image"),
    "base": Field("string", nonempty=True, pattern=_NAME_RE, doc="rootfs recipe every image starts FROM"),
}, what="[release]")
BUILD = Table({
    "kind": Field("string", required=True, nonempty=True, enum=BUILD_KINDS),
    "args": Field("table", table=Table(values=Field("any"))),
}, what="build")
FILE = Table(SOURCE_TABLES["pypi"].fields)
COMPONENT = Table({
    "name": Field("string", required=True, nonempty=True, pattern=_NAME_RE),
    "version": Field("string", required=True, nonempty=True),
    "source": Field("table", required=True, table=SOURCE),
    "build": Field("table", table=BUILD, doc='default { kind = "copy" }'),
    "depends": Field("strings", doc="components this one is built against"),
    "exclude_targets": Field("strings", doc="gfx targets or families this component is not built for"),
    "project": Field("string", nonempty=True, doc="upstream sub-project name targets.toml exclusions refer to"),
    "pin_unknown": Field("string", nonempty=True, doc="why no pin is known (the build refuses the component)"),
    "description": Field("string", nonempty=True),
    "requirements": Field("tables", table=FILE, doc="an engine's run-time requirements, each wheel by sha256 (its recipe mirrors the same)"),
}, what="a component")
SDK = Table({
    "description": Field("string", nonempty=True),
    "components": Field("tables", table=COMPONENT),
    "unavailable": Field("table", table=Table(values=Field("string", nonempty=True)),
                         doc="component name -> why these sources cannot provide it"),
})
FRAMEWORK = Table({
    "recipe": Field("string", required=True, nonempty=True, doc="recipes/wheels/<recipe>.toml"),
    "version": Field("string", required=True, nonempty=True, doc="one of the recipe's versions"),
    "source": Field("table", table=SOURCE, doc="the upstream input this version builds or mirrors"),
    "pin_unknown": Field("string", nonempty=True),
    "files": Field("tables", table=FILE, doc="a mirror's every wheel, each by sha256 (replaces source)"),
})
GRAFT_WHEELS = ("core", "libraries")
GRAFT = Table({**SOURCE_TABLES["deb"].fields,
               "wheel": Field("string", required=True, enum=GRAFT_WHEELS, doc="the SDK wheel that carries its libraries")},
              what="[[wheels.graft]]")
SYMBOL_VERSION = Table({
    "file": Field("string", required=True, nonempty=True, doc="the library's soname, as the wheel ships it"),
    "library": Field("string", required=True, nonempty=True, doc="the library it asks (libm.so.6)"),
    "version": Field("string", required=True, nonempty=True, doc="the version it asks for (GLIBC_2.43)"),
    "to": Field("string", required=True, nonempty=True, doc="the older, behaviour-equivalent version (GLIBC_2.2.5)"),
    "symbols": Field("strings", required=True, doc="every symbol bound to that version (reviewed)"),
    "why": Field("string", required=True, nonempty=True, doc="why the two versions behave the same"),
    "rename": Field("table", table=Table(values=Field("string", nonempty=True), what="rename"),
                    doc="symbol → the plain call a fortified *_chk symbol checks (__inet_ntop_chk → inet_ntop)"),
}, what="[[wheels.symbol_version]]")
WHEELS = Table({
    "glibc_floor": Field("string", pattern=r"^2\.[0-9]+$",
                         doc="newest glibc (2.N) Cairn's own compiles may need; the build action checks every ELF"),
    "graft": Field("tables", table=GRAFT, doc="Debian packages whose libraries the SDK wheels carry (docs/wheels.md)"),
    "symbol_version": Field("tables", table=SYMBOL_VERSION, doc="reviewed symbol-version rewrites (docs/wheels.md)"),
}, what="[wheels]")
GATES = Table({"required": Field("table", table=Table({c: Field("strings") for c in CHANNELS}, what="[gates.required]"),
                                 doc="channel -> gates a release must pass")}, what="[gates]")
MANIFEST = Table({
    "release": Field("table", required=True, table=RELEASE),
    "core": Field("table", required=True, table=SDK, doc="the Core SDK"),
    "expansion": Field("table", table=Table(values=Field("table", table=SDK), what="[expansion]"), doc="expansion SDKs by name"),
    "frameworks": Field("table", table=Table(values=Field("table", table=FRAMEWORK), what="[frameworks]")),
    "gates": Field("table", table=GATES),
    "wheels": Field("table", table=WHEELS, doc="what the wheels carry and the glibc they may need"),
}, what="the manifest", doc="A Cairn release manifest (manifests/releases/*.toml)")


def load_manifest(path: Path, registry: Registry | None = None, text: str | None = None) -> Manifest:
    """Parse and validate a release manifest; the first problem found is raised as a ManifestError."""
    return _Loader(Reader.load(Path(path), text), registry or load_registry()).manifest()


class _Loader:
    def __init__(self, reader: Reader, registry: Registry) -> None:
        self.reader = reader
        self.doc = reader.doc
        self.registry = registry
        self.unavailable: list[tuple[str, str, str]] = []

    # -- helpers ----------------------------------------------------------------------------------
    def fail(self, keypath: tomlpos.KeyPath, what: str, fix: str) -> ManifestError:
        return self.reader.fail(keypath, what, fix)

    def pep440(self, value: str, keypath: tomlpos.KeyPath) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise self.fail(keypath, f"'{value}' is not a PEP 440 version", "use e.g. 7.14.0, 7.14.0rc1 or 7.14.0.dev0") from None
        return value

    # -- sections ------------------------------------------------------------------------------------
    def manifest(self) -> Manifest:
        data = self.reader.root(MANIFEST)
        if "release" not in data:
            raise self.fail((), "missing [release] table", "add [release] with name, version, channel, source_date_epoch, base_os, families")
        release = self.release(data.table("release"))
        sdks: dict[str, str] = {}
        components: list[Component] = []
        if "core" not in data:
            raise self.fail((), "missing [core] SDK", "add [[core.components]] entries")
        sdks["core"] = self.sdk(data.table("core", what="[core]"), "core", components)
        expansions = data.table("expansion")
        for name in expansions:
            if not _NAME.match(name):
                raise self.fail(("expansion", name), f"bad expansion name '{name}'", "use lower-case letters, digits and dashes")
            sdks[f"expansion.{name}"] = self.sdk(expansions.table(name, what=f"[expansion.{name}]"), f"expansion.{name}", components)
        self.check_graph(components)
        frameworks_table = data.table("frameworks")
        frameworks = tuple(self.framework(name, frameworks_table.table(name, what=f"[frameworks.{name}]")) for name in frameworks_table)
        gates = self.gates(data.table("gates"))
        floor, grafts = self.wheels(data.table("wheels"))
        rewrites = tuple(SymbolVersion(str(i["file"]), str(i["library"]), str(i["version"]), str(i["to"]),
                                       tuple(str(x) for x in i["symbols"]), str(i["why"]),
                                       tuple(sorted((str(k), str(v)) for k, v in (i.get("rename") or {}).items())))
                         for i in data.table("wheels").get("symbol_version", []) or [])
        return Manifest(self.doc.path, release, tuple(components), sdks, frameworks, gates, self.doc.data, tuple(self.unavailable),
                        floor, grafts, rewrites)

    def wheels(self, table: Section) -> tuple[str, tuple[Graft, ...]]:
        kp = table.keypath
        floor = table.string("glibc_floor")
        if floor and not re.match(r"^2\.[0-9]+$", floor):
            raise self.fail((*kp, "glibc_floor"), f"glibc_floor '{floor}' is not a glibc version", 'write it as "2.39"')
        grafts: list[Graft] = []
        for n, item in enumerate(table.get("graft", []) or []):
            where = (*kp, "graft", n)
            wheel = item.get("wheel") if isinstance(item, dict) else None
            if wheel not in GRAFT_WHEELS:
                raise self.fail((*where, "wheel"), f"graft {n}: wheel '{wheel}' is not an SDK wheel that grafts",
                                f"use one of {', '.join(GRAFT_WHEELS)}")
            fields = {k: v for k, v in item.items() if k != "wheel"}
            source = self.source({"deb": fields}, where, f"graft {fields.get('package')}", False)
            if not source.get("suite"):
                raise self.fail(where, f"graft {source.get('package')} names no suite",
                                'pin it from a suite\'s Packages index: suite = "sid" (cairn pins check reads it)')
            if any(g.package == source.get("package") for g in grafts):
                raise self.fail(where, f"graft {source.get('package')} is listed twice", "keep one entry")
            grafts.append(Graft(source, str(wheel)))
        return floor, tuple(grafts)

    def release(self, table: Section) -> Release:
        kp = table.keypath
        version = self.pep440(table.string("version"), (*kp, "version"))
        channel = table.string("channel")
        if channel not in CHANNELS:
            raise self.fail((*kp, "channel"), f"unknown channel '{channel}'", did_you_mean(channel, CHANNELS, "channels"))
        epoch = table.integer("source_date_epoch")
        families = table.strings("families") if "families" in table else ()
        if not families:
            raise self.fail((*kp, "families"), "no families to ship", 'list at least one, e.g. families = ["gfx90a"]')
        for n, fam in enumerate(families):
            if not self.registry.is_family(fam):
                raise self.fail((*kp, "families", n), f"unknown gfx family '{fam}'", did_you_mean(fam, self.registry.family_names(), "families"))
        python = table.strings("python") or ("3.11",)
        for n, py in enumerate(python):
            if not re.match(r"^3\.[0-9]+$", py):
                raise self.fail((*kp, "python", n), f"bad Python version '{py}'", 'write it as "3.11"')
        return Release(
            name=table.string("name"), version=version, channel=channel, source_date_epoch=epoch,
            base_os=table.string("base_os"), families=families, python=python,
            description=table.string("description"),
            toolchain=self.recipe_name(table, "toolchain"),
            base=self.recipe_name(table, "base") or "base",
        )

    def recipe_name(self, table: Section, key: str) -> str:
        """A rootfs recipe of recipes/containers/ (``toolchain``, ``base``): a plain name, never a path."""
        name = table.string(key)
        if name and not _NAME.match(name):
            raise table.fail((key,), f"{key} '{name}' is not a recipe name",
                             f'name a rootfs recipe of recipes/containers/, e.g. {key} = "toolchain-rocm7"')
        return name

    def sdk(self, table: Section, sdk_id: str, out: list[Component]) -> str:
        kp = table.keypath
        for comp in table.tables("components"):
            out.append(self.component(comp, sdk_id))
        missing = table.get("unavailable", {})
        if not isinstance(missing, dict) or not all(isinstance(v, str) and v for v in missing.values()):
            raise self.fail((*kp, "unavailable"), "unavailable must map component names to the reason",
                            'write unavailable = { rpp = "why it cannot be built from these sources" }')
        for comp_name, reason in missing.items():
            if not _NAME.match(comp_name):
                raise self.fail((*kp, "unavailable", comp_name), f"bad component name '{comp_name}'",
                                "use lower-case letters, digits, '.', '_' and '-'")
            self.unavailable.append((sdk_id, comp_name, reason))
        return table.string("description")

    def component(self, table: Section, sdk_id: str) -> Component:
        kp = table.keypath
        name = table.string("name")
        if not _NAME.match(name):
            raise self.fail((*kp, "name"), f"bad component name '{name}'", "use lower-case letters, digits, '.', '_' and '-'")
        pin_unknown = table.string("pin_unknown")
        version = table.string("version")
        if "source" not in table:
            raise self.fail(kp, f"component '{name}' has no source", "add source.<git|archive|deb|pypi|path> = { … }")
        source = self.source(table["source"], (*kp, "source"), name, bool(pin_unknown))
        build = self.build(table.table("build", default={"kind": "copy"}))
        excludes = table.strings("exclude_targets")
        for n, item in enumerate(excludes):
            if not self.registry.is_family(item):
                raise self.fail((*kp, "exclude_targets", n), f"unknown gfx target or family '{item}'",
                                did_you_mean(item, self.registry.family_names(), "targets"))
        return Component(
            name=name, version=version, sdk=sdk_id, source=source, build=build,
            depends=table.strings("depends"), exclude_targets=excludes,
            project=table.string("project"), pin_unknown=pin_unknown,
            description=table.string("description"),
            requirements=self.pinned_files(table, "requirements", f"component '{name}'"),
            requirements_where=self.doc.where((*kp, "requirements")) if "requirements" in table else None,
        )

    def pinned_files(self, table: Section, key: str, owner: str) -> tuple[Source, ...]:
        """``key = [{ name, version, filename, sha256 }, …]``: wheels pinned by sha256 (none when absent)."""
        if key not in table:
            return ()
        kp = table.keypath
        if not isinstance(table[key], list) or not table[key]:
            raise self.fail((*kp, key), f"{owner}: {key} must be a non-empty list", f"write {key} = [{{ name, version, filename, sha256 }}, …]")
        files = tuple(self.source({"pypi": item}, (*kp, key, n), owner, False) for n, item in enumerate(table[key]))
        for n, item in enumerate(files):
            if not item.get("sha256"):
                raise self.fail((*kp, key, n), f"{owner}: {item.get('filename')} has no sha256", "add sha256 = \"<64 hex>\" (sha256sum FILE)")
        return files

    def source(self, table: Any, kp: tomlpos.KeyPath, name: str, pin_unknown: bool) -> Source:
        if not isinstance(table, dict) or len(table) != 1:
            kinds = ", ".join(sorted(table)) if isinstance(table, dict) else type(table).__name__
            raise self.fail(kp, f"component '{name}' needs exactly one source kind (found: {kinds or 'none'})",
                            f"use one of source.{{{','.join(SOURCE_KINDS)}}}")
        kind, fields = next(iter(table.items()))
        if kind not in SOURCE_KINDS:
            raise self.fail((*kp, kind), f"unknown source kind '{kind}'", did_you_mean(kind, SOURCE_KINDS, "source kinds"))
        required, _optional = _SOURCE_FIELDS[kind]
        fields = self.reader.table(fields, SOURCE_TABLES[kind], (*kp, kind)).data
        skp = (*kp, kind)
        for key in sorted(required):
            if key not in fields and not (pin_unknown and key in ("commit", "sha256")):
                raise self.fail(skp, f"source.{kind} of '{name}' is missing '{key}'", self.pin_fix(kind, key))
        if kind == "git":
            commit = fields.get("commit")
            if commit is not None and not (isinstance(commit, str) and _HEX40.match(commit)):
                raise self.fail((*skp, "commit"), f"floating ref '{commit}' for '{name}'",
                                "pin the full 40-hex commit (git rev-parse <ref>), not a branch, tag or short hash")
            if "ref" in fields and commit is None and not pin_unknown:
                raise self.fail((*skp, "ref"), f"floating ref '{fields['ref']}' for '{name}'", "add commit = \"<40 hex>\"")
        if kind == "archive":
            digests = [k for k in ("sha256", "sha512") if k in fields]
            if len(digests) != 1 and not pin_unknown:
                raise self.fail(skp, f"archive of '{name}' needs exactly one of sha256 or sha512", "add sha256 = \"<64 hex>\" (sha256sum FILE)")
            pattern = {"sha256": _HEX64, "sha512": _HEX128}
            for key in digests:
                if not (isinstance(fields[key], str) and pattern[key].match(fields[key])):
                    raise self.fail((*skp, key), f"{key} of '{name}' is not {len(pattern[key].pattern) - 12} lower-case hex digits",
                                    f"paste the full digest from {key}sum")
        if kind in ("deb", "pypi") and "sha256" in fields and not (isinstance(fields["sha256"], str) and _HEX64.match(fields["sha256"])):
            raise self.fail((*skp, "sha256"), f"sha256 of '{name}' is not 64 lower-case hex digits", "paste the full digest (apt-cache show PKG | grep SHA256)")
        if kind == "deb" and "suite" in fields and not (isinstance(fields["suite"], str) and _NAME.match(fields["suite"])):
            raise self.fail((*skp, "suite"), f"suite '{fields['suite']}' of '{name}' is not a Debian suite name",
                            "name the suite the pin comes from, e.g. suite = \"experimental\"")
        if kind == "deb" and not (isinstance(fields["version"], str) and _DEB_VERSION.match(fields["version"])):
            raise self.fail((*skp, "version"), f"'{fields['version']}' is not an exact Debian version", "pin the exact version, e.g. 5.2.3-8")
        if kind == "pypi":
            self.pep440(str(fields["version"]), (*skp, "version"))
        check_fetched_name(kind, fields, lambda key: self.doc.where((*skp, key)))
        if kind == "path":
            rel = Path(str(fields["dir"]))
            if rel.is_absolute() or ".." in rel.parts:
                raise self.fail((*skp, "dir"), f"path '{rel}' must stay inside the repository", "give a relative directory such as recipes/hip/smoke")
        return Source(kind, tuple(sorted(fields.items())))

    @staticmethod
    def pin_fix(kind: str, key: str) -> str:
        if key == "commit":
            return "pin the full 40-hex commit; if none is known, set pin_unknown = \"why\" beside the source"
        if key == "sha256":
            return "add sha256 = \"<64 hex>\"; an input without a digest is a floating input"
        return f"add {key} = …"

    def build(self, table: Section) -> Build:
        kind = table.string("kind")
        if kind not in BUILD_KINDS:
            raise table.fail(("kind",), f"unknown build kind '{kind}'", did_you_mean(kind, BUILD_KINDS, "build kinds"))
        args = table.get("args", {})
        if not isinstance(args, dict):
            raise table.fail(("args",), "build args must be a table", "write args = { key = value }")
        return Build(kind, tuple(sorted((k, _freeze(v)) for k, v in args.items())))

    def framework(self, name: str, table: Section) -> Framework:
        kp = table.keypath
        recipe = safe_name(table.string("recipe"), table.where("recipe"), "recipe")  # recipes/wheels/<recipe>.toml
        version = self.pep440(table.string("version"), (*kp, "version"))
        pin_unknown = table.string("pin_unknown")
        if "files" in table:  # a mirror pinning every wheel it republishes, each by sha256
            if "source" in table or not isinstance(table["files"], list) or not table["files"]:
                raise self.fail((*kp, "files"), f"framework '{name}': files must be a non-empty list and replaces source",
                                "write files = [{ name, version, filename, sha256 }, …] and no source")
            files = tuple(self.source({"pypi": item}, (*kp, "files", n), name, False) for n, item in enumerate(table["files"]))
            for n, item in enumerate(files):
                if not item.get("sha256"):
                    raise self.fail((*kp, "files", n), f"framework '{name}': {item.get('filename')} has no sha256",
                                    "add sha256 = \"<64 hex>\" (sha256sum FILE)")
            return Framework(name, recipe, version, None, pin_unknown, self.doc.where((*kp, "files")), files)
        if "source" not in table:
            if not pin_unknown:
                raise self.fail(kp, f"framework '{name}' {version} has no pinned source",
                                "add source.pypi = { name, version, filename, sha256 } (its sdist, or the wheel a mirror "
                                "recipe republishes) or source.git = { url, commit }; if none is known, set pin_unknown = \"why\"")
            return Framework(name, recipe, version, None, pin_unknown, self.doc.where(kp))
        source = self.source(table["source"], (*kp, "source"), name, bool(pin_unknown))
        if source.kind not in FRAMEWORK_SOURCE_KINDS:
            raise self.fail((*kp, "source", source.kind), f"framework '{name}' cannot come from source.{source.kind}",
                            f"use one of source.{{{','.join(FRAMEWORK_SOURCE_KINDS)}}}")
        return Framework(name, recipe, version, source, pin_unknown, self.doc.where((*kp, "source")))

    def gates(self, table: Section) -> dict[str, tuple[str, ...]]:
        required = table.table("required")
        return {channel: required.strings(channel) for channel in required}

    # -- the component graph ---------------------------------------------------------------------------
    def check_graph(self, components: list[Component]) -> None:
        index: dict[str, int] = {}
        for n, comp in enumerate(components):
            if comp.name in index:
                first = components[index[comp.name]]
                raise self.fail((*self.comp_path(comp, components), "name"), f"duplicate component '{comp.name}' (first defined in {first.sdk})",
                                "rename one of them or remove the duplicate")
            index[comp.name] = n
        for comp in components:
            for d, dep in enumerate(comp.depends):
                if dep not in index:
                    raise self.fail((*self.comp_path(comp, components), "depends", d), f"'{comp.name}' depends on unknown component '{dep}'",
                                    did_you_mean(dep, index, "components"))
        cycle = find_cycle({c.name: c.depends for c in components})
        if cycle:
            first = components[index[cycle[0]]]
            raise self.fail((*self.comp_path(first, components), "depends"), f"dependency cycle: {' → '.join(cycle)}",
                            "remove one of these depends entries")

    def comp_path(self, comp: Component, components: list[Component]) -> tomlpos.KeyPath:
        sdk_path: tuple[str, ...] = ("core",) if comp.sdk == "core" else ("expansion", comp.sdk.split(".", 1)[1])
        same_sdk = [c for c in components if c.sdk == comp.sdk]
        position = next(n for n, c in enumerate(same_sdk) if c is comp)
        return (*sdk_path, "components", position)


def check_fetched_name(kind: str, fields: dict[str, Any], where: Any) -> None:
    """The file a source is saved under comes from the pin (a pypi ``filename``, an archive URL's last part):
    it must be a plain name, or the fetch would write outside its output directory."""
    if kind == "pypi" and "filename" in fields:
        safe_name(fields["filename"], where("filename"), "file name")
    if kind == "archive" and "url" in fields:
        if not isinstance(fields["url"], str):
            raise ManifestError(where("url"), "url must be a string", 'write url = "https://…"')
        last = PurePosixPath(urlparse(fields["url"]).path).name
        if last:
            safe_name(last, where("url"), "archive file name")


def find_cycle(graph: dict[str, tuple[str, ...]]) -> list[str] | None:
    """A dependency cycle as a closed path (``a → b → a``), or None.

    >>> find_cycle({"a": ("b",), "b": ("a",)})
    ['a', 'b', 'a']
    >>> find_cycle({"a": ("b",), "b": ()}) is None
    True
    """
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value
