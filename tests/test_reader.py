"""The one strict reader every TOML input goes through: what a user sees for each kind of mistake.

The message wording of each file kind is pinned by that kind's own tests (test_manifest_errors.py,
test_bad_input.py, …); here: the reader's own behaviour, and the mistakes that were accepted silently
before wheel recipes, container recipes and the target registry read through it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cairn.errors import ManifestError
from cairn.model.reader import Field, Reader, Style, Table

SPEC = Table({
    "name": Field("string", required=True, nonempty=True),
    "count": Field("integer"),
    "tags": Field("strings"),
    "on": Field("boolean"),
    "sub": Field("table", table=Table({"kind": Field("string", required=True)}, what="[sub]")),
}, what="[top]")


def read(tmp_path: Path, text: str, style: Style | None = None) -> Reader:
    path = tmp_path / "x.toml"
    path.write_text(text)
    return Reader.load(path, style=style or Style())


@pytest.mark.parametrize(("text", "message"), [
    ('name = "a"\nnmae = "b"\n', "x.toml:2:1: unknown key 'nmae' in [top] — did you mean 'name'?"),
    ('name = "a"\n[sub]\nknid = "x"\n', "x.toml:3:1: unknown key 'knid' in [sub] — did you mean 'kind'?"),
    ('name = "a"\nsub = 3\n', "x.toml:2:1: [sub] must be a table — write it as [sub] or { … }"),
])
def test_unknown_keys_and_non_tables_are_located(tmp_path: Path, text: str, message: str) -> None:
    reader = read(tmp_path, text)
    with pytest.raises(ManifestError) as caught:
        reader.root(SPEC).table("sub")
    assert str(caught.value) == f"{tmp_path}/{message}"


@pytest.mark.parametrize(("text", "read_key", "message"), [
    ("count = 1\n", "name", "x.toml:1:1: missing 'name' — add name = \"…\""),
    ('name = "  "\n', "name", "x.toml:1:1: 'name' must be a non-empty string — write name = \"…\""),
    ('name = "a"\ncount = "3"\n', "count", "x.toml:2:1: 'count' must be an integer — write count = 1"),
    ('name = "a"\ncount = true\n', "count", "x.toml:2:1: 'count' must be an integer — write count = 1"),
    ('name = "a"\ntags = "x"\n', "tags", "x.toml:2:1: 'tags' must be a list of strings — write tags = [\"…\"]"),
    ('name = "a"\non = "yes"\n', "on", "x.toml:2:1: 'on' must be true or false — write on = true or on = false"),
])
def test_typed_values_fail_at_their_key(tmp_path: Path, text: str, read_key: str, message: str) -> None:
    section = read(tmp_path, text).root(SPEC)
    with pytest.raises(ManifestError) as caught:
        getattr(section, {"name": "string", "count": "integer", "tags": "strings", "on": "boolean"}[read_key])(read_key)
    assert str(caught.value) == f"{tmp_path}/{message}"


def test_a_file_without_positions_names_the_file_alone(tmp_path: Path) -> None:
    reader = read(tmp_path, 'nmae = "a"\n', Style(located=False, shown=Path("recipes/x.toml")))
    with pytest.raises(ManifestError) as caught:
        reader.root(SPEC)
    assert str(caught.value) == "recipes/x.toml: unknown key 'nmae' in [top] — did you mean 'name'?"


def test_reading_an_undeclared_key_is_a_loader_bug(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="not declared"):
        read(tmp_path, 'name = "a"\n').root(SPEC).string("count")


# -- wheel recipes: mistakes that used to be accepted ----------------------------------------------------
@pytest.mark.parametrize(("edit", "message"), [
    (('device_code = true', 'device_code = "yes"'), "'device_code' must be true or false"),
    (('description = "', 'description = 1\n#'), "'description' must be a string"),
    (('url = "https://github.com/ROCm/pytorch.git"', 'urll = "https://github.com/ROCm/pytorch.git"'),
     "unknown key 'urll' in source.git — did you mean 'url'?"),
    (('url = "https://github.com/ROCm/pytorch.git", ', ''), "source.git of pytorch 2.12.0 is missing 'url'"),
    (('pin_unknown = "no commit', 'pin_unknown = 1\n#'), "'pin_unknown' must be a string"),
])
def test_wheel_recipe_values_are_type_checked(tmp_path: Path, repo_root: Path, edit: tuple[str, str], message: str) -> None:
    from cairn.wheels.recipes import load_recipe

    text = (repo_root / "recipes" / "wheels" / "pytorch.toml").read_text()
    assert edit[0] in text
    bad = tmp_path / "pytorch.toml"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ManifestError) as caught:
        load_recipe("pytorch", bad)
    assert str(caught.value).startswith(f"{bad}:") and message in str(caught.value), str(caught.value)


def test_every_committed_wheel_recipe_still_loads(repo_root: Path) -> None:
    from cairn.wheels.recipes import known_recipes, load_recipe

    assert [load_recipe(name).name for name in known_recipes()] == known_recipes()


def _copy_containers(repo_root: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "containers"
    shutil.copytree(repo_root / "recipes" / "containers", folder)
    return folder


# -- container recipes keep naming the file alone ------------------------------------------------------------
def test_container_recipe_typo_names_the_file_and_the_closest_key(tmp_path: Path, repo_root: Path) -> None:
    from cairn.containers.recipes import load_recipes

    folder = _copy_containers(repo_root, tmp_path)
    smoke = folder / "smoke.toml"
    smoke.write_text(smoke.read_text().replace("template = ", "templte = "))
    with pytest.raises(ManifestError) as caught:
        load_recipes.__wrapped__(folder)
    # the file as the user's shell would name it (relative to the working directory when under it, as in CI)
    where, _, message = str(caught.value).partition(": ")
    assert Path(where).resolve() == smoke.resolve()
    assert message == "unknown key 'templte' in [image] — did you mean 'template'?"


# -- the target registry: wrong types used to be tracebacks or silently split into characters -----------------
@pytest.mark.parametrize(("edit", "message"), [
    (("mach = 0x02C", 'mach = "x"'), "'mach' must be an integer — write mach = 1"),
    (("mach = 0x02C\n", ""), "missing 'mach' — add mach = …"),
    (('products = ["MI25", "Radeon RX Vega 64/56"]', 'products = "MI25"'), "'products' must be a list of strings"),
    (('features = ["xnack"]', 'features = "xnack"'), "'features' must be a list of strings"),
    (('name = "gfx803"\n', 'name = "gfx803"\ngeneric = 1\n'), "'generic' must be a string"),
])
def test_target_registry_values_are_type_checked(tmp_path: Path, repo_root: Path, edit: tuple[str, str], message: str) -> None:
    from cairn.model.targets import load_registry

    text = (repo_root / "manifests" / "targets.toml").read_text()
    assert edit[0] in text
    bad = tmp_path / "targets.toml"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ManifestError) as caught:
        load_registry.__wrapped__(bad)
    assert str(caught.value).startswith(f"{bad}:") and message in str(caught.value), str(caught.value)
