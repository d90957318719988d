"""Bad input and wrong places get one honest line and exit 2 — never a traceback, never a misleading answer.

Each case runs the command a user would type, on a real file or directory that is wrong in one way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cairn.publish.sample import write_sample_bundle
from support import cairn
from support.cli import files_under, one_line


# -- cairn publish on a bundle.json missing a field ------------------------------------------------------
@pytest.mark.parametrize(("drop", "what"), [
    (("release", "version"), "'release.version' is missing"),
    (("release", "source_date_epoch"), "'release.source_date_epoch' is missing"),
    (("cells", 0, "os"), "'cells[0].os' is missing"),
    (("artifacts", 0, "sha256"), "'artifacts[0].sha256' is missing"),
    (("release",), "'release' is missing"),
])
def test_publish_names_the_missing_field(tmp_path: Path, drop: tuple, what: str) -> None:
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    data = json.loads((bundle / "bundle.json").read_text())
    parent = data
    for key in drop[:-1]:
        parent = parent[key]
    del parent[drop[-1]]
    (bundle / "bundle.json").write_text(json.dumps(data))
    proc = cairn("publish", str(bundle), "--dev-keys", "--to", (tmp_path / "repo").as_uri(), "--store", str(tmp_path / "store"))
    line = one_line(proc)
    assert line == f"cairn publish: {bundle / 'bundle.json'}: {what} — regenerate the bundle (cairn build writes it)"
    assert not (tmp_path / "repo").exists() and not (tmp_path / "store").exists()


# -- a store that does not exist, or whose last-build.json is not a build report ---------------------------
STORE_COMMANDS = [("gate",), ("image", "list"), ("publish", "--dev-keys")]


@pytest.mark.parametrize("command", STORE_COMMANDS, ids=[" ".join(c) for c in STORE_COMMANDS])
def test_a_store_that_does_not_exist_is_named(tmp_path: Path, command: tuple[str, ...]) -> None:
    store = tmp_path / "nonexistent"
    line = one_line(cairn(*command, "--store", str(store), cwd=tmp_path))
    assert f"{store / 'last-build.json'}: no such store — run cairn build --store {store} first" in line
    assert not store.exists()


WRONG_SHAPES = [
    ("a list", "[1, 2]", "not a build report: no 'actions' object"),
    ("actions a list", '{"actions": []}', "not a build report: no 'actions' object"),
    ("action a string", '{"actions": {"bundle:release": "ran", "gate:static-coverage:runtime@gfx90a": "ran", "image:runtime@gfx90a": "ran"}}',
     "has no status"),
    ("output climbs", '{"actions": {"bundle:release": {"status": "ran", "output": "../../etc"}, "gate:x:runtime@gfx90a": '
     '{"status": "ran", "output": "../../etc"}, "image:runtime@gfx90a": {"status": "ran", "output": "../../etc"}}}',
     "output '../../etc' is not a tree digest of the store"),
    ("truncated", '{"actions": {', "cannot read the build report"),
]


@pytest.mark.parametrize("command", STORE_COMMANDS, ids=[" ".join(c) for c in STORE_COMMANDS])
@pytest.mark.parametrize(("case", "text", "what"), WRONG_SHAPES, ids=[c[0] for c in WRONG_SHAPES])
def test_a_build_report_of_the_wrong_shape_is_one_line(tmp_path: Path, command: tuple[str, ...], case: str, text: str, what: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "last-build.json").write_text(text)
    line = one_line(cairn(*command, "--store", str(store), cwd=tmp_path))
    assert f"{store / 'last-build.json'}: " in line and what in line, line
    assert files_under(store) == {"last-build.json"}


def test_a_damaged_gate_result_in_the_store_is_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "trees" / "abc").mkdir(parents=True)
    (store / "trees" / "abc" / "gate.json").write_text('{"gate": "static-coverage", "status": "passed"}')
    (store / "last-build.json").write_text('{"actions": {"gate:static-coverage:runtime@gfx90a": {"status": "ran", "output": "abc"}}}')
    line = one_line(cairn("gate", "--store", str(store), cwd=tmp_path))
    assert line == f"cairn gate: {store / 'trees' / 'abc' / 'gate.json'}: 'image' is missing — rebuild the gate (cairn build --only gate:…)"



# -- each JSON file cairn reads back (cairn.model.json_reader): damaged, and one value of the wrong type ---------
NOT_JSON = "cannot read the {what}: not JSON (Expecting property name enclosed in double quotes)"
GATE_FIX = "rebuild the gate (cairn build --only gate:…)"
BUNDLE_FIX = "regenerate the bundle (cairn build writes it)"
MATRIX_FIX = "fetch the matrix again; it must be the file cairn publish wrote"


def _store_with_gate(tmp_path: Path, text: str) -> tuple[Path, Path]:
    store = tmp_path / "store"
    (store / "trees" / "abc").mkdir(parents=True)
    (store / "trees" / "abc" / "gate.json").write_text(text)
    (store / "last-build.json").write_text('{"actions": {"gate:static-coverage:runtime@gfx90a": {"status": "ran", "output": "abc"}}}')
    return store, store / "trees" / "abc" / "gate.json"


GATE = {"schema": "cairn.gate/v1", "gate": "static-coverage", "image": "runtime", "target": "gfx90a", "family": "gfx90a",
        "digest": "sha256:" + "a" * 64, "status": "passed", "reason": "", "evidence": {}}


@pytest.mark.parametrize(("text", "where", "what"), [
    ('{"gate": "static-coverage",\n', ":2:1", NOT_JSON.format(what="gate result") + f" — {GATE_FIX}"),
    (json.dumps({**GATE, "digest": 7}), "", f"'digest' is an integer, not a string — {GATE_FIX}"),
    (json.dumps({**GATE, "evidence": ["log"]}), "", f"'evidence' is a list, not an object — {GATE_FIX}"),
    (json.dumps({**GATE, "status": "pass"}), "", "'status' is 'pass', not one of passed, failed, not-run — did you mean 'passed'?"),
    (json.dumps({**GATE, "reasons": ""}), "", "unknown key 'reasons' — did you mean 'reason'?"),
], ids=["damaged", "digest a number", "evidence a list", "status misspelt", "key misspelt"])
def test_a_gate_json_that_is_damaged_or_mistyped_is_one_line(tmp_path: Path, text: str, where: str, what: str) -> None:
    store, path = _store_with_gate(tmp_path, text)
    assert one_line(cairn("gate", "--store", str(store), cwd=tmp_path)) == f"cairn gate: {path}{where}: {what}"


def _publish_line(tmp_path: Path, bundle: Path) -> str:
    proc = cairn("publish", str(bundle), "--dev-keys", "--to", (tmp_path / "repo").as_uri(), "--store", str(tmp_path / "store"))
    line = one_line(proc)
    assert not (tmp_path / "repo").exists() and not (tmp_path / "store").exists()  # nothing half-written
    return line


@pytest.mark.parametrize(("edit", "what"), [
    (lambda d: d["release"].update(source_date_epoch="1700000000"), f"'release.source_date_epoch' is a string, not an integer — {BUNDLE_FIX}"),
    (lambda d: d["artifacts"][0].update(cells="gfx90a"), f"'artifacts[0].cells' is a string, not a list of strings — {BUNDLE_FIX}"),
    (lambda d: d["cells"][0].update(partial=["libamdhip64.so", None]), f"'cells[0].partial[1]' is null, not a string — {BUNDLE_FIX}"),
    (lambda d: d["artifacts"][0].update(kind="wheels"), "'artifacts[0].kind' is 'wheels', not one of wheel, metadata, dockerfile, source, other"
     " — did you mean 'wheel'?"),
    (lambda d: d["cells"][0].update(framwork_version="1"), "unknown key 'framwork_version' in 'cells[0]' — did you mean 'framework_version'?"),
    # accepted before: the release would have been published without a single artifact
    (lambda d: d.update(artifact=d.pop("artifacts")), "unknown key 'artifact' — did you mean 'artifacts'?"),
], ids=["epoch a string", "cells a string", "partial holds null", "kind misspelt", "key misspelt", "artifacts misspelt"])
def test_a_mistyped_bundle_json_is_one_line(tmp_path: Path, edit, what: str) -> None:
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    data = json.loads((bundle / "bundle.json").read_text())
    edit(data)
    (bundle / "bundle.json").write_text(json.dumps(data))
    assert _publish_line(tmp_path, bundle) == f"cairn publish: {bundle / 'bundle.json'}: {what}"


def test_a_damaged_bundle_json_is_one_line_at_the_place_it_breaks(tmp_path: Path) -> None:
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    (bundle / "bundle.json").write_text('{"schema": "cairn.bundle/v1",\n "release": {\n')
    assert _publish_line(tmp_path, bundle) == (f"cairn publish: {bundle / 'bundle.json'}:3:1: {NOT_JSON.format(what='release bundle')}"
                                               " — point at a directory made by cairn bundle or write_bundle()")


@pytest.mark.parametrize(("text", "where", "what"), [
    ('{"gate": "static-coverage",\n', ":2:1", NOT_JSON.format(what="gate result") + " — rerun the gate or delete the file"),
    ('{"gate": "static-coverage", "status": "passed", "reason": 0}', "", "'reason' is an integer, not a string — rerun the gate or delete the file"),
    # accepted before: the verdict's reason was dropped without a word
    ('{"gate": "static-coverage", "status": "passed", "reasn": "ok"}', "", "unknown key 'reasn' — did you mean 'reason'?"),
], ids=["damaged", "reason a number", "key misspelt"])
def test_a_bundle_gate_result_that_is_damaged_or_mistyped_is_one_line(tmp_path: Path, text: str, where: str, what: str) -> None:
    bundle = write_sample_bundle(tmp_path / "bundle", families=("gfx90a",))
    (bundle / "gates" / "gfx90a-static-coverage.json").write_text(text)
    assert _publish_line(tmp_path, bundle) == f"cairn publish: {bundle / 'gates' / 'gfx90a-static-coverage.json'}{where}: {what}"


def _matrix_text() -> str:
    from support.matrices import sample

    return sample().to_json()


@pytest.mark.parametrize(("edit", "where", "what"), [
    (lambda text: text[:text.index('"cells": [') + 10] + "\n", ":3:1", f"cannot read the matrix: not JSON (Expecting value) — {MATRIX_FIX}"),
    (lambda text: text.replace('"size": 123,', '"size": "123",'), "", f"'cells[0].wheels[0].size' is a string, not an integer — {MATRIX_FIX}"),
    (lambda text: text.replace('"status": "passed"', '"status": "pass"'), "",
     "'cells[0].gates[0].status' is 'pass', not one of passed, failed, not-run — did you mean 'passed'?"),
], ids=["damaged", "size a string", "status misspelt"])
def test_a_matrix_json_that_is_damaged_or_mistyped_is_one_line(tmp_path: Path, edit, where: str, what: str) -> None:
    path = tmp_path / "matrix.json"
    path.write_text(edit(_matrix_text()))
    assert one_line(cairn("matrix", "--from", str(path), cwd=tmp_path)) == f"cairn matrix: {path}{where}: {what}"

# -- a wheel recipe whose version does not parse ---------------------------------------------------------
@pytest.fixture
def checkout(tmp_path: Path, repo_root: Path) -> Path:
    """A copy of the checkout's data (manifests/, recipes/, publish/) to break one file of."""
    root = tmp_path / "checkout"
    for sub in ("manifests", "recipes", "publish"):
        shutil.copytree(repo_root / sub, root / sub)
    return root


def test_a_recipe_version_that_does_not_parse_is_located(checkout: Path) -> None:
    recipe = checkout / "recipes" / "wheels" / "cairn-smoke.toml"
    text = recipe.read_text().replace('[versions."0.1.0"]', '[versions."zero.one"]')
    recipe.write_text(text)
    manifest = checkout / "manifests" / "releases" / "rocm-5.2.3.toml"
    manifest.write_text(manifest.read_text().replace('version = "0.1.0"', 'version = "zero.one"'))
    line = one_line(cairn("plan", str(manifest), extra_env={"CAIRN_ROOT": str(checkout)}))
    at = text[: text.index('"zero.one"')].count("\n") + 1
    assert f"recipes/wheels/cairn-smoke.toml:{at}:" in line and "'zero.one' is not a PEP 440 version" in line, line


def test_a_recipe_name_that_climbs_is_refused(checkout: Path) -> None:
    manifest = checkout / "manifests" / "releases" / "rocm-5.2.3.toml"
    text = manifest.read_text()
    assert 'recipe = "sglang"' in text
    manifest.write_text(text.replace('recipe = "sglang"', 'recipe = "../../../../etc/x"', 1))
    line = one_line(cairn("check", str(manifest), extra_env={"CAIRN_ROOT": str(checkout)}))
    assert "rocm-5.2.3.toml:" in line and "recipe '../../../../etc/x' contains a path separator" in line, line


# -- misleading answers -----------------------------------------------------------------------------------
def test_doctor_on_a_root_that_does_not_exist_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    line = one_line(cairn("doctor", "--root", str(missing)))
    assert line.startswith(f"cairn doctor: {missing}: no such directory"), line
    assert "GPU" not in line


def test_doctor_on_a_file_as_root_says_so(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    line = one_line(cairn("doctor", "--root", str(tmp_path / "f")))
    assert f"{tmp_path / 'f'}: not a directory" in line


@pytest.mark.parametrize("kind", ["empty", "other files", "missing"])
def test_verify_on_a_directory_that_is_not_a_repository_says_so(tmp_path: Path, kind: str) -> None:
    where = tmp_path / "dir"
    if kind != "missing":
        where.mkdir()
    if kind == "other files":
        (where / "README").write_text("hello\n")
        (where / "metadata").mkdir()
    line = one_line(cairn("verify", str(where), "--cache", str(tmp_path / "cache")))
    assert "not a Cairn repository" in line, line
    assert "does not verify" not in line
    expect = "no such directory" if kind == "missing" else "no metadata/timestamp.json or metadata/1.root.json"
    assert expect in line, line


def test_a_toml_error_at_end_of_file_has_a_line(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[release]\nname = "t"\nversion =')
    line = one_line(cairn("check", str(path)))
    assert line.startswith(f"{path}:3:10: invalid TOML: Invalid value at end of document"), line


def test_a_toml_error_at_end_of_file_with_trailing_newlines_points_at_the_last_line(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[release]\nname = "t"\nfamilies = ["gfx90a",\n\n')
    line = one_line(cairn("check", str(path)))
    assert line.startswith(f"{path}:3:22: invalid TOML: Invalid value at end of document"), line


def test_a_container_recipe_syntax_error_has_a_line(checkout: Path) -> None:
    recipe = checkout / "recipes" / "containers" / "smoke.toml"
    lines = recipe.read_text().splitlines()
    lines.insert(3, "broken = = 1")
    recipe.write_text("\n".join(lines) + "\n")
    line = one_line(cairn("plan", extra_env={"CAIRN_ROOT": str(checkout)}))
    assert "recipes/containers/smoke.toml:4:" in line and "invalid TOML" in line, line


@pytest.mark.parametrize("command", [("check",), ("plan",), ("pins", "check"), ("ci", "github")])
def test_a_directory_given_as_a_manifest_is_one_line(tmp_path: Path, command: tuple[str, ...]) -> None:
    (tmp_path / "manifests").mkdir()
    line = one_line(cairn(*command, str(tmp_path / "manifests"), cwd=tmp_path))
    assert f"{tmp_path / 'manifests'}: is a directory, not a TOML file — give the file's path" in line, line


@pytest.mark.parametrize(("where", "what"), [
    ("a-file", "is a file, not a directory"),
    ("a-file/keys", "cannot make the key directory (Not a directory)"),
])
def test_keys_init_into_a_place_that_cannot_hold_keys_is_one_line(tmp_path: Path, where: str, what: str) -> None:
    (tmp_path / "a-file").write_text("not a key directory\n")
    line = one_line(cairn("keys", "init", "--dir", str(tmp_path / where)))
    assert line.startswith(f"cairn keys: {tmp_path / where}: {what}"), line
    assert (tmp_path / "a-file").read_text() == "not a key directory\n"


@pytest.mark.parametrize(("command", "stores"), [(("plan",), ("a-file",)),  # plan opens only a store that exists
                                                (("build", "--only", "fetch:nothing"), ("a-file", "a-file/store"))])
def test_a_store_path_that_is_a_file_is_one_line(tmp_path: Path, command: tuple[str, ...], stores: tuple[str, ...],
                                                 repo_root: Path) -> None:
    (tmp_path / "a-file").write_text("x\n")
    for store in (tmp_path / s for s in stores):
        line = one_line(cairn(*command, str(repo_root / "manifests" / "releases" / "default.toml"), "--store", str(store)))
        assert f"{store}: not a directory — give --store a directory" in line, line


@pytest.mark.parametrize(("out", "what"), [("a-dir", "is a directory — give the path of a file to write"),
                                          ("a-file/w.yml", "cannot be written — a part of")])
def test_an_output_path_that_cannot_be_a_file_is_one_line_and_nothing_is_made(tmp_path: Path, out: str, what: str,
                                                                               repo_root: Path) -> None:
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-file").write_text("x\n")
    manifest = str(repo_root / "manifests" / "releases" / "default.toml")
    line = one_line(cairn("ci", "github", manifest, "--out", str(tmp_path / out)))
    assert line.startswith(f"cairn ci: {tmp_path / out}: {what}"), line
    line = one_line(cairn("keys", "init", "--dir", str(tmp_path / "keys"), "--root-out", str(tmp_path / out)))
    assert line.startswith(f"cairn keys: {tmp_path / out}: {what}"), line
    assert files_under(tmp_path) == {"a-dir", "a-file"}  # no key set whose root went nowhere


@pytest.mark.parametrize(("where", "what"), [
    ("https://", "'https://' names no host — give https://host/path"),
    ("s3://", "'s3://' names no bucket — give s3://bucket/path"),
    ("file://host/repo", "'file://host/repo' names the host 'host' — a local directory is file:///absolute/dir"),
])
def test_verify_of_a_url_that_names_no_place_is_one_line(tmp_path: Path, where: str, what: str) -> None:
    """Such URLs were read as relative paths (``https:/``) or as another directory (``/repo``)."""
    line = one_line(cairn("verify", where, "--cache", str(tmp_path / "cache")), code=2)
    assert line.startswith(f"cairn verify: {what}"), line


def test_services_with_a_file_as_their_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x\n")
    line = one_line(cairn("services", "start", "--dir", str(tmp_path / "a-file")))
    assert line == f"cairn services: {tmp_path / 'a-file'}: not a directory — give --dir a directory for the services' state and data"
