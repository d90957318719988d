"""``cairn diff``: what changed between two manifests, bundles or published repositories, as the user sees it
(the command's text and ``--json``), and one line for every kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.matrix.bundle import load_bundle
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.keys import init_keys, make_root

SHA = {n: f"{n:x}" * 64 for n in range(1, 6)}


def _diff(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "cairn.cli", "diff", *args], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _json(*args: str) -> dict:
    return json.loads(_diff(*args, "--json").stdout)


def _manifest(path: Path, *, families: str, parts: dict[str, tuple[str, str]]) -> Path:
    text = [f'[release]\nname = "diff-test"\nversion = "1.0.0"\nchannel = "dev"\nsource_date_epoch = 1700000000\n'
            f'base_os = "debian-12"\nfamilies = [{families}]\n\n[core]']
    for name, (version, sha) in parts.items():
        text.append(f'[[core.components]]\nname = "{name}"\nversion = "{version}"\n'
                    f'source.archive = {{ url = "http://127.0.0.1:9/{name}.txt", sha256 = "{sha[:64]}" }}\nbuild = {{ kind = "copy" }}\n')
    path.write_text("\n".join(text))
    return path


def test_two_manifests_name_the_pins_components_and_targets_that_changed(tmp_path) -> None:
    old = _manifest(tmp_path / "old.toml", families='"gfx90a", "gfx908"',
                    parts={"kept": ("1.0", SHA[1]), "bumped": ("1.0", SHA[2]), "dropped": ("1.0", SHA[3])})
    new = _manifest(tmp_path / "new.toml", families='"gfx90a", "gfx1030"',
                    parts={"kept": ("1.0", SHA[1]), "bumped": ("1.1", SHA[4]), "added": ("2.0", SHA[5])})
    diff = _json(str(old), str(new))
    assert [c["name"] for c in diff["components"]["added"]] == ["added"]
    assert [c["name"] for c in diff["components"]["removed"]] == ["dropped"]
    assert diff["components"]["changed"] == [{"name": "bumped", "pin": [f"archive:{SHA[2]}", f"archive:{SHA[4]}"],
                                             "version": ["1.0", "1.1"]}]
    assert diff["families"] == {"gained": ["gfx1030"], "lost": ["gfx908"]}
    assert diff["targets"] == {"gained": ["gfx1030"], "lost": ["gfx908"]}
    assert "manifest_sha256" in diff["release"] and "version" not in diff["release"]
    assert any(line.startswith("cells, wheels, images and gate results") for line in diff["not_compared"])
    assert "cells" not in diff and diff["identical"] is False

    text = _diff(str(old), str(new)).stdout
    assert f"~ component bumped: pin archive:{SHA[2]} → archive:{SHA[4]}; version 1.0 → 1.1" in text
    assert "+ component added 2.0" in text and "- component dropped 1.0" in text
    assert "families: +gfx1030, -gfx908" in text
    same = _json(str(old), str(old))
    assert same["identical"] is True and same["release"] == {}


def test_the_legacy_and_the_new_default_release(repo_root) -> None:
    """The issue's own case: the legacy release (Debian 12, ROCm 5.2) against the new default (ROCm 7.2.4)."""
    diff = _json("rocm-5.2.3", "default")
    changed = {c["name"]: c for c in diff["components"]["changed"]}
    assert changed["hip-runtime"]["pin"] == ["deb:libamdhip64-5=5.2.3-8", "deb:libamdhip64-7=7.2.4-1~exp2"]
    assert "rocblas" in {c["name"] for c in diff["components"]["added"]}
    assert "gfx908" in diff["targets"]["lost"] and "gfx942" in diff["targets"]["gained"]
    assert diff["release"]["base_os"] == ["debian-12", "debian-sid"]


def _bundles(tmp_path: Path) -> tuple[Path, Path]:
    old = write_sample_bundle(tmp_path / "old", version="5.2.3", families=("gfx90a", "gfx1030"))
    new = write_sample_bundle(tmp_path / "new", version="5.2.4", families=("gfx90a", "gfx1100"), seed="rebuilt",
                              gates={"gfx90a": {"static-coverage": "failed"}})
    return old, new


def test_two_bundles_name_wheels_images_and_gate_results_that_changed(tmp_path) -> None:
    old, new = _bundles(tmp_path)
    diff = _json(str(old), str(new))
    assert diff["cells"]["added"] == ["gfx1100/debian-12/py3.11/cairn-smoke"]
    assert diff["cells"]["removed"] == ["gfx1030/debian-12/py3.11/cairn-smoke"]
    [cell] = diff["cells"]["changed"]
    assert cell["cell"] == "gfx90a/debian-12/py3.11/cairn-smoke"
    [wheel] = cell["wheels"]
    assert wheel["from"]["file"] == "cairn_smoke-5.2.3-py3-none-linux_x86_64.whl"
    assert wheel["to"]["file"] == "cairn_smoke-5.2.4-py3-none-linux_x86_64.whl"
    assert wheel["from"]["sha256"] == load_bundle(old).artifacts[0].sha256 != wheel["to"]["sha256"]
    assert cell["images"] == [{"image": "127.0.0.1:5000/cairn/smoke", "from": load_bundle(old).cells[0].images[0].digest,
                               "to": load_bundle(new).cells[0].images[0].digest}]
    assert cell["gates"] == [{"gate": "static-coverage", "from": "passed", "to": "failed"}]
    assert diff["components"] == {"added": [], "removed": [], "changed": []}  # both bundles carry the same pins
    assert any(line.startswith("gfx targets:") for line in diff["not_compared"])

    text = _diff(str(old), str(new)).stdout
    assert "~ cell gfx90a/debian-12/py3.11/cairn-smoke: gate static-coverage passed → failed" in text
    assert "+ cell gfx1100/debian-12/py3.11/cairn-smoke" in text


def test_a_bundle_against_a_manifest_compares_only_the_pins(tmp_path) -> None:
    bundle = write_sample_bundle(tmp_path / "b", families=("gfx90a",))
    diff = _json("rocm-5.2.3", str(bundle))  # the sample bundle carries the legacy release's pins
    assert diff["b"]["kind"] == "bundle"
    assert not [c for c in diff["components"]["changed"] if c["name"] == "hip-runtime"]  # same pin on both sides
    assert "hsakmt" in {c["name"] for c in diff["components"]["removed"]}  # the sample bundle records one pin only
    assert {line.split(":")[0] for line in diff["not_compared"]} >= {"cells, wheels, images and gate results", "gfx targets"}


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("diff-repo")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    old, new = _bundles(base)
    for bundle in (old, new):
        publish(load_bundle(bundle), FileBackend(base / "repo"), keys, root)
    return base / "repo"


def test_two_releases_of_a_published_repository(repository) -> None:
    diff = _json(f"{repository}@5.2.3", f"{repository}@5.2.4")
    assert diff["a"]["kind"] == diff["b"]["kind"] == "repository"
    assert diff["release"]["version"] == ["5.2.3", "5.2.4"]
    [cell] = diff["cells"]["changed"]
    assert cell["gates"] == [{"gate": "static-coverage", "from": "passed", "to": "failed"}]
    assert [w["to"]["file"] for w in cell["wheels"]] == ["cairn_smoke-5.2.4-py3-none-linux_x86_64.whl"]
    assert diff["components"] == {"added": [], "removed": [], "changed": []}  # the staging records keep the pins


def test_a_repository_published_before_records_kept_pins_does_not_compare_them(repository, tmp_path) -> None:
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(repository, copy)
    record = copy / "staging" / "5.2.3" / "release.json"
    doc = json.loads(record.read_text())
    del doc["release"]["pins"]
    record.write_text(json.dumps(doc))
    diff = _json(f"{copy}@5.2.3", f"{copy}@5.2.4")
    assert "components" not in diff
    assert any(line.startswith("component pins:") and "@5.2.3 does not record them" in line for line in diff["not_compared"])


def test_bad_input_is_one_line(tmp_path, repository) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "bundle.json").write_text("{not json")
    cases = [("no-such-release", "no such manifest"),
             (str(tmp_path / "empty"), "neither a release bundle"),
             (str(tmp_path / "broken"), "cannot read the release bundle"),
             (str(repository), "holds 2 staged releases"),
             (f"{repository}@9.9.9", "has no staged release '9.9.9'"),
             (f"{repository}@../..", "has no staged release")]
    for arg, expected in cases:
        proc = _diff("default", arg, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr
        assert proc.stdout == ""


@pytest.mark.s3
def test_two_releases_of_a_repository_in_s3(tmp_path, monkeypatch) -> None:
    BUCKET = "cairn-releases"
    from support.s3 import env
    from support.servers import moto_s3

    with moto_s3(BUCKET) as s3:
        environ = env(s3, tmp_path)
        for name in ("CAIRN_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            monkeypatch.setenv(name, environ[name])
        from cairn.remote.backend import open_backend

        keys = init_keys(tmp_path / "keys")
        root = make_root(keys)
        for bundle in _bundles(tmp_path):
            publish(load_bundle(bundle), open_backend(f"s3://{BUCKET}/diff"), keys, root)
        proc = subprocess.run([sys.executable, "-m", "cairn.cli", "diff", f"s3://{BUCKET}/diff@5.2.3", f"s3://{BUCKET}/diff@5.2.4", "--json"],
                              capture_output=True, text=True, env=environ, timeout=120)
        assert proc.returncode == 0, proc.stderr
        diff = json.loads(proc.stdout)
        [cell] = diff["cells"]["changed"]
        assert cell["gates"] == [{"gate": "static-coverage", "from": "passed", "to": "failed"}]
        bare = subprocess.run([sys.executable, "-m", "cairn.cli", "diff", "default", f"s3://{BUCKET}/diff"],
                              capture_output=True, text=True, env=environ, timeout=120)
        assert bare.returncode == 2 and bare.stderr.strip() == (
            f"cairn diff: s3://{BUCKET}/diff: holds 2 staged releases (5.2.3, 5.2.4) — name one as s3://{BUCKET}/diff@VERSION")
