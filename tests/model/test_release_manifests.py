"""The production manifests claim only what the reference data says TheRock builds at each release's ref.

Facts are copied from the reference data's TheRock extract (``therock-artifacts.toml``: the topology at main,
89553ce, which is also the 10.1.0 manifest's ref, and ``[[diff_vs_main]]`` for tag therock-7.14); when that
data is beside the repository the copies are checked against it too.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from cairn.model.manifest import load_manifest
from support import ROOT

RELEASES = ROOT / "manifests" / "releases"
# [[diff_vs_main]] ref = "tag therock-7.14 (7.14.0)": what exists only after the tag
ONLY_AFTER_7_14 = {"stages": {"cv-libs"}, "artifacts": {"hipthreads", "kfdtest", "mirage", "rocjitsu-hotswap", "rpp"}}
# [artifact."base"].stage_dirs at main (the 10.1.0 ref) still stage ROCm SMI
BASE_STAGE_DIRS_AT_MAIN = ("base/rocm_smi_lib/stage",)


def reference_data() -> Path | None:
    for candidate in (ROOT.parent / "shared" / "reference" / "data", Path("/work/shared/reference/data")):
        if (candidate / "therock-artifacts.toml").is_file():
            return candidate / "therock-artifacts.toml"
    return None


def test_copied_facts_match_the_reference_data_when_it_is_here():
    path = reference_data()
    if path is None:
        return  # the copies above are then the reference
    data = tomllib.loads(path.read_text())
    diff = next(d for d in data["diff_vs_main"] if d["ref"].startswith("tag therock-7.14"))
    assert set(diff["stages_only_in_main"]) == ONLY_AFTER_7_14["stages"]
    assert set(diff["artifacts_only_in_main"]) == ONLY_AFTER_7_14["artifacts"]
    assert set(BASE_STAGE_DIRS_AT_MAIN) <= set(data["artifact"]["base"]["stage_dirs"])


def test_7_14_builds_nothing_therock_added_after_its_tag():
    manifest = load_manifest(RELEASES / "rocm-7.14.0.toml")
    late = [(c.name, c.build.arg("stage"), c.build.arg("artifact")) for c in manifest.components
            if c.build.arg("stage") in ONLY_AFTER_7_14["stages"] or c.build.arg("artifact") in ONLY_AFTER_7_14["artifacts"]]
    assert late == []


def test_rocm_smi_is_built_where_the_reference_data_stages_it():
    """The 10.1 release notes announce ROCm SMI's removal, but TheRock at the 10.1.0 ref still stages it in
    the base artifact: the manifest must build it there, in both releases, and not claim it gone."""
    for name in ("rocm-7.14.0", "rocm-10.1.0"):
        path = RELEASES / f"{name}.toml"
        smi = [c for c in load_manifest(path).components if c.build.arg("subproject") == "rocm_smi_lib"]
        assert [(c.name, c.build.arg("artifact")) for c in smi] == [("rocm-smi-lib", "base")], name
        assert "removes rocm-smi" not in path.read_text() and "removed in 10.1" not in path.read_text()
