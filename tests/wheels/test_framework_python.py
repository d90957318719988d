"""A framework the registry serves only for other Pythons than the release's images run: its cells say exactly
that, instead of the framework silently vanishing from the release (onnxruntime-rocm 1.22.2.post1 has wheels
for Python 3.10–3.13; the ROCm 7.2.4 images run 3.14)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cairn.execute.runners import ActionContext
from cairn.matrix.bundle import load_bundle
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.model.wheel_recipes import load_recipe
from cairn.plan.prepare import make_plan
from cairn.plan.probe import Host
from cairn.publish.run import run_bundle
from cairn.stages import chosen
from support import ROOT

HOST = Host(tools=frozenset({"git", "pip", "patchelf", "apt-get", "dpkg-deb"}))
FAMILY = "gfx94X-dcgpu"
ORT = ('\n[frameworks.onnxruntime]\nrecipe = "onnxruntime-rocm"\nversion = "1.22.2.post1"\n'
       'pin_unknown = "no wheel of 1.22.2.post1 for Python 3.14"\n')
REASON = ("onnxruntime-rocm 1.22.2.post1 is served for Python 3.10–3.13 only (4 wheels in "
          "recipes/wheels/onnxruntime-rocm.toml), and this release's images run Python 3.14")


@pytest.fixture(scope="module")
def actions(tmp_path_factory) -> dict:
    manifest = tmp_path_factory.mktemp("m") / "rocm-7.2.4.toml"
    manifest.write_text((ROOT / "manifests" / "releases" / "default.toml").read_text() + ORT)
    registry = load_registry()
    stages = ["wheels", "images", "gates", "bundle"]
    return make_plan(load_manifest(manifest, registry), registry, [FAMILY], host=HOST, stages=chosen(stages)).by_id()


def test_the_mirror_is_planned_blocked_with_the_pythons_the_registry_serves(actions):
    mirror = actions["mirror:onnxruntime-rocm-1.22.2.post1"]
    assert mirror.blocked == REASON
    index = actions[f"index:{FAMILY}"]
    assert mirror.id not in index.deps  # the family's index is not held back by it


def test_every_cell_of_the_framework_says_why_in_the_matrix(actions, tmp_path):
    bundle = actions["bundle:release"]
    assert bundle.inputs["blocked_frameworks"] == {"onnxruntime": {"version": "1.22.2.post1", "reason": REASON}}
    with open(tmp_path / "log", "w") as log:  # the bundle runner itself, over no built dependency at all
        run_bundle(ActionContext(bundle, tmp_path / "out", log, {}, {}))
    loaded = load_bundle(tmp_path / "out")
    cells = [c for c in loaded.cells if c.framework == "onnxruntime"]
    targets = sorted(load_registry().expand(FAMILY))
    assert sorted(c.gfx_target for c in cells) == targets and {c.python for c in cells} == {"3.14"}
    for cell in cells:
        gates = {g.gate: (g.status, g.reason) for g in loaded.gates_for(cell)}
        assert gates["static-coverage"] == ("not-run", f"not-run: {REASON}")


@pytest.mark.network
def test_the_registry_serves_post1_up_to_python_3_13_only(tmp_path):
    """pip's own answer, for the release's Python and the newest one the recipe pins."""
    def ask(python: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                               "--disable-pip-version-check", "--python-version", python, "--only-binary=:all:",
                               "--target", str(tmp_path / "t"), "--report", str(tmp_path / f"{python}.json"),
                               "onnxruntime-rocm==1.22.2.post1"], capture_output=True, text=True, timeout=600)
    assert ask("3.14").returncode != 0
    assert ask("3.13").returncode == 0
    got = json.loads((tmp_path / "3.13.json").read_text())["install"][0]["download_info"]
    pinned = next(f for f in load_recipe("onnxruntime-rocm").mirror_files("1.22.2.post1") if f.python == "3.13")
    assert (got["url"].rsplit("/", 1)[1], got["archive_info"]["hashes"]["sha256"]) == (pinned.filename, pinned.sha256)
