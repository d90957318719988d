"""The release flow (``cairn release X.Y.Z[rcN]``, which ``nox -s release`` runs): refusals before anything is built, and an rc promoted
to the final version by re-signing the staged bytes, without a rebuild."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.publish.sample import write_sample_bundle
from cairn.release import ReleaseRefused, check_clean, parse_version, release
from cairn.sign.keys import init_keys, make_root
from cairn.sign.verify import verify_repository
from support import LEGACY_MANIFEST, ROOT, cairn, need_tool


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True)


def test_dirty_tree_is_refused(tmp_path):
    need_tool("git")
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-qm", "init")
    check_clean(tmp_path)  # clean: no error
    (tmp_path / "a.txt").write_text("two\n")
    with pytest.raises(ReleaseRefused, match=r"the working tree is dirty \(a.txt\) — commit or remove the changes"):
        check_clean(tmp_path)
    (tmp_path / "a.txt").write_text("one\n")
    (tmp_path / "new.py").write_text("")
    with pytest.raises(ReleaseRefused, match=r"dirty \(new.py\)"):
        check_clean(tmp_path)


@pytest.mark.parametrize(("version", "message"), [
    ("5.3.0", r"release 5.3.0 does not match rocm-5.2.3.toml \(version 5.2.3\) — release 5.2.3\[rcN\]"),
    ("5.2.3rc", "is not a release version — write X.Y.Z or X.Y.ZrcN"),
    ("v5.2.3", "is not a release version"),
])
def test_version_not_matching_the_manifest_is_refused_before_building(version, message, tmp_path):
    with pytest.raises(ReleaseRefused, match=message):
        release(version, manifest_path=LEGACY_MANIFEST, root=ROOT, to=(tmp_path / "repo").as_uri(),
                keys_dir=tmp_path / "no-keys", store=tmp_path / "store", check_tree=False)
    assert not (tmp_path / "store").exists() and not (tmp_path / "repo").exists()


def test_cli_refuses_with_one_line_and_exit_1(tmp_path):
    out = cairn("release", "6.0.0", "--store", tmp_path / "s", cwd=ROOT, code=1)
    assert out.stderr.startswith("cairn release: ") and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()  # refused (a dirty tree here, another version in CI) before building


def test_the_build_is_handed_in_and_a_failed_one_publishes_nothing(tmp_path):
    """``release`` builds through the builder it is handed (``cairn release`` hands it ``cairn build``'s own
    function with the stage table): asked with the manifest and the store, and a failed build stops the release."""
    keys = init_keys(tmp_path / "keys")
    (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
    asked: list[tuple[Path, Path]] = []

    def failing_build(manifest: Path, store: Path) -> bool:
        asked.append((manifest, store))
        return False

    with pytest.raises(ReleaseRefused, match=r"the build of rocm-5\.2\.3\.toml failed .*nothing was published"):
        release("5.2.3rc1", manifest_path=LEGACY_MANIFEST, root=ROOT, to=(tmp_path / "repo").as_uri(),
                keys_dir=keys.directory, store=tmp_path / "store", check_tree=False, build=failing_build, log=lambda _: None)
    assert asked == [(LEGACY_MANIFEST, tmp_path / "store")]
    assert not any((tmp_path / "repo").rglob("*.json"))


def test_rc_then_final_promotes_without_rebuilding(tmp_path):
    keys = init_keys(tmp_path / "keys")
    root = make_root(keys).to_bytes(JSONSerializer(compact=False))
    (keys.directory / "root.json").write_bytes(root)
    passed = {"static-coverage": "passed", "in-container": "passed", "gpu": "passed"}
    gates = {"gfx908": passed, "gfx90a": passed, "gfx1030": {**passed, "gpu": "not-run"}}
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.2.3", families=tuple(gates), gates=gates)
    repo = tmp_path / "repo"
    messages: list[str] = []
    common = {"manifest_path": LEGACY_MANIFEST, "root": ROOT, "to": repo.as_uri(), "keys_dir": keys.directory,
              "check_tree": False, "log": messages.append}

    rc = release("5.2.3rc1", store=tmp_path / "store", bundle=bundle, **common)
    assert rc.channel == "prerelease" and len(rc.promoted) == 3 and not rc.held
    assert parse_version("5.2.3rc1") == ("5.2.3", "rc1")

    # the final release: no bundle and a store that holds nothing — it must not build, only re-sign
    final = release("5.2.3", store=tmp_path / "empty-store", bundle=None, **common)
    assert "promoting staged 5.2.3rc1 as 5.2.3 to stable: re-signing, nothing is rebuilt" in messages
    assert not (tmp_path / "empty-store").exists()
    assert final.channel == "stable" and final.version == "5.2.3"
    assert sorted(c.split("/")[1] for c in final.promoted) == ["gfx908", "gfx90a"]
    assert list(final.held) == ["5.2.3/gfx1030/debian-12/py3.11/cairn-smoke-0.1.0"]
    matrix = json.loads((repo / "channels" / "stable" / "matrix.json").read_text())
    assert matrix["release"]["version"] == "5.2.3" and {c["gfx_target"] for c in matrix["cells"]} == {"gfx908", "gfx90a"}
    staged = json.loads((repo / "staging" / "5.2.3" / "release.json").read_text())
    assert staged["release"]["promoted_from"] == "5.2.3rc1"
    rc_files = json.loads((repo / "staging" / "5.2.3rc1" / "release.json").read_text())["files"]
    assert staged["files"] == rc_files  # the very same blobs
    verify_repository(str(repo), root, tmp_path / "tuf")
