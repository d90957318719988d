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
from cairn.names import safe_name
from cairn.paths import recipes_dir, repo_root

KINDS = ("runtime", "framework", "build")
GATES = ("static-coverage", "in-container", "gpu")
FAMILY_FIELD = "{family}"
_IMAGE_KEYS = {"name", "template", "kind", "from", "repo", "tags", "gates", "sdk", "component", "wheels", "builder",
               "source_git", "needs_components", "source_url"}
_BASE_KEYS = {"name", "suite", "variant", "mirror", "repo", "include", "path_exclude", "path_include", "suites",
              "check_valid_until", "env"}


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


def _load(path: Path, table: str, allowed: set[str]) -> dict[str, Any]:
    try:
        data = tomlpos.load(path).data
    except InputError as exc:  # tomlpos gives the line and column; show the path as _fail does
        raise ManifestError(Location(_shown(path), exc.where.line, exc.where.col), exc.what, exc.fix) from None
    if set(data) != {table}:
        raise _fail(path, f"expected exactly one [{table}] table", f"put every key under [{table}]")
    body = data[table]
    for key in body:
        if key not in allowed:
            raise _fail(path, f"unknown key '{key}' in [{table}]", did_you_mean(key, allowed, "keys"))
    return body


def _strings(path: Path, body: dict[str, Any], key: str) -> tuple[str, ...]:
    value = body.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(path, f"'{key}' must be a list of strings", f'write {key} = ["…"]')
    return tuple(value)


def _string(path: Path, body: dict[str, Any], key: str, required: bool = True) -> str:
    value = body.get(key, "")
    if not isinstance(value, str) or (required and not value):
        raise _fail(path, f"'{key}' must be a non-empty string", f'write {key} = "…"')
    return value


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
    body = _load(path, "base", _BASE_KEYS)
    check = body.get("check_valid_until", True)
    if not isinstance(check, bool):
        raise _fail(path, "'check_valid_until' must be true or false", "write check_valid_until = false")
    return BaseRecipe(
        name=_string(path, body, "name"), suite=_string(path, body, "suite"), variant=_string(path, body, "variant"),
        mirror=_string(path, body, "mirror"), repo=_string(path, body, "repo"), include=_strings(path, body, "include"),
        path_exclude=_strings(path, body, "path_exclude"), path_include=_strings(path, body, "path_include"),
        suites=_strings(path, body, "suites"), check_valid_until=check, env=_strings(path, body, "env"),
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
        body = _load(path, "image", _IMAGE_KEYS)
        kind = _string(path, body, "kind")
        if kind not in KINDS:
            raise _fail(path, f"unknown kind '{kind}'", did_you_mean(kind, KINDS, "kinds"))
        gates = _strings(path, body, "gates")
        for gate in gates:
            if gate not in GATES:
                raise _fail(path, f"unknown gate '{gate}'", did_you_mean(gate, GATES, "gates"))
        recipe = ImageRecipe(
            name=_string(path, body, "name"), template=_string(path, body, "template"), kind=kind,
            parent=_string(path, body, "from"), repo=_string(path, body, "repo"), tags=_strings(path, body, "tags"),
            gates=gates, source_url=_string(path, body, "source_url"), sdk=_string(path, body, "sdk", False),
            component=_string(path, body, "component", False), wheels=_strings(path, body, "wheels"),
            builder=_string(path, body, "builder", False), source_git=_string(path, body, "source_git", False),
            needs_components=_strings(path, body, "needs_components"), path=path.name,
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
