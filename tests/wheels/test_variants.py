"""PEP 825 variant wheels of the device wheels, read by an installer-side consumer that is not Cairn's:
``variantlib`` (the reference implementation) validates them and, with AMD's provider from ``rocm-bootstrap``
told which GPU the host has (``ROCM_BOOTSTRAP_FORCE_GFX_ARCH``), selects from each family index's
``variants.json`` exactly the wheel for that GPU. The plain extras keep working beside them in pip and uv."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cairn.wheels.variants import label_of, plain_filename
from support.fatbin_writer import bundle_for, ccob, section, write_elf
from support.wheels import select

INPUTS = {"sdk_version": "7.2.4", "source_date_epoch": 1700000000, "release": "test", "channel": "dev"}
FAMILIES = {"gfx110X-dgpu": ("gfx1100", "gfx1101", "gfx1102"), "gfx1151": ("gfx1151",),
            "gfx120X-all": ("gfx1200", "gfx1201"), "gfx94X-dcgpu": ("gfx942",)}


def _family_wheels(work: Path, family: str, targets: tuple[str, ...]) -> list[Path]:
    """The family's libraries wheel (a fat library holding every target of the registry's families), its
    device wheels and their variants."""
    from cairn.wheels import sdk
    from cairn.wheels.device import build_device_wheel

    tree = work / family / "tree"
    (tree / "lib").mkdir(parents=True)
    everything = sorted({t for ts in FAMILIES.values() for t in ts})
    write_elf(tree / "lib" / "libblas.so.5", section([ccob(bundle_for(everything))]))
    family_out = work / family / "family"
    family_out.mkdir()
    sdk.build_sdk_wheel(family_out, sdk.LIBRARIES, tree, INPUTS, io.StringIO(),
                        expansion_owned=sdk.expansion_paths([tree]), family=family, targets=targets)
    wheels = list((family_out / "wheels").glob("*.whl"))
    for target in targets:
        out = work / family / target
        out.mkdir()
        build_device_wheel(out, family_out, {**INPUTS, "family": family, "target": target,
                                             "family_targets": list(targets)}, io.StringIO())
        wheels += (out / "wheels").glob("*.whl")
    return wheels


@pytest.fixture(scope="module")
def indexes(tmp_path_factory) -> Path:
    """One simple index per family, as ``index:<family>`` writes it, with the SDK's core and meta wheels."""
    from cairn.wheels import index, sdk
    from cairn.wheels.wheelfile import Metadata, write_wheel

    work = tmp_path_factory.mktemp("variants")
    core = write_wheel(work / "core", Metadata(name="rocm-sdk-core", version="7.2.4"), "py3-none-any", [],
                       source_date_epoch=1700000000)
    devices = [t for ts in FAMILIES.values() for t in ts]
    meta = sdk.build_meta_wheel(work / "meta", {**INPUTS, "families": list(FAMILIES), "devices": devices})
    root = work / "index"
    for family, targets in FAMILIES.items():
        index.write_index([core, meta, *_family_wheels(work, family, targets)], root, family)
    return root


def variants_file(indexes: Path, family: str) -> Path:
    page = (indexes / family / "simple" / "rocm-sdk-device" / "index.html").read_text()
    linked = [line.split('href="', 1)[1].split("#", 1)[0] for line in page.splitlines() if "variants.json" in line]
    assert linked == ["../../files/rocm_sdk_device-7.2.4-variants.json"]  # the project page links it (PEP 825)
    return indexes / family / "simple" / "rocm-sdk-device" / linked[0]


@pytest.mark.parametrize(("gpu", "family"), [("gfx1100", "gfx110X-dgpu"), ("gfx1151", "gfx1151"),
                                             ("gfx1201", "gfx120X-all"), ("gfx942", "gfx94X-dcgpu")])
def test_amds_provider_selects_exactly_the_wheel_for_the_gpu(indexes: Path, gpu: str, family: str) -> None:
    assert select(variants_file(indexes, family), gpu) == [gpu]
    files = sorted(p.name for p in (indexes / family / "files").glob("rocm_sdk_device-*.whl"))
    chosen = [name for name in files if label_of(name) == gpu]
    assert len(chosen) == 1 and len(files) == len(FAMILIES[family])
    with zipfile.ZipFile(indexes / family / "files" / chosen[0]) as zf:
        info = json.loads(zf.read("_rocm_sdk_libraries/share/cairn/libraries.json"))
    assert info["targets"] == [gpu]  # the selected wheel carries that GPU's code


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_gpu_we_do_not_ship_selects_nothing(indexes: Path, family: str) -> None:
    assert select(variants_file(indexes, family), "gfx1030") == []


def test_variantlib_validates_every_variant_against_amds_provider(indexes: Path) -> None:
    script = """
import json, sys
from variantlib.api import validate_variant
from variantlib.variants_json import VariantsJson
doc = VariantsJson(json.load(open(sys.argv[1])))
for label, desc in sorted(doc.variants.items()):
    result = validate_variant(desc, doc)
    print(label, result.is_valid(), sorted(p.to_str() for p in result.results))
"""
    for family, targets in FAMILIES.items():
        done = subprocess.run([sys.executable, "-c", script, str(variants_file(indexes, family))],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.splitlines() == [f"{t} True ['amd :: gfx_arch :: {t}']" for t in sorted(targets)]


def test_a_host_with_two_gpus_of_one_family_is_offered_both(indexes: Path) -> None:
    """The ranking keeps every GPU of the host (uv's own detection keeps only the lowest architecture)."""
    assert select(variants_file(indexes, "gfx110X-dgpu"), "gfx1101,gfx1100") == ["gfx1101", "gfx1100"]


def test_the_wheels_and_variants_file_names_parse() -> None:
    assert label_of("rocm_sdk_device-7.2.4-py3-none-linux_x86_64-gfx1100.whl") == "gfx1100"
    assert label_of("rocm_sdk_device_gfx1100-7.2.4-py3-none-linux_x86_64.whl") == ""
    assert label_of("torch-2.1-1-cp311-cp311-linux_x86_64.whl") == ""  # a build tag is not a label
    assert plain_filename("a-1-py3-none-any-gfx942.whl") == "a-1-py3-none-any.whl"


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_plain_extras_still_install_beside_the_variants(indexes: Path, tmp_path: Path, installer: str) -> None:
    simple = (indexes / "gfx110X-dgpu" / "simple").as_uri()
    if installer == "pip":
        report = tmp_path / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q", "--report", str(report),
                   "--disable-pip-version-check", "--index-url", simple, "rocm-sdk[device-gfx1100]"]
    else:
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        command = [sys.executable, "-m", "uv", "pip", "install", "--python", str(venv / "bin" / "python"),
                   "--index-url", simple, "rocm-sdk[device-gfx1100]"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    if installer == "pip":
        picked = sorted(i["metadata"]["name"] for i in json.loads(report.read_text())["install"])
    else:
        listed = subprocess.run([sys.executable, "-m", "uv", "pip", "list", "--python", str(venv / "bin" / "python"),
                                 "--format", "json"], capture_output=True, text=True, check=True).stdout
        picked = sorted(p["name"] for p in json.loads(listed))
    assert picked == ["rocm-sdk", "rocm-sdk-core", "rocm-sdk-device-gfx1100"]


def test_a_published_channel_links_a_signed_variants_json(indexes: Path, tmp_path: Path) -> None:
    """Through ``cairn publish``: the channel's project page links ``variants.json`` beside it, built from the
    variant wheels the channel serves, and it is a TUF target like every page — a changed byte fails verify."""
    from tuf.api.serialization.json import JSONSerializer

    from cairn.errors import CairnError
    from cairn.matrix.bundle import load_bundle, write_bundle_json
    from cairn.publish.publisher import publish
    from cairn.publish.sample import write_sample_bundle
    from cairn.remote.backend import FileBackend
    from cairn.sign.keys import init_keys, load_keys, make_root
    from cairn.sign.tuf import load_root
    from cairn.sign.verify import verify_repository

    root = write_sample_bundle(tmp_path / "bundle", version="7.2.4", families=("gfx94X-dcgpu",))
    (variant,) = (indexes / "gfx94X-dcgpu" / "files").glob("rocm_sdk_device-*-gfx942.whl")
    document = json.loads((root / "bundle.json").read_text())
    (root / "files" / "wheels" / "gfx94X-dcgpu" / variant.name).write_bytes(variant.read_bytes())
    document["artifacts"].append({"path": f"wheels/gfx94X-dcgpu/{variant.name}", "kind": "wheel", "family": "gfx94X-dcgpu",
                                  "cells": [document["cells"][0]["gfx_target"]], "recipe": "package:rocm-sdk-device@gfx942"})
    for artifact in document["artifacts"]:
        artifact.pop("sha256", None)  # recomputed
    write_bundle_json(root, document)
    keyset = init_keys(tmp_path / "keys")
    (keyset.directory / "root.json").write_bytes(make_root(keyset).to_bytes(JSONSerializer(compact=False)))
    repo = tmp_path / "repo"
    publish(load_bundle(root), FileBackend(repo), load_keys(keyset.directory), load_root(keyset.directory / "root.json"))

    page_dir = repo / "channels" / "dev" / "simple" / "gfx94X-dcgpu" / "rocm-sdk-device"
    page = (page_dir / "index.html").read_text()
    assert 'href="rocm_sdk_device-7.2.4-variants.json#sha256=' in page and variant.name in page
    served = page_dir / "rocm_sdk_device-7.2.4-variants.json"
    assert json.loads(served.read_text())["variants"] == {"gfx942": {"amd": {"gfx_arch": ["gfx942"]}}}
    assert select(served, "gfx942") == ["gfx942"]
    root_json = (keyset.directory / "root.json").read_bytes()
    verify_repository(str(repo), root_json, tmp_path / "tuf")
    served.write_bytes(served.read_bytes().replace(b"gfx942", b"gfx943"))
    with pytest.raises(CairnError, match=r"variants\.json"):
        verify_repository(str(repo), root_json, tmp_path / "tuf-again")
