"""The one strict reader every TOML input goes through (and its JSON sibling): what a user sees for each kind of mistake.

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
    from cairn.model.wheel_recipes import load_recipe

    text = (repo_root / "recipes" / "wheels" / "pytorch.toml").read_text()
    assert edit[0] in text
    bad = tmp_path / "pytorch.toml"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ManifestError) as caught:
        load_recipe("pytorch", bad)
    assert str(caught.value).startswith(f"{bad}:") and message in str(caught.value), str(caught.value)


def test_every_committed_wheel_recipe_still_loads(repo_root: Path) -> None:
    from cairn.model.wheel_recipes import known_recipes, load_recipe

    assert [load_recipe(name).name for name in known_recipes()] == known_recipes()


def _copy_containers(repo_root: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "containers"
    shutil.copytree(repo_root / "recipes" / "containers", folder)
    return folder


# -- container recipes keep naming the file alone ------------------------------------------------------------
def test_container_recipe_typo_names_the_file_and_the_closest_key(tmp_path: Path, repo_root: Path) -> None:
    from cairn.model.image_recipes import load_recipes

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


# -- the same declarations for the JSON files cairn reads back (cairn.model.json_reader) ----------------------
JSON_SPEC = Table({
    "name": Field("string", required=True, nonempty=True),
    "count": Field("integer", minimum=1),
    "tags": Field("strings"),
    "kind": Field("string", enum=("wheel", "image")),
    "digest": Field("string", pattern=r"[0-9a-f]{4}", doc="4 hex digits"),
    "items": Field("tables", table=Table({"path": Field("string", required=True)})),
    "extra": Field("any"),
})


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "a", "nmae": "b"}, "x.json: unknown key 'nmae' — did you mean 'name'?"),
    ({"name": "a", "items": [{"path": "p", "pth": "q"}]}, "x.json: unknown key 'pth' in 'items[0]' — did you mean 'path'?"),
    ({"name": "a", "items": ["p"]}, "x.json: 'items[0]' is a string, not an object — FIX"),
    ({"name": "a", "items": [{}]}, "x.json: 'items[0].path' is missing — FIX"),
    ({}, "x.json: 'name' is missing — FIX"),
    ({"name": "  "}, "x.json: 'name' is empty — FIX"),
    ({"name": "a", "count": True}, "x.json: 'count' is true or false, not an integer — FIX"),
    ({"name": "a", "count": 0}, "x.json: 'count' is 0, not an integer ≥ 1 — FIX"),
    ({"name": "a", "tags": ["x", 2.5]}, "x.json: 'tags[1]' is a number, not a string — FIX"),
    ({"name": "a", "kind": "wheels"}, "x.json: 'kind' is 'wheels', not one of wheel, image — did you mean 'wheel'?"),
    ({"name": "a", "kind": "zzz"}, "x.json: 'kind' is 'zzz', not one of wheel, image — FIX"),
    ({"name": "a", "digest": "abcde"}, "x.json: 'digest' is 'abcde', not 4 hex digits — FIX"),
    ([], "x.json: the thing is a list, not an object — FIX"),
])
def test_json_documents_fail_in_one_line_naming_the_key_path(data, message: str) -> None:
    from cairn.errors import InputError
    from cairn.model.json_reader import JsonReader

    def read_all() -> None:
        top = JsonReader(data, "x.json", "FIX", "thing").root(JSON_SPEC)
        top.string("name"), top.integer("count"), top.strings("tags"), top.string("kind"), top.string("digest"), top.any("extra")
        for item in top.tables("items"):
            item.string("path")

    with pytest.raises(InputError) as caught:
        read_all()
    assert str(caught.value) == message


def test_json_text_that_does_not_parse_is_located(tmp_path: Path) -> None:
    from cairn.errors import InputError
    from cairn.model.json_reader import read_file

    path = tmp_path / "x.json"
    path.write_text('{\n  "name": "a",\n  "tags": [1,\n}\n')
    with pytest.raises(InputError) as caught:
        read_file(path, JSON_SPEC, "thing", "FIX")
    assert str(caught.value) == f"{path}:4:1: cannot read the thing: not JSON (Expecting value) — FIX"
    path.write_bytes(b'{"name": "\xff"}')
    with pytest.raises(InputError) as caught:
        read_file(path, JSON_SPEC, "thing", "FIX")
    assert str(caught.value) == f"{path}: cannot read the thing: not UTF-8 text (invalid start byte at byte 10) — FIX"
    with pytest.raises(InputError) as caught:
        read_file(tmp_path / "absent.json", JSON_SPEC, "thing", "FIX")
    assert str(caught.value) == f"{tmp_path / 'absent.json'}: cannot read the thing (No such file or directory) — FIX"


def test_json_defaults_and_an_undeclared_key_read_is_a_loader_bug() -> None:
    from cairn.model.json_reader import JsonReader

    top = JsonReader({"name": "a"}, "x.json", "FIX").root(JSON_SPEC)
    assert (top.integer("count"), top.strings("tags"), top.string("kind"), list(top.tables("items")), top.any("extra", {})) == (0, (), "", [], {})
    with pytest.raises(TypeError):
        top.string("count")
