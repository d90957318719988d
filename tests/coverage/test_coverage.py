"""Coverage from the audit, not from labels: real experimental libraries, measured, compared with their labels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.coverage.model import ComponentCoverage, data_file_target, label_differences, release_coverage
from cairn.model.targets import load_registry
from support import ROOT, need_tool

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"


def test_data_file_names_give_their_target() -> None:
    assert data_file_target("Kernels.so-000-gfx1100.hsaco") == "gfx1100"
    assert data_file_target("TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_gfx90a.co") == "gfx90a"
    assert data_file_target("hipblasltExtOpLibrary.dat") is None


def test_a_family_missing_one_library_is_partial_naming_it() -> None:
    registry = load_registry()
    blas = ComponentCoverage("blas", "libblas", ("gfx1100", "gfx1101"), {"lib/libblas.so": ("gfx1100", "gfx1101")})
    sparse = ComponentCoverage("sparselt", "libsparselt", ("gfx942",), {"lib/libsparselt.so": ("gfx942",)})
    generic = ComponentCoverage("ck", "libck", (), {"lib/libck.so": ("gfx11-generic",)})
    result = release_coverage([blas, sparse, generic], {"gfx110X-dgpu": ("gfx1100", "gfx1101", "gfx1102")}, registry)
    family = result["families"]["gfx110X-dgpu"]
    assert not family["complete"]
    assert family["targets"]["gfx1100"] == {"complete": False, "missing": ["sparselt: lib/libsparselt.so"]}
    assert family["targets"]["gfx1102"]["missing"] == ["blas: lib/libblas.so", "sparselt: lib/libsparselt.so"]
    # the generic code object covers every RDNA3 member: ck never shows up as missing there
    assert all("ck:" not in m for t in family["targets"].values() for m in t["missing"])


def test_labels_that_disagree_with_the_audit_are_reported() -> None:
    registry = load_registry()
    over = ComponentCoverage("rocfoo", "librocfoo1", ("gfx942", "gfx1100"), {"lib/librocfoo.so": ("gfx942",)})
    assert label_differences(over, registry) == {"declared_not_measured": ["gfx1100"]}
    under = ComponentCoverage("rocbar", "librocbar1", ("gfx942",), {"lib/librocbar.so": ("gfx942", "gfx90a")})
    assert label_differences(under, registry) == {"measured_not_declared": ["gfx90a"]}
    hollow = ComponentCoverage("hipbaz", "libhipbaz0", ("gfx942",), {})
    assert label_differences(hollow, registry) == {"declared_but_no_device_code": ["gfx942"]}


@pytest.mark.network
@pytest.mark.slow
def test_real_experimental_libraries_measured_against_their_labels(tmp_path: Path) -> None:
    need_tool("dpkg-deb", "dpkg")
    store = tmp_path / "store"
    only = ["coverage:hipsparselt", "coverage:rocrand"]
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", str(MANIFEST), "--store", str(store),
                             *[a for o in only for a in ("--only", o)]], capture_output=True, text=True, cwd=ROOT,
                            timeout=1800)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    actions = json.loads((store / "last-build.json").read_text())["actions"]
    measured = {name: ComponentCoverage.from_json(json.loads(
        (store / "trees" / actions[f"coverage:{name}"]["output"] / "coverage.json").read_text()))
        for name in ("hipsparselt", "rocrand")}
    sparselt, rand = measured["hipsparselt"], measured["rocrand"]
    registry = load_registry()
    # hipSPARSELt's library really holds MI300/MI355 code only, as Debian's label says
    assert sparselt.declared == ("gfx942", "gfx950")
    assert sparselt.measured(registry, ("gfx942", "gfx950", "gfx1100")) == ("gfx942", "gfx950")
    assert label_differences(sparselt, registry) == {}
    assert set(rand.measured(registry, ("gfx942", "gfx1100", "gfx1151", "gfx1201"))) == {"gfx942", "gfx1100", "gfx1151", "gfx1201"}
    cells = release_coverage([sparselt, rand], {"gfx1151": ("gfx1151",), "gfx94X-dcgpu": ("gfx942",)}, registry)
    assert cells["families"]["gfx94X-dcgpu"]["complete"]
    assert cells["families"]["gfx1151"]["targets"]["gfx1151"]["missing"] == [
        "hipsparselt: hipsparselt per-target kernel files", "hipsparselt: lib/libhipsparselt.so.0.2"]


def test_a_component_measured_in_two_stores_gives_the_same_record(tmp_path: Path) -> None:
    """Shard jobs each unpack into their own store: a record naming the store's path is another record.

    Experimental's ``librccl.so.1.0`` has 38 wrappers for its one bundle, and the audit notes that; the note
    named the store's path, so ``coverage:rccl`` (and the release's coverage, its gates and the bundle)
    differed between the shard jobs and one build (bench/results/shards.json).
    """
    import io
    import shutil

    from cairn.coverage.run import measure_component
    from support.fatbin_writer import bundle_for, section, write_elf

    need_tool("gcc", "gcc")
    first = tmp_path / "store-a" / "tree"
    (first / "lib").mkdir(parents=True)
    # two wrappers for one bundle: the audit notes the mismatch
    write_elf(first / "lib" / "librccl.so.1", section([bundle_for(["gfx1100"])]), wrappers=2)
    second = tmp_path / "elsewhere" / "store-b" / "tree"
    shutil.copytree(first, second)
    records = [measure_component("rccl", "librccl1", tree, None, io.StringIO()).to_json() for tree in (first, second)]
    assert records[0] == records[1]
    assert records[0]["notes"] == ["lib/librccl.so.1: 2 wrappers in .hipFatBinSegment but 1 bundles"]
