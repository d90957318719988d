"""A GPU target's own index: one target's device code for the SDK *and* for every wheel built for its family.

llama-cpp-python (like cairn-smoke) is built once per family and requires ``rocm-sdk[<family>]``; from the
family's index that is the family's libraries wheel, every target's code. ``simple/<gfx>/`` serves the
target's ``rocm-sdk <release>+<gfx>`` instead, whose family extra is the device wheel: pip and uv, installing
``llama-cpp-python`` there, fetch gfx1100's code alone. Real wheels (Cairn's writer and meta-wheel builders),
a real signed publish, and pip's and uv's own resolvers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.errors import CairnError
from cairn.matrix.bundle import load_bundle, write_bundle_json
from cairn.wheels import sdk
from cairn.wheels.wheelfile import Member, Metadata, write_wheel
from support.repositories import publish_with_fresh_keys

VERSION = "7.2.4.dev1700000000"
FAMILY, TARGETS = "gfx110X-dgpu", ("gfx1100", "gfx1101")
EPOCH = 1700000000
INPUTS = {"sdk_version": VERSION, "source_date_epoch": EPOCH, "families": [FAMILY], "devices": list(TARGETS)}


def _payload(out: Path, name: str, which: str) -> Path:
    """A wheel installing ``_rocm_sdk_libraries/which`` (as the family and device wheels install the same paths)."""
    return write_wheel(out, Metadata(name=name, version=VERSION, requires_dist=(f"rocm-sdk-core=={VERSION}",)),
                       "py3-none-manylinux_2_17_x86_64", [Member("_rocm_sdk_libraries/which", data=which.encode())],
                       source_date_epoch=EPOCH)


def _move(wheel: Path, directory: Path) -> Path:
    os.replace(wheel, directory / wheel.name)
    return directory / wheel.name


def _bundle(root: Path, *, target_metas: bool = True) -> Path:
    """What ``bundle:release`` writes for one family of two targets, with llama-cpp-python as its engine."""
    wheels = root / "files" / "wheels" / FAMILY
    wheels.mkdir(parents=True)
    artifacts = []

    def add(wheel: Path, cells: list[str], index: str = "") -> None:
        artifacts.append({"path": f"wheels/{FAMILY}/{wheel.name}", "kind": "wheel", "family": FAMILY, "cells": cells,
                          **({"index": index} if index else {})})

    add(write_wheel(wheels, Metadata(name="rocm-sdk-core", version=VERSION), "py3-none-any", [], source_date_epoch=EPOCH),
        list(TARGETS))
    add(_payload(wheels, f"rocm-sdk-libraries-{FAMILY.lower()}", "family"), list(TARGETS), "family")
    meta = sdk.build_meta_wheel(root / "meta", INPUTS)
    add(_move(meta, wheels), list(TARGETS), "family")
    for target in TARGETS:
        add(_payload(wheels, f"rocm-sdk-device-{target}", target), [target])
        if target_metas:
            own = sdk.build_target_meta_wheel(root / target, {**INPUTS, "family": FAMILY, "target": target})
            add(_move(own, wheels), [target], "target")
    add(write_wheel(wheels, Metadata(name="llama-cpp-python", version="0.3.36",
                                     requires_dist=(f"rocm-sdk[{FAMILY.lower()}]=={VERSION}",)),
                    "py3-none-manylinux_2_17_x86_64", [Member("llama_cpp/__init__.py", data=b"")], source_date_epoch=EPOCH),
        list(TARGETS))
    (root / "gates").mkdir()
    cells = []
    for target in TARGETS:
        digest = "sha256:" + f"{target:0<64}".replace("gfx", "000")[:64]
        cells.append({"gfx_target": target, "family": FAMILY, "os": "debian-sid", "python": "3.12",
                      "framework": "llama-cpp-python", "framework_version": "0.3.36",
                      "images": [{"reference": f"127.0.0.1:5000/cairn/llama-cpp:{target}", "digest": digest}],
                      "requirements": {"driver": {"minimum": "", "below": "", "note": ""},
                                       "kernel": {"minimum": "", "below": "", "note": ""}}})
        (root / "gates" / f"{target}.json").write_text(json.dumps(
            {"image_digest": digest, "gate": "static-coverage", "status": "passed", "reason": "", "evidence": {}}))
    write_bundle_json(root, {
        "release": {"name": "cairn-default", "version": "7.2.4", "channel": "dev", "source_date_epoch": EPOCH,
                    "manifest_sha256": "0" * 64, "required_gates": {"dev": ["static-coverage"]}},
        "builder": {"id": "https://cairn.invalid/builder/local", "invocation": "test"},
        "pins": {}, "artifacts": artifacts, "cells": cells,
    })
    return root


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("target-index")
    return publish_with_fresh_keys(_bundle(tmp / "bundle"), tmp)


def _simple(published: dict[str, Path], index: str) -> Path:
    return published["repo"] / "channels" / "dev" / "simple" / index


def _resolve(index: Path, *requirements: str, tmp: Path) -> dict[str, str]:
    """What pip would install from ``index`` (its own resolver, nothing installed): name → version."""
    report = tmp / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q", "--report",
                           str(report), "--disable-pip-version-check", "--index-url", index.as_uri(), *requirements],
                          capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert done.returncode == 0, done.stderr[-2000:]
    return {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}


def test_the_target_index_gives_an_engine_wheel_the_targets_device_code_alone(published: dict[str, Path], tmp_path: Path) -> None:
    picked = _resolve(_simple(published, "gfx1100"), "llama-cpp-python", tmp=tmp_path)
    assert picked == {"llama-cpp-python": "0.3.36", "rocm-sdk": f"{VERSION}+gfx1100", "rocm-sdk-core": VERSION,
                      "rocm-sdk-device-gfx1100": VERSION}


def test_the_family_index_still_gives_the_family_wheel_and_lists_no_targets_own(published: dict[str, Path], tmp_path: Path) -> None:
    picked = _resolve(_simple(published, FAMILY), "llama-cpp-python", tmp=tmp_path)
    assert picked["rocm-sdk"] == VERSION and f"rocm-sdk-libraries-{FAMILY.lower()}" in picked
    page = (_simple(published, FAMILY) / "rocm-sdk" / "index.html").read_text()
    assert "+gfx" not in page and "%2Bgfx" not in page


def test_each_target_index_lists_its_own_device_wheel_and_no_family_payload(published: dict[str, Path]) -> None:
    for target, other in (("gfx1100", "gfx1101"), ("gfx1101", "gfx1100")):
        projects = json.loads((_simple(published, target) / "index.json").read_text())["projects"]
        assert sorted(p["name"] for p in projects) == ["llama-cpp-python", "rocm-sdk", "rocm-sdk-core", f"rocm-sdk-device-{target}"]
        page = (_simple(published, target) / "rocm-sdk" / "index.html").read_text()
        # the local version's "+" is quoted in the link: some S3 front ends read a bare "+" in a path as a space
        assert f"%2B{target}-py3-none-any.whl#sha256=" in page and f"{other}" not in page


def test_uv_installs_from_the_target_index_and_gets_the_targets_files(published: dict[str, Path], tmp_path: Path) -> None:
    from support import need_module

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    done = subprocess.run([need_module("uv").find_uv_bin(), "pip", "install", "--no-config", "--python", str(python),
                           "--index-url", _simple(published, "gfx1101").as_uri(), "llama-cpp-python"],
                          capture_output=True, text=True, env={**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    (which,) = venv.glob("lib/python*/site-packages/_rocm_sdk_libraries/which")
    assert which.read_text() == "gfx1101"


def test_the_matrix_sends_each_cell_to_its_targets_index_with_the_device_extra(published: dict[str, Path]) -> None:
    from cairn.matrix.commands import pip_command
    from cairn.matrix.model import parse_matrix

    matrix = parse_matrix((published["repo"] / "channels" / "dev" / "matrix.json").read_bytes(), "matrix.json")
    (cell,) = [c for c in matrix.cells if c.gfx_target == "gfx1100"]
    assert cell.index_url == "channels/dev/simple/gfx1100/"
    assert pip_command(cell, "https://cairn.example/") == (
        "pip install --index-url https://cairn.example/channels/dev/simple/gfx1100/ "
        f'"rocm-sdk[device-gfx1100]=={VERSION}+gfx1100" "llama-cpp-python==0.3.36"')


def test_the_published_repository_with_its_local_versions_verifies(published: dict[str, Path]) -> None:
    from cairn.sign.verify import verify_repository

    verify_repository(str(published["repo"]), published["root"].read_bytes(), published["tmp"] / "tuf")


def test_without_target_metas_every_cell_stays_on_its_family_index(tmp_path: Path) -> None:
    repo = publish_with_fresh_keys(_bundle(tmp_path / "bundle", target_metas=False), tmp_path)["repo"]
    assert sorted(p.name for p in (repo / "channels" / "dev" / "simple").iterdir()) == [FAMILY]


@pytest.mark.parametrize(("index", "cells", "says"), [
    ("target", ["gfx1100", "gfx1101"], "only a wheel of one target's cells"),
    ("targets", ["gfx1100"], "index"),
])
def test_a_bundle_with_a_bad_index_is_refused_in_one_line(tmp_path: Path, index: str, cells: list[str], says: str) -> None:
    root = _bundle(tmp_path / "bundle")
    document = json.loads((root / "bundle.json").read_text())
    artifact = next(a for a in document["artifacts"] if a.get("index") == "target")
    artifact.update(index=index, cells=cells)
    (root / "bundle.json").write_text(json.dumps(document))
    with pytest.raises(CairnError) as raised:
        load_bundle(root)
    assert says in str(raised.value) and "bundle.json" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.s3
def test_served_from_s3_pip_and_uv_install_the_targets_code_and_verify_reads_the_local_versions(tmp_path: Path) -> None:
    """Over real HTTP from moto, anonymously: the quoted ``%2B`` links fetch the ``+`` keys, and ``cairn verify``
    reads every target, local versions included, both signed (``s3://``) and anonymously (``http://``)."""
    from support import cairn, need_module
    from support.s3 import env, no_credentials
    from support.servers import moto_s3

    bundle = _bundle(tmp_path / "bundle")
    keys = publish_with_fresh_keys(bundle, tmp_path / "local")["root"].parent
    with moto_s3("cairn-targets") as s3:
        environ = env(s3, tmp_path)
        cairn(["publish", str(bundle), "--to", "s3://cairn-targets/rel", "--keys", str(keys)], env=environ, check=True)
        anonymous = {k: v for k, v in no_credentials(environ).items() if not k.startswith(("PIP_", "UV_"))}
        index = f"{s3['endpoint']}/cairn-targets/rel/channels/dev/simple/gfx1100/"
        for tool in ("pip", "uv"):
            target = tmp_path / tool
            command = ([sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--target", str(target)]
                       if tool == "pip" else
                       [need_module("uv").find_uv_bin(), "pip", "install", "--no-config", "--python", sys.executable,
                        "--target", str(target), "--cache-dir", str(tmp_path / "uv-cache")])
            done = subprocess.run([*command, "--index-url", index, "llama-cpp-python"], env=anonymous,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{tool}: {done.stderr[-2000:]}"
            assert (target / "_rocm_sdk_libraries" / "which").read_text() == "gfx1100", tool
            assert (target / f"rocm_sdk-{VERSION}+gfx1100.dist-info").is_dir(), tool
        for url, environment in (("s3://cairn-targets/rel", environ), (f"{s3['endpoint']}/cairn-targets/rel", anonymous)):
            verified = cairn(["verify", url, "--root", str(keys / "root.json")], env=environment, check=True)
            assert verified.stdout.startswith(f"verified {url}/"), verified.stdout


def test_the_bundle_marks_what_each_index_lists(tmp_path: Path) -> None:
    """``bundle:release`` of the default release, run on wheel trees as its dependencies leave them: the plain meta
    and the family's libraries wheel are for the family's index, each target's ``rocm-sdk`` for its own alone,
    and a target meta made for another family is not taken for this one."""
    import io
    from types import SimpleNamespace

    from cairn.model.manifest import load_manifest
    from cairn.model.targets import load_registry
    from cairn.plan.prepare import make_plan
    from cairn.publish.run import run_bundle
    from cairn.stages import chosen
    from cairn.wheels import index
    from support import ROOT

    registry = load_registry()
    plan = make_plan(load_manifest(ROOT / "manifests" / "releases" / "default.toml", registry), registry,
                     stages=chosen(["wheels", "bundle"]))
    action = next(a for a in plan.actions if a.id == "bundle:release")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    deps: dict[str, Path] = {}

    def tree(action_id: str, wheel: Path, family: str = "") -> Path:
        out = tmp_path / action_id.replace(":", "_").replace("@", "_")
        (out / "wheels").mkdir(parents=True)
        moved = _move(wheel, out / "wheels")
        part = "meta-target" if "@gfx" in action_id else "libraries" if "libraries" in action_id else "meta"
        sdk.write_report(out, [moved], {"part": part, "family": family})  # the bundle reads it as a WheelReport
        deps[action_id] = out
        return moved

    meta = tree("package:rocm-sdk", sdk.build_meta_wheel(wheels, INPUTS))
    libraries = tree(f"package:rocm-sdk-libraries@{FAMILY}", _payload(wheels, f"rocm-sdk-libraries-{FAMILY.lower()}", "family"))
    tree("package:rocm-sdk@gfx1100", sdk.build_target_meta_wheel(wheels, {**INPUTS, "family": FAMILY, "target": "gfx1100"}),
         FAMILY)
    tree("package:rocm-sdk@gfx1101", sdk.build_target_meta_wheel(wheels, {**INPUTS, "family": FAMILY, "target": "gfx1101"}),
         "gfx110X-all")
    index.write_index([meta, libraries], tmp_path / "index", FAMILY)
    deps[f"index:{FAMILY}"] = tmp_path / "index"
    run_bundle(SimpleNamespace(action=action, out=tmp_path / "bundle", deps=deps, log=io.StringIO()))
    marked = {a.name: (a.index, a.cells) for a in load_bundle(tmp_path / "bundle").artifacts if a.kind == "wheel"}
    assert marked == {meta.name: ("family", ("gfx1100", "gfx1101", "gfx1102")),
                      libraries.name: ("family", ("gfx1100", "gfx1101", "gfx1102")),
                      f"rocm_sdk-{VERSION}+gfx1100-py3-none-any.whl": ("target", ("gfx1100",))}
