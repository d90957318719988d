"""Container recipes (``recipes/containers/*.toml``): which template, parent, wheels, gates and tags.

``base.toml`` describes the base OS (an mmdebstrap of pinned Debian packages); every other file is one
image recipe. Unknown keys and bad values fail with ``file:line: what — fix`` like the manifests.
"""

from __future__ import annotations

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
_IMAGE_KEYS = {"name", "template", "kind", "from", "repo", "tags", "gates", "sdk", "component", "wheels", "builder",
               "source_git", "needs_components", "source_url"}
_BASE_KEYS = {"name", "suite", "variant", "mirror", "repo", "include", "path_exclude", "path_include"}


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

    def pins(self) -> dict[str, str]:
        """package → exact version, from ``name=version`` entries."""
        return dict(item.split("=", 1) for item in self.include if "=" in item)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "suite": self.suite, "variant": self.variant, "mirror": self.mirror,
                "repo": self.repo, "include": list(self.include), "path_exclude": list(self.path_exclude),
                "path_include": list(self.path_include)}


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
    wheels: tuple[str, ...] = ()  # distributions taken from the release's wheel index
    builder: str = ""  # recipe of the build image a source recipe compiles in
    source_git: str = ""
    needs_components: tuple[str, ...] = ()
    path: str = ""

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


@cache
def load_base(directory: Path | None = None) -> BaseRecipe:
    path = (directory or containers_dir()) / "base.toml"
    body = _load(path, "base", _BASE_KEYS)
    return BaseRecipe(
        name=_string(path, body, "name"), suite=_string(path, body, "suite"), variant=_string(path, body, "variant"),
        mirror=_string(path, body, "mirror"), repo=_string(path, body, "repo"), include=_strings(path, body, "include"),
        path_exclude=_strings(path, body, "path_exclude"), path_include=_strings(path, body, "path_include"),
    )


@cache
def load_recipes(directory: Path | None = None) -> dict[str, ImageRecipe]:
    """Every image recipe by name; parents are checked to exist."""
    folder = directory or containers_dir()
    recipes: dict[str, ImageRecipe] = {}
    for path in sorted(folder.glob("*.toml")):
        if path.name == "base.toml":
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
            safe_name(wheel, _shown(path), "wheel project")
        if recipe.name != path.stem:
            raise _fail(path, f"recipe name '{recipe.name}' differs from its file name", f'write name = "{path.stem}"')
        recipes[recipe.name] = recipe
    for recipe in recipes.values():
        if recipe.parent != "base" and recipe.parent not in recipes:
            raise _fail(folder / recipe.path, f"'{recipe.name}' is built FROM unknown image '{recipe.parent}'",
                        did_you_mean(recipe.parent, [*recipes, "base"], "images"))
    return recipes
