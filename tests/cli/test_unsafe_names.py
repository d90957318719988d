"""A name from an input file never becomes a path outside where it belongs.

Each case is a real input file with one hostile name in it (``..``, an absolute path, a symlink out). The
command the user runs must refuse it with one line naming the file, exit 2, and write nothing at all.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn.errors import CairnError, InputError
from cairn.names import relpath_problem, safe_name, safe_relpath
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from support import cairn
from support.cli import files_under, one_line


# -- the rule itself ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/../../x", "/etc/passwd", "a//b", "a/", "a\\..\\b", "a\0b", "a\nb", 7])
def test_unsafe_relative_paths_are_refused(bad: Any) -> None:
    assert relpath_problem(bad)
    with pytest.raises(InputError) as caught:
        safe_relpath(bad, "bundle.json", "artifact path")
    assert str(caught.value).startswith("bundle.json: artifact path")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("good", ["wheels/gfx90a/x-1.0-py3-none-any.whl", "Dockerfile", "a/b.c/..d", "5.2.3rc1"])
def test_plain_relative_paths_pass(good: str) -> None:
    assert safe_relpath(good, "f", "path") == good


@pytest.mark.parametrize("bad", ["a/b", "..", ".", "", "x\\y"])
def test_a_name_is_one_component(bad: str) -> None:
    with pytest.raises(InputError):
        safe_name(bad, "f", "family")


def test_file_backend_refuses_a_key_outside_its_root(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path / "repo")
    for key in ("../escape", "packages/../../escape", "/etc/x", "a//b"):
        with pytest.raises(CairnError, match="object key"):
            backend.put(key, b"x", content_type="text/plain", immutable=True)
        with pytest.raises(CairnError, match="object key"):
            backend.get(key)
    assert files_under(tmp_path) == set()
    assert backend.put("simple/fam/p/", b"page", content_type="text/html", immutable=False)  # the directory alias
    assert (tmp_path / "repo" / "simple" / "fam" / "p" / "index.html").read_bytes() == b"page"


# -- cairn publish on a hostile bundle -----------------------------------------------------------------------
def _artifact(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["artifacts"][0][field] = value
    return edit


def _release(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["release"][field] = value
    return edit


def _cell(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["cells"][0][field] = value
    return edit


HOSTILE = [
    ("family climbs", _artifact("family", "../../escape"), "family '../../escape'"),
    ("family absolute", _artifact("family", "/tmp/escape"), "family '/tmp/escape'"),
    ("path climbs", _artifact("path", "../../bundle.json"), "path '../../bundle.json'"),
    ("path absolute", _artifact("path", "/etc/hostname"), "path '/etc/hostname'"),
    ("dockerfile path climbs", lambda d: d["artifacts"][1].update(path="../../../escape/Dockerfile"), "path '../../../escape/Dockerfile'"),
    ("version climbs", _release("version", "../../escape"), "version '../../escape'"),
    ("version is a path", _release("version", "5.2.3/../../x"), "version '5.2.3/../../x'"),
    ("gfx target climbs", _cell("gfx_target", "../../escape"), "gfx_target '../../escape'"),
    ("cell family climbs", _cell("family", ".."), "family '..'"),
    ("wheel name is not a wheel", lambda d: d["artifacts"][0].update(path="wheels/x/-.whl"), "not a wheel file name"),
]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_bundle(tmp_path_factory.mktemp("sample") / "bundle", families=("gfx90a",))


def _hostile_copy(sample: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    bundle = tmp_path / "work" / "bundle"
    shutil.copytree(sample, bundle)
    data = json.loads((bundle / "bundle.json").read_text())
    edit(data)
    (bundle / "bundle.json").write_text(json.dumps(data, indent=1))
    return bundle


@pytest.mark.parametrize(("case", "edit", "what"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_publish_refuses_a_hostile_bundle_and_writes_nothing(sample: Path, tmp_path: Path, case: str,
                                                              edit: Callable[[dict[str, Any]], None], what: str) -> None:
    bundle = _hostile_copy(sample, tmp_path, edit)
    before = files_under(tmp_path)
    proc = cairn("publish", str(bundle), "--dev-keys", "--to", (tmp_path / "work" / "repo").as_uri(), "--store", str(tmp_path / "work" / "store"))
    line = one_line(proc)
    assert line.startswith(f"cairn publish: {bundle / 'bundle.json'}: "), line
    assert what in line
    assert files_under(tmp_path) == before, "publish wrote something before refusing"


def test_publish_refuses_an_artifact_that_is_a_symlink_out_of_the_bundle(sample: Path, tmp_path: Path) -> None:
    bundle = _hostile_copy(sample, tmp_path, lambda d: None)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for publishing\n")
    dockerfile = bundle / "files" / "dockerfiles" / "gfx90a" / "Dockerfile"
    dockerfile.unlink()
    dockerfile.symlink_to(secret)
    data = json.loads((bundle / "bundle.json").read_text())
    import hashlib
    data["artifacts"][1]["sha256"] = hashlib.sha256(secret.read_bytes()).hexdigest()
    (bundle / "bundle.json").write_text(json.dumps(data))
    before = files_under(tmp_path)
    proc = cairn("publish", str(bundle), "--dev-keys", "--to", (tmp_path / "repo").as_uri(), "--store", str(tmp_path / "store"))
    line = one_line(proc)
    assert "dockerfiles/gfx90a/Dockerfile" in line and "outside the bundle" in line, line
    assert files_under(tmp_path) == before


# -- manifests and recipes: names that become file names ---------------------------------------------------
def _manifest_with(tmp_path: Path, source: str) -> Path:
    from support.mutations import VALID

    text = VALID.replace('source.deb = { package = "libfoo1", version = "1.0-1", sha256 = "' + "a" * 64 + '" }', source)
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("source", "what"), [
    ('source.pypi = { name = "x", version = "1.0", filename = "../../x-1.0.tar.gz", sha256 = "' + "a" * 64 + '" }',
     "file name '../../x-1.0.tar.gz' contains a path separator"),
    ('source.pypi = { name = "x", version = "1.0", filename = "..", sha256 = "' + "a" * 64 + '" }', "file name '..' is '..'"),
    ('source.archive = { url = "https://example.invalid/x/..", sha256 = "' + "a" * 64 + '" }', "archive file name '..' is '..'"),
])
def test_a_manifest_source_saved_under_a_climbing_name_is_refused(tmp_path: Path, source: str, what: str) -> None:
    path = _manifest_with(tmp_path, source)
    line = one_line(cairn("check", str(path)))
    assert line.startswith(f"{path}:13:"), line  # the source line
    assert what in line, line


def test_a_mirrored_file_name_that_climbs_is_refused(tmp_path: Path, repo_root: Path) -> None:
    from cairn.model.wheel_recipes import load_recipe

    text = (repo_root / "recipes" / "wheels" / "jax.toml").read_text()
    assert 'filename = "jax_rocm7_plugin-' in text
    path = tmp_path / "jax.toml"
    path.write_text(text.replace('filename = "jax_rocm7_plugin-', 'filename = "../../jax_rocm7_plugin-', 1))
    with pytest.raises(InputError, match=r"mirrored file name '\.\./\.\./jax_rocm7_plugin-.*' contains a path separator") as caught:
        load_recipe("jax", path)
    assert str(caught.value).startswith(f"{path}:{text[: text.index('filename = ')].count(chr(10)) + 1}:")


@pytest.mark.parametrize(("key", "value"), [("template", "../../../etc/x"), ("wheels", '["../../x"]')])
def test_a_container_recipe_name_that_climbs_is_refused(tmp_path: Path, repo_root: Path, key: str, value: str) -> None:
    root = tmp_path / "checkout"
    for sub in ("manifests", "recipes", "publish"):
        shutil.copytree(repo_root / sub, root / sub)
    recipe = root / "recipes" / "containers" / "smoke.toml"
    lines = [line for line in recipe.read_text().splitlines() if not line.startswith(f"{key} =")]
    lines.append(f'{key} = "{value}"' if key == "template" else f"{key} = {value}")
    recipe.write_text("\n".join(lines) + "\n")
    line = one_line(cairn("plan", extra_env={"CAIRN_ROOT": str(root)}))
    assert "recipes/containers/smoke.toml: " in line and "contains a path separator" in line, line


# -- image layers and wheel indexes in the store ------------------------------------------------------------
def test_a_docker_save_manifest_naming_files_outside_is_refused(tmp_path: Path) -> None:
    from cairn.containers.image import read_saved

    saved = tmp_path / "saved"
    saved.mkdir()
    (tmp_path / "outside.json").write_text("{}")
    for layers, what in ((["../outside.json"], "has a part that is '..'"), (["/etc/passwd"], "is absolute")):
        (saved / "manifest.json").write_text(json.dumps([{"Config": "config.json", "Layers": layers}]))
        with pytest.raises(InputError, match=what):
            read_saved(saved)
    (saved / "manifest.json").write_text("[]")
    with pytest.raises(InputError, match="not a docker save manifest"):
        read_saved(saved)


def test_a_layer_member_that_climbs_is_refused(tmp_path: Path) -> None:
    import io
    import tarfile

    from cairn.formats.oci import normalize_layer

    src = tmp_path / "layer.tar"
    with tarfile.open(src, "w") as tar:
        for name in ("usr/lib/ok", "usr/../../escape"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(CairnError, match=r"layer member 'usr/../../escape' has a part that is '\.\.'"):
        normalize_layer(src, tmp_path / "out.tar", 1700000000)


def test_an_index_page_naming_a_file_outside_is_refused(tmp_path: Path) -> None:
    from cairn.containers.wheels import stage

    index = tmp_path / "index"
    page = index / "gfx90a" / "simple" / "cairn-smoke" / "index.v1.json"
    page.parent.mkdir(parents=True)
    page.write_text(json.dumps({"files": [{"filename": "../../../../secret.whl", "hashes": {"sha256": "a" * 64}}]}))
    with pytest.raises(InputError, match=re.escape("wheel file name '../../../../secret.whl' contains a path separator")):
        stage(index, "gfx90a", ["cairn-smoke"], tmp_path / "context")
    assert not (tmp_path / "context").exists() or not any((tmp_path / "context").iterdir())


# -- the store's action cache and a repository's signed names ------------------------------------------------
def test_an_action_cache_record_naming_a_tree_outside_the_store_is_a_miss(tmp_path: Path) -> None:
    from cairn.store.local import LocalStore

    store = LocalStore(tmp_path / "store")
    (tmp_path / "outside").mkdir()
    for output in ("../../outside", "/tmp", 5):
        (store.root / "ac" / "k.json").write_text(json.dumps({"key": "k", "action": "a", "output": output}))
        assert store.lookup("k") is None


def test_verify_refuses_a_signed_target_name_that_climbs_out_of_the_repository(tmp_path: Path, sample: Path) -> None:
    import hashlib

    from tuf.api.serialization.json import JSONSerializer

    from cairn.errors import CheckFailed
    from cairn.matrix.bundle import load_bundle
    from cairn.publish.publisher import publish
    from cairn.sign.keys import init_keys, make_root
    from cairn.sign.tuf import read_state, sign_state, target_file
    from cairn.sign.verify import verify_repository

    keys = init_keys(tmp_path / "keys")
    root = make_root(keys)
    repo = tmp_path / "site" / "repo"
    publish(load_bundle(sample), FileBackend(repo), keys, root)
    secret = b"a file next to the repository, not in it\n"
    (tmp_path / "site" / "secret.txt").write_bytes(secret)
    (tmp_path / "site" / f"{hashlib.sha256(secret).hexdigest()}.secret.txt").write_bytes(secret)
    state = read_state(FileBackend(repo))
    targets = {**state.target_files(), "../secret.txt": target_file("../secret.txt", secret)}
    signed = sign_state(keys, root, state, targets, force=True)
    assert signed is not None
    for key, data, _immutable in signed.files:  # written as a compromised signer would, not through the backend
        (repo / key).write_bytes(data)
    with pytest.raises(CheckFailed, match=r"'\.\./secret\.txt': a signed target name that has a part that is '\.\.'"):
        verify_repository(str(repo), root.to_bytes(JSONSerializer(compact=False)), tmp_path / "cache")
