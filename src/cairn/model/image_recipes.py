"""Container recipes (``recipes/containers/*.toml``): which template, parent, wheels, gates and tags.

``base.toml`` describes the base OS (an mmdebstrap of pinned Debian packages); every other file is one
image recipe. Unknown keys and bad values fail with ``file:line: what — fix`` like the manifests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cairn.errors import InputError, Location, ManifestError, did_you_mean
from cairn.model import tomlpos
from cairn.model.reader import Field, Reader, Section, Style, Table
from cairn.names import safe_name
from cairn.paths import recipes_dir, repo_root

KINDS = ("runtime", "framework", "build")
GATES = ("static-coverage", "in-container", "gpu")
FAMILY_FIELD = "{family}"
_TAG_DOC = "placeholders: {rocm}, {target}, {family}, {version}, {python}"
IMAGE = Table({
    "name": Field("string", required=True, doc="the file's own name"),
    "template": Field("string", required=True, doc="templates/<template>.j2"),
    "kind": Field("string", required=True, enum=KINDS),
    "from": Field("string", required=True, doc='"base" or another image recipe'),
    "repo": Field("string", required=True),
    "tags": Field("strings", doc=_TAG_DOC),
    "gates": Field("strings", doc="of: " + ", ".join(GATES)),
    "sdk": Field("string"),
    "component": Field("string", doc="a per-family component whose tree goes into the image"),
    "wheels": Field("strings", doc="projects installed from the release's wheel index ({family}: the image's)"),
    "builder": Field("string", doc="recipe of the build image a source recipe compiles in"),
    "source_git": Field("string"),
    "needs_components": Field("strings"),
    "source_url": Field("string", required=True),
}, what="[image]")
ROOTFS = Table({
    "name": Field("string", required=True), "suite": Field("string", required=True),
    "variant": Field("string", required=True), "mirror": Field("string", required=True, doc='"host" or an archive URL'),
    "repo": Field("string", required=True), "include": Field("strings", doc="packages, each pinned as name=version"),
    "path_exclude": Field("strings"), "path_include": Field("strings"),
    "suites": Field("strings", doc="further suites apt may install from"),
    "check_valid_until": Field("boolean", default=True,
                               error=("'check_valid_until' must be true or false", "write check_valid_until = false")),
    "env": Field("strings", doc="KEY=VALUE set in the image config"),
}, what="[base]")
IMAGE_FILE = Table({"image": Field("table", required=True, table=IMAGE)}, doc="A Cairn container image recipe (recipes/containers/*.toml)")
ROOTFS_FILE = Table({"base": Field("table", required=True, table=ROOTFS)},
                    doc="A Cairn rootfs recipe (recipes/containers/*.toml with a [base] table)")


@dataclass(frozen=True)
class BaseRecipe:
    name: str
    suite: str
    variant: str
    mirror: str
    repo: str
    include: tuple[str, ...]
    path_exclude: tuple[str, ...] = ()
    path_include: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()  # further suites apt may install from (experimental on top of sid)
    check_valid_until: bool = True  # False for a frozen archive whose Release files have expired
    env: tuple[str, ...] = ()  # KEY=VALUE set in the image config (the toolchain's HIP_PLATFORM, …)
    lock: tuple[str, ...] = ()  # every package of the rootfs as name=version (the recipe's .lock file)

    def pins(self) -> dict[str, str]:
        """package → exact version: the lock when there is one, else the ``name=version`` includes."""
        entries = self.lock or self.include
        return dict(item.split("/", 1)[0].split("=", 1) for item in entries if "=" in item)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "suite": self.suite, "variant": self.variant, "mirror": self.mirror,
                "repo": self.repo, "include": list(self.include), "path_exclude": list(self.path_exclude),
                "path_include": list(self.path_include), "suites": list(self.suites),
                "check_valid_until": self.check_valid_until, "env": list(self.env), "lock": list(self.lock)}


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    template: str
    kind: str
    parent: str  # "base" or another recipe's name
    repo: str
    tags: tuple[str, ...]
    gates: tuple[str, ...]
    source_url: str
    sdk: str = ""
    component: str = ""  # a per-family component whose tree goes into the image (cairn-smoke)
    wheels: tuple[str, ...] = ()  # distributions taken from the release's wheel index ({family}: the image's)
    builder: str = ""  # recipe of the build image a source recipe compiles in
    source_git: str = ""
    needs_components: tuple[str, ...] = ()
    path: str = ""

    def wheels_for(self, family: str) -> tuple[str, ...]:
        """The projects this image installs from ``family``'s index (``rocm-sdk-libraries-{family}`` filled in)."""
        return tuple(w.replace(FAMILY_FIELD, family) for w in self.wheels)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "template": self.template, "kind": self.kind, "from": self.parent,
                "repo": self.repo, "tags": list(self.tags), "gates": list(self.gates), "sdk": self.sdk,
                "component": self.component, "wheels": list(self.wheels), "source_url": self.source_url}

    def render_tags(self, **values: str) -> tuple[str, ...]:
        return tuple(tag.format(**values) for tag in self.tags)


def containers_dir() -> Path:
    return recipes_dir() / "containers"


def _shown(path: Path) -> Path:
    return path.relative_to(repo_root()) if path.is_relative_to(repo_root()) else path


def _fail(path: Path, what: str, fix: str) -> ManifestError:
    return ManifestError(_shown(path), what, fix)


def _load(path: Path, table: str, spec: Table) -> Section:
    try:
        reader = Reader(tomlpos.load(path), Style(located=False, missing_reads_empty=True, strings_said_nonempty=True,
                                                  shown=_shown(path)))
    except InputError as exc:  # tomlpos gives the line and column; show the path as _fail does
        raise ManifestError(Location(_shown(path), exc.where.line, exc.where.col), exc.what, exc.fix) from None
    data = reader.doc.data
    if set(data) != {table}:
        raise _fail(path, f"expected exactly one [{table}] table", f"put every key under [{table}]")
    return reader.table(data[table], spec, (table,))


def lock_path(recipe_file: Path) -> Path:
    return recipe_file.with_suffix(".lock")


def read_lock(path: Path) -> tuple[str, ...]:
    """``name=version`` lines of a rootfs lock (``cairn pins lock`` writes it); comments start with ``#``."""
    if not path.is_file():
        return ()
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.match(r"^[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?=[0-9][A-Za-z0-9.+~:-]*$", line):
            raise ManifestError(f"{_shown(path)}:{number}", f"'{line}' is not name=version",
                                f"regenerate it: cairn pins lock {_shown(path.with_suffix('.toml'))}")
        entries.append(line)
    return tuple(sorted(entries))


def rootfs_names(directory: Path | None = None) -> list[str]:
    """Recipes that describe an mmdebstrap rootfs (a ``[base]`` table): ``base``, ``toolchain-rocm7``, …"""
    folder = directory or containers_dir()
    return sorted(p.stem for p in folder.glob("*.toml") if re.search(r"^\[base\]", p.read_text(), re.MULTILINE))


@cache
def load_base(directory: Path | None = None, name: str = "base") -> BaseRecipe:
    """The rootfs recipe ``recipes/containers/<name>.toml`` with its lock (every package pinned)."""
    path = (directory or containers_dir()) / f"{name}.toml"
    if not path.is_file():
        raise _fail(path, f"no rootfs recipe '{name}'", did_you_mean(name, rootfs_names(directory), "rootfs recipes"))
    body = _load(path, "base", ROOTFS)
    check = body.boolean("check_valid_until")
    return BaseRecipe(
        name=body.string("name"), suite=body.string("suite"), variant=body.string("variant"),
        mirror=body.string("mirror"), repo=body.string("repo"), include=body.strings("include"),
        path_exclude=body.strings("path_exclude"), path_include=body.strings("path_include"),
        suites=body.strings("suites"), check_valid_until=check, env=body.strings("env"),
        lock=read_lock(lock_path(path)),
    )


@cache
def load_recipes(directory: Path | None = None) -> dict[str, ImageRecipe]:
    """Every image recipe by name; parents are checked to exist."""
    folder = directory or containers_dir()
    recipes: dict[str, ImageRecipe] = {}
    for path in sorted(folder.glob("*.toml")):
        if path.stem in rootfs_names(folder):
            continue
        body = _load(path, "image", IMAGE)
        kind = body.string("kind")
        if kind not in KINDS:
            raise _fail(path, f"unknown kind '{kind}'", did_you_mean(kind, KINDS, "kinds"))
        gates = body.strings("gates")
        for gate in gates:
            if gate not in GATES:
                raise _fail(path, f"unknown gate '{gate}'", did_you_mean(gate, GATES, "gates"))
        recipe = ImageRecipe(
            name=body.string("name"), template=body.string("template"), kind=kind,
            parent=body.string("from"), repo=body.string("repo"), tags=body.strings("tags"),
            gates=gates, source_url=body.string("source_url"), sdk=body.string("sdk"),
            component=body.string("component"), wheels=body.strings("wheels"),
            builder=body.string("builder"), source_git=body.string("source_git"),
            needs_components=body.strings("needs_components"), path=path.name,
        )
        # names that become paths: templates/<template>.j2, the index's simple/<wheel>/ pages
        safe_name(recipe.template, _shown(path), "template")
        for wheel in recipe.wheels:
            plain = wheel.replace(FAMILY_FIELD, "family")
            if "{" in plain or "}" in plain:
                raise _fail(path, f"wheel '{wheel}' has a placeholder other than {FAMILY_FIELD}",
                            f"name the project, or use {FAMILY_FIELD} for the image's gfx family")
            safe_name(plain, _shown(path), "wheel project")
        if recipe.name != path.stem:
            raise _fail(path, f"recipe name '{recipe.name}' differs from its file name", f'write name = "{path.stem}"')
        recipes[recipe.name] = recipe
    for recipe in recipes.values():
        if recipe.parent != "base" and recipe.parent not in recipes:
            raise _fail(folder / recipe.path, f"'{recipe.name}' is built FROM unknown image '{recipe.parent}'",
                        did_you_mean(recipe.parent, [*recipes, "base"], "images"))
    return recipes
