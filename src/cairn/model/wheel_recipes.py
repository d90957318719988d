"""Framework recipes (``recipes/wheels/<name>.toml``): the typed model and its strict loader.

Three kinds (schema and examples in docs/wheels.md):

- ``source``: a PEP 517 build of a pinned upstream source. ``device_code = true`` builds run once per gfx
  family inside that family's build environment (``arch_env`` = the family's targets minus
  ``exclude_targets``) against our own SDK wheels; pure-Python ones build once for every family.
- ``mirror``: pinned upstream binary wheels, fetched, verified, audited and republished unchanged.
- ``hip-extension``: one of our HIP components as a per-family Python wheel.
- ``engine``: an upstream Python package taken from the sdist a ``cmake`` component compiled, with that
  component's per-family libraries in ``<package>/lib`` (llama-cpp-python; cairn.wheels.engine).

A manifest's ``[frameworks.<name>] recipe = "…" version = "…"`` picks a recipe and one of its versions.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from cairn.errors import ManifestError, did_you_mean
from cairn.model.manifest import SOURCE_TABLES, Source, _freeze, check_fetched_name
from cairn.model.reader import Field, Reader, Table
from cairn.names import safe_name
from cairn.paths import recipes_dir

KINDS = ("source", "mirror", "hip-extension", "engine")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PYTHON = re.compile(r"^3\.[0-9]{1,2}$")
_ARGV_LISTS = {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
BUILD = Table({
    "device_code": Field("boolean", doc="build once per gfx family, in that family's build environment"),
    "min_rocm": Field("integer", doc="lowest ROCm major version the recipe builds against",
                      error=("'min_rocm' must be an integer ROCm major version", "write min_rocm = 6")),
    "arch_env": Field("string", doc="environment variable that receives the family's targets"),
    "arch_separator": Field("string", default=";"),
    "exclude_targets": Field("strings"),
    "env": Field("table", table=Table(values=Field("any", json={"type": ["string", "integer", "boolean"]}))),
    "commands": Field("any", json=_ARGV_LISTS, doc="argument lists run in the unpacked source"),
    "wheel": Field("string", doc="the wheel file the commands leave in {dist}"),
    "build_requires": Field("strings", doc="pinned build requirements, name==version"),
    "requires": Field("strings"),
    "depends_frameworks": Field("strings"),
    "python_tag": Field("string"),
})
_SOURCE_KINDS = ("git", "pypi", "archive")
SOURCE = Table({kind: Field("table", table=SOURCE_TABLES[kind]) for kind in _SOURCE_KINDS}, one_of=True)
FILE = Table({
    "name": Field("string", required=True), "version": Field("string", required=True),
    "filename": Field("string", required=True), "sha256": Field("string", required=True, pattern="^[0-9a-f]{64}$"),
    "python": Field("string", doc='"3.11", or absent for any'),
})
VERSION = Table({
    "source": Field("table", table=SOURCE),
    "pin_unknown": Field("string"),
    "files": Field("tables", table=FILE, doc="mirror: every wheel it republishes; engine: its run-time requirements; each by sha256"),
    "pythons": Field("strings", doc='engine: the CPython versions its index serves ("3.11", …): its requirements are mirrored for each'),
})
RECIPE = Table({
    "kind": Field("string", required=True, enum=KINDS),
    "project": Field("string", required=True, nonempty=True, doc="the distribution name"),
    "description": Field("string"),
    "versions": Field("table", table=Table(values=Field("table", table=VERSION)), doc="PEP 440 version -> its pinned input"),
    "build": Field("table", table=BUILD),
    "component": Field("string", doc="hip-extension, engine: the manifest component it packages"),
    "package": Field("string", doc="hip-extension, engine: the import name"),
}, doc="A Cairn wheel recipe (recipes/wheels/*.toml)")


@dataclass(frozen=True)
class MirrorFile:
    name: str
    version: str
    filename: str
    sha256: str
    python: str  # "3.11", or "" for any


@dataclass(frozen=True)
class BuildSpec:
    device_code: bool = False
    min_rocm: int = 0
    arch_env: str = ""
    arch_separator: str = ";"
    exclude_targets: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    commands: tuple[tuple[str, ...], ...] = ()
    wheel: str = ""
    build_requires: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    depends_frameworks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str
    project: str
    description: str
    path: Path
    digest: str  # sha256 of the recipe file: part of every key built from it
    versions: tuple[str, ...]
    build: BuildSpec
    component: str = ""  # hip-extension: the manifest component whose per-family build it packages
    package: str = ""  # hip-extension: the import name
    sources: tuple[tuple[str, Source], ...] = ()
    pins_unknown: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, tuple[MirrorFile, ...]], ...] = ()
    pythons: tuple[tuple[str, tuple[str, ...]], ...] = ()  # engine: version -> the Pythons its index serves

    def source(self, version: str) -> Source | None:
        return dict(self.sources).get(version)

    def pin_unknown(self, version: str) -> str:
        return dict(self.pins_unknown).get(version, "")

    def mirror_files(self, version: str) -> tuple[MirrorFile, ...]:
        return dict(self.files).get(version, ())

    def served_pythons(self, version: str) -> tuple[str, ...]:
        """The CPython versions an engine version's index serves (its mirrored requirements cover each)."""
        return dict(self.pythons).get(version, ())


def recipe_path(name: str) -> Path:
    return recipes_dir() / "wheels" / f"{name}.toml"


def known_recipes() -> list[str]:
    return sorted(p.stem for p in (recipes_dir() / "wheels").glob("*.toml"))


def load_recipe(name: str, path: Path | None = None) -> Recipe:
    """Load and validate ``recipes/wheels/<name>.toml``; mistakes are ManifestErrors at file:line:col."""
    path = path or recipe_path(name)
    if not path.is_file():
        raise ManifestError(path, f"no wheel recipe '{name}'", did_you_mean(name, known_recipes(), "recipes"))
    reader = Reader.load(path)
    doc = reader.doc
    fail = reader.fail
    data = reader.root(RECIPE)
    kind = data.get("kind")
    if kind not in KINDS:
        raise fail(("kind",), f"unknown recipe kind {kind!r}", did_you_mean(str(kind), KINDS, "kinds"))
    project = data.get("project")
    if not isinstance(project, str) or not project:
        raise fail((), "missing 'project'", 'add project = "<distribution name>"')
    raw_build = data.table("build")
    env = raw_build.table("env")
    min_rocm = raw_build.integer("min_rocm")
    commands = raw_build.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, list) and all(isinstance(a, str) for a in c) for c in commands):
        raise fail(("build", "commands"), "'commands' must be a list of argument lists", 'write commands = [["python", "-m", "build"]]')
    build = BuildSpec(
        device_code=raw_build.boolean("device_code"),
        min_rocm=min_rocm,
        arch_env=raw_build.string("arch_env"),
        arch_separator=raw_build.string("arch_separator"),
        exclude_targets=raw_build.strings("exclude_targets"),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
        commands=tuple(tuple(cmd) for cmd in commands),
        wheel=raw_build.string("wheel"),
        build_requires=raw_build.strings("build_requires"),
        requires=raw_build.strings("requires"),
        depends_frameworks=raw_build.strings("depends_frameworks"),
    )
    for n, pin in enumerate(build.build_requires):
        if "==" not in pin:
            raise fail(("build", "build_requires", n), f"build requirement '{pin}' is not pinned", "pin it exactly: name==version")
    if kind in ("hip-extension", "engine"):
        for key in ("component", "package"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise fail((), f"a {kind} recipe needs '{key}'", f'add {key} = "…"')
    if kind == "source" and (not build.commands or not build.wheel):
        raise fail(("build",), "a source recipe needs build.commands and build.wheel", "see docs/wheels.md")
    versions_table = data.table("versions")
    sources: list[tuple[str, Source]] = []
    unknown: list[tuple[str, str]] = []
    files: list[tuple[str, tuple[MirrorFile, ...]]] = []
    pythons: list[tuple[str, tuple[str, ...]]] = []
    for version in versions_table:
        kp = ("versions", version)
        try:
            Version(version)  # plans derive wheel versions from it; it also names files, so it must be a plain name
        except InvalidVersion:
            raise fail(kp, f"'{version}' is not a PEP 440 version", 'use e.g. [versions."2.4.1"]') from None
        safe_name(version, doc.where(kp), "recipe version")
        table = versions_table.table(version)
        if "source" in table:
            source_table = table.table("source")
            if len(source_table.data) != 1 or not isinstance(next(iter(source_table.data.values())), dict):
                raise fail((*kp, "source"), "needs exactly one source table", "write source.git = { url, commit } or source.pypi = { … }")
            (source_kind, _), = source_table.items()
            fields = source_table.table(source_kind).data
            check_fetched_name(source_kind, fields, lambda key, kp=kp, kind=source_kind: doc.where((*kp, "source", kind, key)))
            pin = table.string("pin_unknown")
            for key, spec in SOURCE_TABLES[source_kind].fields.items():
                if spec.required and key not in fields:
                    raise fail((*kp, "source", source_kind), f"source.{source_kind} of {name} {version} is missing '{key}'", f"add {key} = …")
            if source_kind == "git" and not _HEX40.match(str(fields.get("commit", ""))) and not pin:
                raise fail((*kp, "source", "git"), f"floating source for {name} {version}",
                           "pin commit = \"<40 hex>\" or say why none is known with pin_unknown = \"…\"")
            if source_kind in ("pypi", "archive") and not _HEX64.match(str(fields.get("sha256", ""))) and not pin:
                raise fail((*kp, "source", source_kind), f"{source_kind} source of {name} {version} has no sha256",
                           "add sha256 = \"<64 hex>\"")
            sources.append((version, Source(source_kind, tuple(sorted((k, _freeze(v)) for k, v in fields.items())))))
            if pin:
                unknown.append((version, pin))
        if "files" in table:
            found = []
            if not isinstance(table["files"], list):
                raise fail((*kp, "files"), "'files' must be a list of tables", "write files = [{ name, version, filename, sha256 }]")
            for raw in table.tables("files"):
                fkp = raw.keypath
                if not _HEX64.match(str(raw.get("sha256", ""))):
                    raise fail(fkp, "mirrored file without a sha256", "add sha256 = \"<64 hex>\" (sha256sum FILE)")
                for key in ("name", "version", "filename"):
                    if not isinstance(raw.get(key), str) or not raw[key]:
                        raise fail(fkp, f"mirrored file without a '{key}'", "write files = [{ name, version, filename, sha256 }]")
                safe_name(raw["filename"], doc.where((*fkp, "filename")), "mirrored file name")  # the download is saved under it
                found.append(MirrorFile(raw["name"], raw["version"], raw["filename"], raw["sha256"], raw.string("python")))
            files.append((version, tuple(found)))
        if "pythons" in table:
            served = table.strings("pythons")
            if kind != "engine" or not served:
                raise fail((*kp, "pythons"), "'pythons' is an engine recipe's non-empty list of the Pythons its index serves",
                           'write pythons = ["3.11", "3.12", "3.13", "3.14"] in an engine recipe, or remove it')
            for n, py in enumerate(served):
                if not _PYTHON.match(py):
                    raise fail((*kp, "pythons", n), f"bad Python version '{py}'", 'write it as "3.11"')
            stray = sorted({f.filename for f in dict(files).get(version, ()) if f.python and f.python not in served})
            if stray:
                raise fail((*kp, "files"), f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} for a Python "
                           f"{version} does not serve ({', '.join(served)})", "add that Python to 'pythons' or drop the file")
            pythons.append((version, served))
        if kind == "engine" and "files" in table and "pythons" not in table:
            raise fail(kp, f"engine version {version} mirrors its requirements but names no Python its index serves",
                       'add pythons = ["3.11", "3.12", "3.13", "3.14"]')
        if kind == "mirror" and "files" not in table:
            raise fail(kp, f"mirror version {version} lists no files", "add files = [{ name, version, filename, sha256 }]")
        if kind == "source" and "source" not in table:
            raise fail(kp, f"source version {version} has no source", "add source.git = { url, commit } or source.pypi = { … }")
    return Recipe(
        name=name, kind=kind, project=project, description=data.string("description"), path=path,
        digest=hashlib.sha256(path.read_bytes()).hexdigest(), versions=tuple(versions_table), build=build,
        component=data.string("component"), package=data.string("package"),
        sources=tuple(sources), pins_unknown=tuple(unknown), files=tuple(files), pythons=tuple(pythons),
    )
