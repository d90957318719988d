"""``rocm-sdk-device-<gfx>``: the family's libraries wheel cut to one target, and the extras that name it.

Synthetic fat binaries (``fatbin_writer``) stand in for Debian's; the default slice (``test_default_slice``)
checks the same on the real ROCm 7.2.4 libraries."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from cairn.audit import audit_file
from cairn.errors import CheckFailed
from cairn.model.records import WheelReport
from cairn.model.targets import load_registry
from support import ROOT
from support.fatbin_writer import bundle_for, ccob, section, write_elf

INPUTS = {"sdk_version": "7.2.4", "source_date_epoch": 1700000000, "release": "test", "channel": "dev"}
FAMILY = ("gfx1100", "gfx1101")


@pytest.fixture
def family_wheel(tmp_path: Path) -> Path:
    """``rocm-sdk-libraries-gfx110X-dgpu`` of a tree whose libccl was built without gfx1101."""
    from cairn.wheels import sdk

    tree = tmp_path / "tree"
    kernels = tree / "lib" / "rocblas" / "5" / "library"
    kernels.mkdir(parents=True)
    write_elf(tree / "lib" / "libblas.so.5", section([ccob(bundle_for(["gfx1100", "gfx1101", "gfx942"])),
                                                      ccob(bundle_for(["gfx1100", "gfx1101"]))], ), wrappers=2)
    write_elf(tree / "lib" / "libccl.so.1", section([ccob(bundle_for(["gfx1100", "gfx942"]))]))
    (tree / "bin").mkdir()
    write_elf(tree / "bin" / "ccltool", None)
    for name in ("TensileLibrary_gfx1100.dat", "TensileLibrary_gfx1101.dat", "TensileLibrary_gfx942.dat",
                 "TensileManifest.txt"):
        (kernels / name).write_bytes(name.encode() * 1000)
    (tree / "share" / "doc" / "librocblas5").mkdir(parents=True)
    (tree / "share" / "doc" / "librocblas5" / "copyright").write_text("Format: machine-readable\n")
    out = tmp_path / "family"
    out.mkdir()
    sdk.build_sdk_wheel(out, sdk.LIBRARIES, tree, INPUTS, io.StringIO(), expansion_owned=sdk.expansion_paths([tree]),
                        family="gfx110X-dgpu", targets=FAMILY)
    assert _record(out).partial() == {"gfx1101": ("lib/libccl.so.1",)}  # what the gates and the bundle read
    return out


def _record(out: Path) -> WheelReport:
    """The wheel's ``report.json`` as the stages read it; the record writes back the very bytes the writer wrote."""
    report = WheelReport.read(out)
    assert json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n" == (out / "report.json").read_text()
    return report


def device(family_tree: Path, tmp_path: Path, target: str, family_targets: tuple[str, ...] = FAMILY) -> tuple[Path, dict]:
    from cairn.wheels.device import build_device_wheel

    out = tmp_path / f"device-{target}"
    out.mkdir()
    log = io.StringIO()
    wheel = build_device_wheel(out, family_tree, {**INPUTS, "family": "gfx110X-dgpu", "target": target,
                                                  "family_targets": list(family_targets)}, log)
    return wheel, _record(out).to_json()


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_a_device_wheel_carries_one_targets_code_and_kernel_files(family_wheel: Path, tmp_path: Path) -> None:
    from cairn.formats import elf

    wheel, report = device(family_wheel, tmp_path, "gfx1100")
    (family,) = (family_wheel / "wheels").glob("*.whl")
    assert wheel.name == f"rocm_sdk_device_gfx1100-7.2.4-{family.name.split('-', 2)[2]}"  # the family wheel's tag
    files = members(wheel)
    kernels = "_rocm_sdk_libraries/lib/rocblas/5/library/"
    assert {n.removeprefix(kernels) for n in files if n.startswith(kernels)} == {"TensileLibrary_gfx1100.dat",
                                                                                 "TensileManifest.txt"}
    for name in ("libblas.so.5", "libccl.so.1"):
        path = tmp_path / name
        path.write_bytes(files[f"_rocm_sdk_libraries/lib/{name}"])
        assert audit_file(path).complete_targets == ("gfx1100",), name  # gfx1101's code is gone from every bundle
    (tmp_path / "tool").write_bytes(files["_rocm_sdk_libraries/bin/ccltool"])
    assert elf.inspect(tmp_path / "tool").runpath == "$ORIGIN:$ORIGIN/../lib:$ORIGIN/../../_rocm_sdk_core/lib"
    metadata = next(v for n, v in files.items() if n.endswith(".dist-info/METADATA")).decode()
    assert "Name: rocm-sdk-device-gfx1100\n" in metadata and "Requires-Dist: rocm-sdk-core==7.2.4\n" in metadata
    assert any(n.endswith(".dist-info/licenses/librocblas5/copyright") for n in files)
    info = json.loads(files["_rocm_sdk_libraries/share/cairn/libraries.json"])
    assert (info["family"], info["target"], info["targets"]) == ("gfx110X-dgpu", "gfx1100", ["gfx1100"])
    assert report["audit"]["coverage"]["gfx1100"]["covered"] and not report["audit"]["partial"]
    assert wheel.stat().st_size < family.stat().st_size


def test_the_same_files_are_the_pep825_variant_of_rocm_sdk_device(family_wheel: Path, tmp_path: Path) -> None:
    wheel, report = device(family_wheel, tmp_path, "gfx1100")
    variant = wheel.with_name(f"rocm_sdk_device-7.2.4-{wheel.name.split('-', 2)[2].removesuffix('.whl')}-gfx1100.whl")
    assert sorted(w["filename"] for w in report["wheels"]) == sorted([wheel.name, variant.name])
    plain, labelled = members(wheel), members(variant)
    assert {n: v for n, v in plain.items() if ".dist-info/" not in n} == {n: v for n, v in labelled.items() if ".dist-info/" not in n}
    assert json.loads(labelled["rocm_sdk_device-7.2.4.dist-info/variant.json"])["variants"] == {
        "gfx1100": {"amd": {"gfx_arch": ["gfx1100"]}}}
    assert "Name: rocm-sdk-device\n" in labelled["rocm_sdk_device-7.2.4.dist-info/METADATA"].decode()


def test_a_target_a_library_lacks_is_named_partial(family_wheel: Path, tmp_path: Path) -> None:
    wheel, report = device(family_wheel, tmp_path, "gfx1101")
    assert report["audit"]["partial"] == {"gfx1101": ["lib/libccl.so.1"]}
    metadata = next(v for n, v in members(wheel).items() if n.endswith(".dist-info/METADATA")).decode()
    assert "— partial" in metadata and "no gfx1101 code in lib/libccl.so.1" in metadata


def test_the_only_target_of_a_family_is_repacked_as_it_is(tmp_path: Path) -> None:
    from cairn.wheels import sdk

    tree = tmp_path / "tree"
    (tree / "lib").mkdir(parents=True)
    write_elf(tree / "lib" / "libblas.so.5", section([ccob(bundle_for(["gfx1151", "gfx1100"]))]))
    out = tmp_path / "family"
    out.mkdir()
    sdk.build_sdk_wheel(out, sdk.LIBRARIES, tree, INPUTS, io.StringIO(), expansion_owned=sdk.expansion_paths([tree]),
                        family="gfx1151", targets=("gfx1151",))
    (family,) = (out / "wheels").glob("*.whl")
    wheel, report = device(out, tmp_path, "gfx1151", ("gfx1151",))
    assert members(wheel)["_rocm_sdk_libraries/lib/libblas.so.5"] == members(family)["_rocm_sdk_libraries/lib/libblas.so.5"]
    assert report["audit"]["coverage"]["gfx1151"]["covered"]


def test_a_split_that_loses_the_targets_code_fails_the_build(family_wheel: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The cut is audited against the family wheel: a library that carried the target's code and lost it is a
    bug that stops the build, never a partial wheel."""
    from cairn.audit import split as splitting

    real = splitting.split_audited

    def lose_everything(source, dest, devices, before, registry, **options):  # type: ignore[no-untyped-def]
        return real(source, dest, splitting.parse_devices("gfx942", registry), before, registry, **options)

    monkeypatch.setattr(splitting, "split_audited", lose_everything)
    with pytest.raises(CheckFailed, match=r"rocm-sdk-device-gfx1100: the split lost gfx1100 code of lib/libblas\.so\.5"):
        device(family_wheel, tmp_path, "gfx1100")


def test_the_meta_wheel_names_every_device_as_an_extra_pinned_exactly(tmp_path: Path) -> None:
    from cairn.wheels import sdk

    wheel = sdk.build_meta_wheel(tmp_path, {**INPUTS, "families": ["gfx110X-dgpu"], "devices": list(FAMILY)})
    metadata = next(v for n, v in members(wheel).items() if n.endswith(".dist-info/METADATA")).decode()
    assert 'Requires-Dist: rocm-sdk-device-gfx1100==7.2.4; extra == "device-gfx1100"\n' in metadata
    assert "Provides-Extra: device-gfx1101\n" in metadata and "Provides-Extra: gfx110x-dgpu\n" in metadata


def test_the_default_release_plans_a_device_wheel_per_target_in_its_family_index() -> None:
    from cairn.model.manifest import load_manifest
    from cairn.plan.prepare import make_plan
    from cairn.plan.probe import Host
    from cairn.stages import STAGES

    registry = load_registry()
    root = ROOT
    host = Host(tools=frozenset({"git", "pip", "patchelf", "apt-get", "dpkg-deb", "docker", "mmdebstrap"}))
    actions = make_plan(load_manifest(root / "manifests" / "releases" / "default.toml", registry), registry,
                        [], host=host, stages=STAGES).by_id()
    for family, targets in (("gfx110X-dgpu", ("gfx1100", "gfx1101", "gfx1102")), ("gfx1151", ("gfx1151",))):
        for target in targets:
            action = actions[f"package:rocm-sdk-device@{target}"]
            assert action.deps == (f"package:rocm-sdk-libraries@{family}",)
            assert action.id in actions[f"index:{family}"].deps
            if len(targets) == 1:  # the family's index is already the one target's (and gfx1151 names both)
                assert f"package:rocm-sdk@{target}" not in actions
                continue
            # the target's own rocm-sdk: in the bundle (its own index), never in the family's index
            own = actions[f"package:rocm-sdk@{target}"]
            assert own.deps == (action.id,) and (own.inputs["family"], own.inputs["target"]) == (family, target)
            bundle = actions["bundle:release"]
            assert own.id not in actions[f"index:{family}"].deps
            assert own.id in bundle.deps or own.id in bundle.inputs["not_built"]  # (this host reads no archive)
    assert actions["package:rocm-sdk"].inputs["devices"] == [
        "gfx942", "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201", "gfx90a", "gfx1030"]
