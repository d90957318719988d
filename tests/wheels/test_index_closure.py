"""An index installs by itself: every requirement of every wheel it serves, from that index alone.

The matrix's command is ``pip install --index-url <one index> …`` and never names a second index (PyPI holds
placeholders for the ``rocm-sdk*`` names: a second index lets whoever uploads a higher version there win). So
llama-cpp-python's own requirements (typing-extensions, numpy, diskcache, jinja2 → MarkupSafe) are mirrored by
sha256 into every index that serves its wheel, for every Python the index claims, and the index action refuses
an index with a requirement it cannot satisfy, naming the wheel and the requirement. The last tests install for
real: pip and uv, from a published index served over HTTP, into fresh venvs, with no other index.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.utils import canonicalize_name

from cairn.errors import CheckFailed, ManifestError
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.model.wheel_recipes import load_recipe
from cairn.plan.prepare import make_plan
from cairn.plan.probe import Host
from cairn.stages import STAGES
from cairn.wheels import closure, sdk
from cairn.wheels.wheelfile import Member, Metadata, write_wheel
from support import ROOT, need_module

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"
HOST = Host(tools=frozenset({"git", "pip", "patchelf", "apt-get", "dpkg-deb"}))
FAMILY, TARGETS = "gfx110X-dgpu", ("gfx1100", "gfx1101", "gfx1102")
# llama-cpp-python 0.3.36's run-time requirements as its sdist's PKG-INFO states them (test_llama_build reads them
# from the pinned sdist itself)
UPSTREAM = ("typing-extensions>=4.5.0", "numpy>=1.20.0", "diskcache>=5.6.1", "jinja2>=2.11.3")
PY = f"{sys.version_info.major}.{sys.version_info.minor}"


# -- the check itself, on synthetic wheels ----------------------------------------------------------------
def _served(filename: str, *requires: str, python: str = "", extras: tuple[str, ...] = ()) -> closure.Served:
    return closure.Served(filename, tuple(requires), python, extras)


ENGINE = _served("llama_cpp_python-0.3.36-py3-none-manylinux_2_39_x86_64.whl", "rocm-sdk[gfx110x-dgpu]==7.2.4", *UPSTREAM,
                 python=">=3.11")
SDK = [_served("rocm_sdk-7.2.4-py3-none-any.whl", "rocm-sdk-core==7.2.4",
               'rocm-sdk-libraries-gfx110x-dgpu==7.2.4; extra == "gfx110x-dgpu"', extras=("gfx110x-dgpu",)),
       _served("rocm_sdk_core-7.2.4-py3-none-linux_x86_64.whl"),
       _served("rocm_sdk_libraries_gfx110x_dgpu-7.2.4-py3-none-linux_x86_64.whl", "rocm-sdk-core==7.2.4")]
DEPS = [_served("typing_extensions-4.16.0-py3-none-any.whl", python=">=3.9"),
        _served("diskcache-5.6.3-py3-none-any.whl"),
        _served("jinja2-3.1.6-py3-none-any.whl", "MarkupSafe>=2.0", 'Babel>=2.7; extra == "i18n"', extras=("i18n",)),
        *(_served(f"numpy-2.4.6-cp3{m}-cp3{m}-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", python=">=3.11")
          for m in (11, 13, 14)),
        *(_served(f"markupsafe-3.0.4-cp3{m}-cp3{m}-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl")
          for m in (11, 13, 14))]
CLAIMS = [closure.Claim(p, ("llama-cpp-python", "rocm-sdk[gfx110x-dgpu]")) for p in ("3.11", "3.13")] + \
    [closure.Claim("3.14", ("rocm-sdk[gfx110x-dgpu]",), every=True)]


def test_an_index_with_every_requirement_for_every_claimed_python_passes() -> None:
    assert closure.unsatisfied([ENGINE, *SDK, *DEPS], CLAIMS) == []
    closure.check(FAMILY, [ENGINE, *SDK, *DEPS], CLAIMS)


def test_a_missing_requirement_fails_naming_the_wheel_and_the_requirement() -> None:
    wheels = [ENGINE, *SDK, *(d for d in DEPS if not d.filename.startswith("typing_extensions"))]
    with pytest.raises(CheckFailed) as raised:
        closure.check(FAMILY, wheels, CLAIMS)
    said = str(raised.value)
    assert said.startswith(f"index {FAMILY}: llama_cpp_python-0.3.36-py3-none-manylinux_2_39_x86_64.whl requires "
                           "typing-extensions>=4.5.0 (Python 3.11), which the index does not serve"), said
    assert "mirror the requirement by sha256" in said and "\n" not in said


def test_a_per_python_wheel_missing_for_one_claimed_python_fails_for_that_python_alone() -> None:
    wheels = [ENGINE, *SDK, *(d for d in DEPS if "cp313" not in d.filename)]
    missing = closure.unsatisfied(wheels, CLAIMS)
    assert {(m.requirement, m.python) for m in missing} == {("numpy>=1.20.0", "3.13"), ("MarkupSafe>=2.0", "3.13")}
    assert {m.wheel for m in missing} == {ENGINE.filename, "jinja2-3.1.6-py3-none-any.whl"}


def test_markers_are_evaluated_for_each_python_and_extras_only_when_asked_for() -> None:
    old_only = _served("tool-1.0-py3-none-any.whl", 'tomli>=1; python_version < "3.12"', 'never; sys_platform == "win32"')
    # 3.14 needs no tomli; 3.11 does; Babel (jinja2's i18n extra) is asked for by nobody
    assert closure.unsatisfied([old_only], [closure.Claim("3.14", every=True)]) == []
    (missing,) = closure.unsatisfied([old_only], [closure.Claim("3.11", every=True)])
    assert (missing.wheel, missing.requirement, missing.python) == (old_only.filename, 'tomli>=1; python_version < "3.12"', "3.11")
    (asked,) = closure.unsatisfied(DEPS, [closure.Claim("3.11", ("jinja2[i18n]",))])
    assert asked.requirement == 'Babel>=2.7; extra == "i18n"' and asked.wheel == "jinja2-3.1.6-py3-none-any.whl"


def test_a_version_or_extra_the_index_does_not_serve_is_named() -> None:
    pinned = _served("cairn_smoke-0.1.0-py3-none-any.whl", "rocm-sdk[gfx1151]==7.2.4", "rocm-sdk-core==9.9")
    reasons = {m.requirement: m.why for m in closure.unsatisfied([pinned, *SDK], [closure.Claim("3.11", every=True)])}
    assert reasons == {"rocm-sdk[gfx1151]==7.2.4": "but no rocm-sdk it serves provides the extra gfx1151",
                       "rocm-sdk-core==9.9": "which the index serves only as 7.2.4"}


def test_a_further_python_claims_only_what_its_engine_pulls_in() -> None:
    """A JAX set mirrored for 3.14 alone (jax is py3, jaxlib cp314) is not offered to 3.11: only the engine is."""
    jax = [_served("jax-0.10.0-py3-none-any.whl", "jaxlib<=0.10.0,>=0.10.0", python=">=3.11"),
           _served("jaxlib-0.10.0-cp314-cp314-manylinux_2_27_x86_64.whl", python=">=3.11")]
    assert closure.unsatisfied([ENGINE, *SDK, *DEPS, *jax], CLAIMS) == []
    (missing,) = closure.unsatisfied([*jax], [closure.Claim("3.11", every=True)])
    assert (missing.requirement, missing.python) == ("jaxlib<=0.10.0,>=0.10.0", "3.11")


# -- what the default release plans -------------------------------------------------------------------------
def _plan(manifest: Path = MANIFEST) -> dict:
    registry = load_registry()
    return make_plan(load_manifest(manifest, registry), registry, [FAMILY, "gfx1151"], host=HOST, stages=STAGES).by_id()


def test_the_family_that_builds_llama_cpp_python_mirrors_its_requirements_for_every_claimed_python() -> None:
    actions = _plan()
    recipe = load_recipe("llama-cpp-python")
    index = actions[f"index:{FAMILY}"]
    claims = {c["python"]: c for c in index.inputs["claims"]}
    assert sorted(claims) == ["3.11", "3.12", "3.13", "3.14"] == list(recipe.served_pythons("0.3.36"))
    assert claims["3.14"]["every"] and not claims["3.11"]["every"]
    assert claims["3.11"]["roots"] == ["llama-cpp-python", "rocm-sdk[gfx110x-dgpu]", *(f"rocm-sdk[device-{t}]" for t in TARGETS)]
    mirrored = {d.removeprefix("mirror:") for d in index.deps if d.startswith("mirror:")}
    for python in claims:
        cp = "cp" + python.replace(".", "")
        assert any(f.startswith("numpy-2.4.6-") and f"-{cp}-{cp}-" in f for f in mirrored), python
        assert any(f.startswith("markupsafe-3.0.4-") and f"-{cp}-{cp}-" in f for f in mirrored), python
    assert {"typing_extensions-4.16.0-py3-none-any.whl", "diskcache-5.6.3-py3-none-any.whl",
            "jinja2-3.1.6-py3-none-any.whl"} <= mirrored
    assert actions["package:llama-cpp-python@gfx110X-dgpu"].inputs["requires_python"] == ">=3.11"
    # every family of the default release builds the engine now, so every family's index serves the same
    other = actions["index:gfx1151"]
    assert any("typing_extensions" in d for d in other.deps) and any("cp311" in d for d in other.deps)
    assert [c["python"] for c in other.inputs["claims"]] == ["3.11", "3.12", "3.13", "3.14"]
    # its wheels go with the engine's wheel, to the engine's own cells; a file a framework mirrors too (numpy cp314
    # for JAX) stays in every cell of the family, so neither loses it (tests/test_matrix_engine_cells.py)
    frameworks = actions["bundle:release"].inputs["wheel_frameworks"]
    assert frameworks["mirror:typing_extensions-4.16.0-py3-none-any.whl"] == "llama-cpp-python"
    assert "mirror:numpy-2.4.6-cp314-cp314-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl" not in frameworks


@pytest.mark.parametrize(("edit", "said"), [
    ("drop", "leaves out diskcache-5.6.3-py3-none-any.whl (sha256 5e31b2d5fbad117c…)"),
    ("sha", "pins diskcache-5.6.3-py3-none-any.whl (sha256 5e31b2d5fbad117d…), which recipes/wheels/llama-cpp-python.toml "
            "does not mirror for 0.3.36"),
], ids=["a file left out", "another sha256"])
def test_the_manifest_pins_every_requirement_the_engine_recipe_mirrors(tmp_path: Path, edit: str, said: str) -> None:
    text = MANIFEST.read_text()
    line = next(x for x in text.splitlines() if "diskcache-5.6.3" in x)
    changed = text.replace(line + "\n", "") if edit == "drop" else text.replace("5e31b2d5fbad117c", "5e31b2d5fbad117d")
    manifest = tmp_path / "default.toml"
    manifest.write_text(changed)
    with pytest.raises(ManifestError) as caught:
        _plan(manifest)
    message = str(caught.value)
    assert said in message and "component 'llama.cpp' requirements" in message and "\n" not in message
    assert f"{manifest}:" in message  # names the file (and line) of the pins


SECOND_INDEX = ("--extra-index-url", "--extra-index", "--find-links", "UV_INDEX", "PIP_EXTRA_INDEX_URL", "pypi.org/simple")


def test_the_matrix_and_docs_never_advise_a_second_index() -> None:
    """The matrix's code names no second index at all; no install command in the docs or README adds one."""
    for path in (ROOT / "src" / "cairn" / "matrix").rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not [s for s in SECOND_INDEX if s in text], path
    for path in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        commands = [line for line in path.read_text().splitlines() if "pip install" in line or "pip download" in line]
        assert commands == [c for c in commands if not [s for s in SECOND_INDEX if s in c]], path


# -- installs a user runs: the real runners, a real publish, served over HTTP ---------------------------------
VERSION = "7.2.4.dev1761811681"
EPOCH = 1761811681


def _ctx(action_id: str, inputs: dict, deps: dict[str, Path], out: Path, family: str = "") -> SimpleNamespace:
    out.mkdir(parents=True)
    action = SimpleNamespace(id=action_id, inputs=inputs, deps=tuple(deps), family=family)
    return SimpleNamespace(action=action, deps=deps, out=out, log=io.StringIO())


def _sdk_and_engine(out: Path) -> list[Path]:
    """The family's SDK wheels (Cairn's own meta builder) and a llama-cpp-python whose metadata is the engine
    runner's (the family's SDK extra, then the sdist's requirements; Requires-Python from the plan)."""
    out.mkdir(parents=True)
    wheels = [write_wheel(out, Metadata(name="rocm-sdk-core", version=VERSION, requires_python=">=3.8"), "py3-none-any", [],
                          source_date_epoch=EPOCH)]
    for name in (f"rocm-sdk-libraries-{FAMILY.lower()}", *(f"rocm-sdk-device-{t}" for t in TARGETS)):
        wheels.append(write_wheel(out, Metadata(name=name, version=VERSION, requires_dist=(f"rocm-sdk-core=={VERSION}",),
                                                requires_python=">=3.8"),
                                  "py3-none-any", [Member(f"_{name.replace('-', '_')}/marker", data=b"x")], source_date_epoch=EPOCH))
    wheels.append(sdk.build_meta_wheel(out / "meta", {"sdk_version": VERSION, "source_date_epoch": EPOCH,
                                                      "families": [FAMILY], "devices": list(TARGETS)}))
    wheels.append(write_wheel(out, Metadata(name="llama-cpp-python", version=f"0.3.36+rocm.{VERSION}",
                                            requires_dist=(f"rocm-sdk[{FAMILY.lower()}]=={VERSION}", *UPSTREAM),
                                            requires_python=">=3.11"),
                              "py3-none-any", [Member("llama_cpp/__init__.py", data=b"import numpy, jinja2, diskcache, typing_extensions\n")],
                              source_date_epoch=EPOCH))
    return wheels


def _mirrored(python: str) -> list:
    """The recipe's mirrored requirements a ``python`` user installs (per-Python wheels of that Python)."""
    return [f for f in load_recipe("llama-cpp-python").mirror_files("0.3.36") if f.python in ("", python)]


@pytest.fixture(scope="module")
def family_index(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The family's index as the wheels stage writes it: each requirement fetched by its pinned sha256 and
    republished by the mirror runner, the index runner's closure check run for this Python's claim."""
    from cairn.sources.pypi import download_pinned
    from cairn.wheels.frameworks import run_mirror
    from cairn.wheels.run import run_index

    tmp = tmp_path_factory.mktemp("closure")
    families = {FAMILY: list(TARGETS)}
    deps = {"package:sdk": tmp / "sdk"}
    for wheel in _sdk_and_engine(tmp / "sdk" / "wheels"):
        if wheel.parent != tmp / "sdk" / "wheels":
            os.replace(wheel, tmp / "sdk" / "wheels" / wheel.name)
    for n, item in enumerate(_mirrored(PY)):
        fetched = tmp / f"fetch-{n}"
        fetched.mkdir()
        download_pinned(item.name, item.filename, item.sha256, fetched, pinned_by="the recipe")
        ctx = _ctx(f"mirror:{item.filename}", {"project": item.name, "filename": item.filename, "families": families},
                   {f"fetch:pypi:{item.filename}": fetched}, tmp / f"mirror-{n}")
        run_mirror(ctx)
        deps[f"mirror:{item.filename}"] = ctx.out
    claims = [{"python": PY, "every": True, "roots": ["llama-cpp-python", f"rocm-sdk[{FAMILY.lower()}]",
                                                     *(f"rocm-sdk[device-{t}]" for t in TARGETS)]}]
    ctx = _ctx(f"index:{FAMILY}", {"family": FAMILY, "claims": claims}, deps, tmp / "index", FAMILY)
    run_index(ctx)
    return {"tmp": tmp, "index": ctx.out, "deps": deps, "claims": claims}  # type: ignore[dict-item]


@pytest.mark.network
def test_the_index_runner_refuses_an_index_without_a_requirement_naming_wheel_and_requirement(family_index: dict, tmp_path: Path) -> None:
    from cairn.wheels.run import run_index

    deps = {k: v for k, v in family_index["deps"].items() if "typing_extensions" not in k}
    ctx = _ctx(f"index:{FAMILY}", {"family": FAMILY, "claims": family_index["claims"]}, deps, tmp_path / "index", FAMILY)
    with pytest.raises(CheckFailed) as raised:
        run_index(ctx)
    assert (f"index {FAMILY}: llama_cpp_python-0.3.36+rocm.{VERSION}-py3-none-any.whl requires typing-extensions>=4.5.0 "
            f"(Python {PY}), which the index does not serve") in str(raised.value)


@contextlib.contextmanager
def _served_over_http(root: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.network
def test_pip_and_uv_install_llama_cpp_python_from_the_published_index_alone(family_index: dict, tmp_path: Path) -> None:
    """The family index's wheels in a signed bundle, published as ``cairn publish`` does, served over HTTP; the
    matrix cell's own command, and uv's, into fresh venvs with no configuration and no other index."""
    from cairn.matrix.bundle import write_bundle_json
    from cairn.matrix.commands import pip_command
    from cairn.matrix.model import parse_matrix
    from support.repositories import publish_with_fresh_keys

    root = tmp_path / "bundle"
    wheels_dir = root / "files" / "wheels" / FAMILY
    wheels_dir.mkdir(parents=True)
    artifacts = []
    for wheel in sorted((family_index["index"] / FAMILY / "files").glob("*.whl")):
        os.link(wheel, wheels_dir / wheel.name)
        artifacts.append({"path": f"wheels/{FAMILY}/{wheel.name}", "kind": "wheel", "family": FAMILY, "cells": list(TARGETS)})
    (root / "gates").mkdir()
    cells = [{"gfx_target": t, "family": FAMILY, "os": "debian-sid", "python": PY, "framework": "llama-cpp-python",
              "framework_version": "0.3.36", "images": [],
              "requirements": {"driver": {"minimum": "", "below": "", "note": ""}, "kernel": {"minimum": "", "below": "", "note": ""}}}
             for t in TARGETS]
    write_bundle_json(root, {"release": {"name": "cairn-rocm", "version": "7.2.4", "channel": "dev", "source_date_epoch": EPOCH,
                                         "manifest_sha256": "0" * 64, "required_gates": {"dev": []}},
                             "builder": {"id": "https://cairn.invalid/builder/local", "invocation": "test"},
                             "pins": {}, "artifacts": artifacts, "cells": cells})
    repo = publish_with_fresh_keys(root, tmp_path)["repo"]
    matrix = parse_matrix((repo / "channels" / "dev" / "matrix.json").read_bytes(), "matrix.json")
    (cell,) = [c for c in matrix.cells if c.gfx_target == "gfx1100"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    with _served_over_http(repo) as base:
        command = pip_command(cell, base)
        assert command and "--extra-index-url" not in command and command.count("--index-url") == 1
        for tool in ("pip", "uv"):
            venv = tmp_path / f"venv-{tool}"
            subprocess.run([sys.executable, "-m", "venv", *(["--without-pip"] if tool == "uv" else []), str(venv)], check=True)
            python = venv / "bin" / "python"
            if tool == "pip":  # the page's command, verbatim, with the venv's pip
                argv = [str(python), "-m", *command.split(" ", 2)[:2], "--isolated", "--no-cache-dir",
                        *_split(command.split(" ", 2)[2])]
            else:
                argv = [need_module("uv").find_uv_bin(), "pip", "install", "--no-config", "--python", str(python),
                        "--cache-dir", str(tmp_path / "uv-cache"), "--index-url", f"{base}{cell.index_url}", "llama-cpp-python"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=environ)
            assert done.returncode == 0, f"{tool}: {done.stdout[-1500:]}{done.stderr[-3000:]}"
            listed = subprocess.run([str(python), "-c", "import importlib.metadata as m, json; "
                                     "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"],
                                    capture_output=True, text=True, check=True)
            installed = {canonicalize_name(n) for n in json.loads(listed.stdout)}
            assert {"llama-cpp-python", "typing-extensions", "numpy", "diskcache", "jinja2", "markupsafe", "rocm-sdk",
                    "rocm-sdk-core", f"rocm-sdk-libraries-{FAMILY.lower()}"} <= installed, (tool, installed)
            imported = subprocess.run([str(python), "-c", "import llama_cpp, jinja2; print(jinja2.Template('{{ 6 * 7 }}').render())"],
                                      capture_output=True, text=True)
            assert imported.stdout.strip() == "42", f"{tool}: {imported.stderr}"


def _split(arguments: str) -> list[str]:
    """The command's arguments as a shell splits them (the matrix quotes each requirement)."""
    import shlex

    return shlex.split(arguments)


def test_a_source_framework_left_out_of_the_check_is_named_and_does_not_stop_the_index() -> None:
    """SGLang from its sdist mirrors none of its requirements: listed as unchecked, the rest is still checked."""
    sglang = closure.Served("sglang-0.5.10-py3-none-any.whl", ("IPython",))
    leaf = closure.Served("leaf-1.0-py3-none-any.whl", ("missing-thing",))
    assert closure.unsatisfied([sglang], [closure.Claim("3.11", (), True, ("SGLang",))]) == []
    left = closure.unsatisfied([sglang, leaf], [closure.Claim("3.11", (), True, ("sglang",))])
    assert [(m.wheel, m.requirement) for m in left] == [("leaf-1.0-py3-none-any.whl", "missing-thing")]
