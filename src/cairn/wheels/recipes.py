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
from typing import Any

from packaging.version import InvalidVersion, Version

from cairn.errors import ManifestError, did_you_mean
from cairn.model import tomlpos
from cairn.model.manifest import Source, _freeze, check_fetched_name
from cairn.names import safe_name

KINDS = ("source", "mirror", "hip-extension", "engine")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TOP = {"kind", "project", "description", "versions", "build", "component", "package"}
_BUILD = {"device_code", "min_rocm", "arch_env", "arch_separator", "exclude_targets", "env", "commands", "wheel",
          "build_requires", "requires", "depends_frameworks", "python_tag"}
_VERSION = {"source", "pin_unknown", "files"}
_FILE = {"name", "version", "filename", "sha256", "python"}


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

    def source(self, version: str) -> Source | None:
        return dict(self.sources).get(version)

    def pin_unknown(self, version: str) -> str:
        return dict(self.pins_unknown).get(version, "")

    def mirror_files(self, version: str) -> tuple[MirrorFile, ...]:
        return dict(self.files).get(version, ())


def recipe_path(name: str) -> Path:
    from cairn.paths import recipes_dir

    return recipes_dir() / "wheels" / f"{name}.toml"


def known_recipes() -> list[str]:
    from cairn.paths import recipes_dir

    return sorted(p.stem for p in (recipes_dir() / "wheels").glob("*.toml"))


def load_recipe(name: str, path: Path | None = None) -> Recipe:
    """Load and validate ``recipes/wheels/<name>.toml``; mistakes are ManifestErrors at file:line:col."""
    path = path or recipe_path(name)
    if not path.is_file():
        raise ManifestError(path, f"no wheel recipe '{name}'", did_you_mean(name, known_recipes(), "recipes"))
    doc = tomlpos.load(path)
    data = doc.data

    def fail(keypath: tuple[Any, ...], what: str, fix: str) -> ManifestError:
        return ManifestError(doc.where(keypath), what, fix)

    def check_keys(table: Any, allowed: set[str], keypath: tuple[Any, ...]) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise fail(keypath, "expected a table", "write it as a TOML table")
        for key in table:
            if key not in allowed:
                raise fail((*keypath, key), f"unknown key '{key}'", did_you_mean(key, allowed, "keys"))
        return table

    def text(table: dict[str, Any], key: str, keypath: tuple[Any, ...], default: str = "") -> str:
        value = table.get(key, default)
        if not isinstance(value, str):
            raise fail((*keypath, key), f"'{key}' must be a string", f'write {key} = "…"')
        return value

    def texts(table: dict[str, Any], key: str, keypath: tuple[Any, ...]) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail((*keypath, key), f"'{key}' must be a list of strings", f'write {key} = ["…"]')
        return tuple(value)

    check_keys(data, _TOP, ())
    kind = data.get("kind")
    if kind not in KINDS:
        raise fail(("kind",), f"unknown recipe kind {kind!r}", did_you_mean(str(kind), KINDS, "kinds"))
    project = data.get("project")
    if not isinstance(project, str) or not project:
        raise fail((), "missing 'project'", 'add project = "<distribution name>"')
    raw_build = check_keys(data.get("build", {}), _BUILD, ("build",))
    env = check_keys(raw_build.get("env", {}), set(raw_build.get("env", {}) if isinstance(raw_build.get("env"), dict) else ()), ("build", "env"))
    min_rocm = raw_build.get("min_rocm", 0)
    if not isinstance(min_rocm, int) or isinstance(min_rocm, bool):
        raise fail(("build", "min_rocm"), "'min_rocm' must be an integer ROCm major version", "write min_rocm = 6")
    commands = raw_build.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, list) and all(isinstance(a, str) for a in c) for c in commands):
        raise fail(("build", "commands"), "'commands' must be a list of argument lists", 'write commands = [["python", "-m", "build"]]')
    build = BuildSpec(
        device_code=raw_build.get("device_code", False) is True,
        min_rocm=min_rocm,
        arch_env=text(raw_build, "arch_env", ("build",)),
        arch_separator=text(raw_build, "arch_separator", ("build",), ";"),
        exclude_targets=texts(raw_build, "exclude_targets", ("build",)),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
        commands=tuple(tuple(cmd) for cmd in commands),
        wheel=text(raw_build, "wheel", ("build",)),
        build_requires=texts(raw_build, "build_requires", ("build",)),
        requires=texts(raw_build, "requires", ("build",)),
        depends_frameworks=texts(raw_build, "depends_frameworks", ("build",)),
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
    raw_versions = data.get("versions", {})
    versions_table = check_keys(raw_versions, set(raw_versions) if isinstance(raw_versions, dict) else set(), ("versions",))
    sources: list[tuple[str, Source]] = []
    unknown: list[tuple[str, str]] = []
    files: list[tuple[str, tuple[MirrorFile, ...]]] = []
    for version, table in versions_table.items():
        kp = ("versions", version)
        try:
            Version(version)  # plans derive wheel versions from it; it also names files, so it must be a plain name
        except InvalidVersion:
            raise fail(kp, f"'{version}' is not a PEP 440 version", 'use e.g. [versions."2.4.1"]') from None
        safe_name(version, doc.where(kp), "recipe version")
        table = check_keys(table, _VERSION, kp)
        if "source" in table:
            source_table = check_keys(table["source"], {"git", "pypi", "archive"}, (*kp, "source"))
            if len(source_table) != 1 or not isinstance(next(iter(source_table.values())), dict):
                raise fail((*kp, "source"), "needs exactly one source table", "write source.git = { url, commit } or source.pypi = { … }")
            (source_kind, fields), = source_table.items()
            check_fetched_name(source_kind, fields, lambda key, kp=kp, kind=source_kind: doc.where((*kp, "source", kind, key)))
            pin = str(table.get("pin_unknown", ""))
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
            for n, raw in enumerate(table["files"]):
                fkp = (*kp, "files", n)
                raw = check_keys(raw, _FILE, fkp)
                if not _HEX64.match(str(raw.get("sha256", ""))):
                    raise fail(fkp, "mirrored file without a sha256", "add sha256 = \"<64 hex>\" (sha256sum FILE)")
                for key in ("name", "version", "filename"):
                    if not isinstance(raw.get(key), str) or not raw[key]:
                        raise fail(fkp, f"mirrored file without a '{key}'", "write files = [{ name, version, filename, sha256 }]")
                safe_name(raw["filename"], doc.where((*fkp, "filename")), "mirrored file name")  # the download is saved under it
                found.append(MirrorFile(raw["name"], raw["version"], raw["filename"], raw["sha256"], text(raw, "python", fkp)))
            files.append((version, tuple(found)))
        if kind == "mirror" and "files" not in table:
            raise fail(kp, f"mirror version {version} lists no files", "add files = [{ name, version, filename, sha256 }]")
        if kind == "source" and "source" not in table:
            raise fail(kp, f"source version {version} has no source", "add source.git = { url, commit } or source.pypi = { … }")
    return Recipe(
        name=name, kind=kind, project=project, description=str(data.get("description", "")), path=path,
        digest=hashlib.sha256(path.read_bytes()).hexdigest(), versions=tuple(versions_table), build=build,
        component=str(data.get("component", "")), package=str(data.get("package", "")),
        sources=tuple(sources), pins_unknown=tuple(unknown), files=tuple(files),
    )
