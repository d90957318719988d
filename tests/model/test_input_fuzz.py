"""Random mutations of every input file Cairn reads never produce a traceback — only a one-line CairnError.

The manifest has its own fuzz test (test_manifest_errors.py); here the same property holds for the other
inputs: wheel and container recipes, bundle.json and its gate results, last-build.json and the store's
gate.json / image.json, matrix.json, TUF metadata and wheel METADATA. Each starts from a real, valid file
(the checkout's recipes, a sample bundle, a real publish) and is mutated structurally (a key dropped, a
value swapped for a hostile one) or textually (truncated, a character inserted).
"""

from __future__ import annotations

import copy
import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CairnError
from support import ROOT
from support.mutations import line_mutations

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
JUNK: list[Any] = [None, 0, -1, 2**70, True, 1.5, "", ".", "..", "../../escape", "/etc/passwd", "a/b", "x\u0000y", "\ufeff",
                   [], {}, ["a"], [1], {"a": 1}, "sha256:", "gfx90a", "passed", "9" * 64]
CHARS = st.sampled_from([*'{}[]",:\\\n\x00\xff0a-.', "\u00e9", "\ufeff"])


def one_line_error(call: Callable[[], Any]) -> None:
    """``call`` succeeds or raises a CairnError whose message is one line (what the CLI prints)."""
    try:
        call()
    except CairnError as exc:
        assert str(exc).strip() and "\n" not in str(exc), repr(str(exc))


# -- mutation strategies -----------------------------------------------------------------------------------
def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for n, child in enumerate(value):
            out += _paths(child, (*prefix, n))
    return out


def _mutate_json(doc: Any, edits: list[tuple[int, str, int]]) -> Any:
    doc = copy.deepcopy(doc)
    for pick, op, junk in edits:
        paths = _paths(doc)
        path = paths[pick % len(paths)]
        if not path:
            doc = JUNK[junk % len(JUNK)] if op == "replace" else doc
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(JUNK[junk % len(JUNK)])
    return doc


def json_mutations(doc: Any) -> st.SearchStrategy[str]:
    """Structural edits of ``doc`` (as indented JSON text), or a textual edit of its text."""
    text = json.dumps(doc, indent=1)
    structural = st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["delete", "replace"]), st.integers(0, 100)),
                          min_size=1, max_size=3).map(lambda edits: json.dumps(_mutate_json(doc, edits), indent=1))
    textual = st.tuples(st.integers(0, len(text)), CHARS, st.booleans()).map(
        lambda e: text[: e[0]] if e[2] else text[: e[0]] + e[1] + text[e[0]:])
    return st.one_of(structural, structural, textual)


TOML_JUNK = ["", "[", "]", "=", '"', "x = 1", "kind = 3", "versions = 1", '[versions."x.y"]', '[versions."../a"]',
                            "files = 1", "files = [1]", 'files = [{ name = "a", sha256 = "' + "a" * 64 + '" }]',
                            'files = [{ name = "a", version = "1", filename = "../../x", sha256 = "' + "a" * 64 + '" }]',
                            "source = {}", "source.git = 1", "min_rocm = 'six'", "env = 1", "commands = [1]", "commands = 'x'",
                            "device_code = 'yes'", "exclude_targets = 1", "tags = 1", "gates = ['gpu', 1]", "from = 'nope'",
                            "name = 1", "[image]", "[build]", "template = 1", "\t", "\ufeff"]


def toml_mutations(text: str) -> st.SearchStrategy[str]:
    return line_mutations(text, TOML_JUNK)


# -- recipes ---------------------------------------------------------------------------------------------------
WHEEL_RECIPES = sorted((ROOT / "recipes" / "wheels").glob("*.toml"))


@pytest.mark.parametrize("recipe", WHEEL_RECIPES, ids=[p.stem for p in WHEEL_RECIPES])
def test_wheel_recipe_mutations(recipe: Path, tmp_path: Path) -> None:
    from cairn.model.wheel_recipes import load_recipe

    @SETTINGS
    @given(text=toml_mutations(recipe.read_text()))
    def check(text: str) -> None:
        path = tmp_path / recipe.name
        path.write_text(text)
        one_line_error(lambda: load_recipe(recipe.stem, path))

    check()


def test_container_recipe_mutations(tmp_path: Path, repo_root: Path) -> None:
    from cairn.model.image_recipes import load_base, load_recipes

    source = repo_root / "recipes" / "containers"
    names = sorted(p.name for p in source.glob("*.toml"))

    @SETTINGS
    @given(which=st.sampled_from(names), data=st.data())
    def check(which: str, data: st.DataObject) -> None:
        folder = tmp_path / "containers"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(source, folder)
        (folder / which).write_text(data.draw(toml_mutations((source / which).read_text())))
        one_line_error(lambda: (load_base.__wrapped__(folder), load_recipes.__wrapped__(folder)))

    check()


# -- bundle.json and gates/*.json ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cairn.publish.sample import write_sample_bundle

    return write_sample_bundle(tmp_path_factory.mktemp("fuzz") / "bundle", families=("gfx90a", "gfx1100"))


def test_bundle_json_mutations(sample_bundle: Path) -> None:
    from cairn.matrix.bundle import load_bundle

    original = (sample_bundle / "bundle.json").read_text()

    @SETTINGS
    @given(text=json_mutations(json.loads(original)))
    def check(text: str) -> None:
        (sample_bundle / "bundle.json").write_text(text)
        one_line_error(lambda: load_bundle(sample_bundle).check_files())

    try:
        check()
    finally:
        (sample_bundle / "bundle.json").write_text(original)


def test_bundle_gate_result_mutations(sample_bundle: Path) -> None:
    from cairn.matrix.bundle import load_bundle

    gate = sorted((sample_bundle / "gates").glob("*.json"))[0]
    original = gate.read_text()

    @SETTINGS
    @given(text=json_mutations(json.loads(original)))
    def check(text: str) -> None:
        gate.write_text(text)
        one_line_error(lambda: load_bundle(sample_bundle))

    try:
        check()
    finally:
        gate.write_text(original)


# -- last-build.json, gate.json and image.json of a store ----------------------------------------------------
VALID_IMAGE = {"schema": "cairn.image/v1", "name": "runtime", "repo": "cairn/runtime", "tags": ["t"], "target": "gfx90a",
               "family": "gfx90a", "digest": "sha256:" + "a" * 64, "config_digest": "sha256:" + "c" * 64,
               "layers": [{"digest": "sha256:" + "d" * 64, "diff_id": "sha256:" + "e" * 64, "size": 10, "uncompressed_size": 20}],
               "labels": {"org.opencontainers.image.version": "5.2.3"}}
VALID_GATE = {"schema": "cairn.gate/v1", "gate": "static-coverage", "image": "runtime", "target": "gfx90a", "family": "gfx90a",
              "digest": "sha256:" + "a" * 64, "status": "passed", "reason": "", "evidence": {"files": 3}}
VALID_BUILD = {"schema": "cairn.execute/v1", "actions": {
    "image:runtime@gfx90a": {"status": "ran", "output": "img", "detail": None, "seconds": 1.0, "log": None},
    "gate:static-coverage:runtime@gfx90a": {"status": "ran", "output": "gate", "detail": None, "seconds": 1.0, "log": None},
    "gate:in-container:runtime@gfx90a": {"status": "failed", "output": None, "detail": "boom", "seconds": 1.0, "log": None},
    "bundle:release": {"status": "blocked", "output": None, "detail": "an input failed", "seconds": 0, "log": None}}}


@pytest.mark.parametrize("target", ["last-build.json", "trees/gate/gate.json", "trees/img/image.json"])
def test_store_record_mutations(tmp_path: Path, target: str) -> None:
    from cairn.containers.command import images
    from cairn.gates.summary import collect
    from cairn.publish.command import last_build_bundle

    store = tmp_path / "store"
    valid = {"last-build.json": VALID_BUILD, "trees/gate/gate.json": VALID_GATE, "trees/img/image.json": VALID_IMAGE}
    for rel, doc in valid.items():
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_text(json.dumps(doc))

    @SETTINGS
    @given(text=json_mutations(valid[target]))
    def check(text: str) -> None:
        (store / target).write_text(text)
        for reader in (collect, images, last_build_bundle):
            one_line_error(lambda reader=reader: reader(store))

    check()


# -- matrix.json and TUF metadata of a real publish ------------------------------------------------------------
@pytest.fixture(scope="module")
def published(sample_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    from cairn.matrix.bundle import load_bundle
    from cairn.publish.publisher import publish
    from cairn.remote.backend import FileBackend
    from cairn.sign.keys import init_keys, make_root

    base = tmp_path_factory.mktemp("published")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    publish(load_bundle(sample_bundle), FileBackend(base / "repo"), keys, root)
    return base / "repo", root.to_bytes(JSONSerializer(compact=False))


def test_matrix_json_mutations(published: tuple[Path, bytes], tmp_path: Path) -> None:
    from cairn.doctor.advice import HostFacts, LoadedMatrix, advise
    from cairn.matrix.model import load_matrix
    from cairn.model.targets import load_registry

    registry = load_registry()
    original = json.loads((published[0] / "channels" / "dev" / "matrix.json").read_text())
    path = tmp_path / "matrix.json"

    def read_and_advise() -> None:
        matrix = load_matrix(path)
        for target in ("gfx90a", "gfx1100", None):
            advise([LoadedMatrix(matrix, str(path), str(tmp_path) + "/", False, "unverified")],
                   HostFacts(target, "6.1.0-18-amd64", "6.3.6", "3.11"), registry)

    @SETTINGS
    @given(text=json_mutations(original))
    def check(text: str) -> None:
        path.write_text(text)
        one_line_error(read_and_advise)

    check()


@pytest.mark.parametrize("role", ["timestamp", "snapshot", "targets", "root"])
def test_tuf_metadata_mutations(published: tuple[Path, bytes], tmp_path: Path, role: str) -> None:
    from cairn.sign.verify import verify_repository

    repo, root = published
    metadata = repo / "metadata"
    name = {"timestamp": "timestamp.json", "root": "root.json"}.get(role) or \
        sorted(metadata.glob(f"*.{role}.json"), key=lambda p: int(p.name.split(".")[0]))[-1].name
    file = metadata / name
    original = file.read_text()
    counter = iter(range(10**6))

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(text=json_mutations(json.loads(original)))
    def check(text: str) -> None:
        file.write_text(text)
        one_line_error(lambda: verify_repository(str(repo), root, tmp_path / f"cache{next(counter)}"))

    try:
        check()
    finally:
        file.write_text(original)
    verify_repository(str(repo), root, tmp_path / "after")


# -- wheel METADATA -------------------------------------------------------------------------------------------------
def test_wheel_metadata_mutations(sample_bundle: Path, tmp_path: Path) -> None:
    from cairn.wheels.index import write_index
    from cairn.wheels.wheelfile import read_metadata

    source = sorted((sample_bundle / "files" / "wheels").rglob("*.whl"))[0]
    with zipfile.ZipFile(source) as zf:
        members = {info.filename: zf.read(info) for info in zf.infolist()}
    meta_name = next(n for n in members if n.endswith(".dist-info/METADATA"))
    text = members[meta_name].decode()
    counter = iter(range(10**6))
    mutations = st.one_of(
        st.tuples(st.integers(0, len(text)), CHARS, st.booleans()).map(lambda e: (text[: e[0]] if e[2] else text[: e[0]] + e[1] + text[e[0]:]).encode()),
        st.binary(max_size=64),
        st.just(b"\xff\xfe not utf-8"),
        st.just(None),  # no METADATA at all
    )

    @SETTINGS
    @given(metadata=mutations)
    def check(metadata: bytes | None) -> None:
        wheel = tmp_path / f"w{next(counter)}" / source.name
        wheel.parent.mkdir()
        with zipfile.ZipFile(wheel, "w") as zf:
            for name, data in members.items():
                if name == meta_name and metadata is None:
                    continue
                zf.writestr(name, metadata if name == meta_name else data)
        one_line_error(lambda: read_metadata(wheel))
        one_line_error(lambda: write_index([wheel], wheel.parent / "index", "gfx90a"))

    check()
