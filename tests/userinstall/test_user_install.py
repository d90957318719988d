"""The user-install gate (cairn.userinstall): a cell's own commands on stock Debian hosts, from its published index.

The rules (tags → hosts, the command the matrix prints) are checked directly; the gate itself runs for real:
stock Debian 12 and 13 roots made with mmdebstrap, a release bundle of small genuine wheels (one with a real
shared library compiled here) published by ``cairn publish --stage-only --dev-keys`` and served over HTTP, pip
and uv in fresh venvs. A wheel tagged ``manylinux_2_39`` must be refused on Debian 12 (glibc 2.36) and load on
Debian 13; a wheel whose library needs one it does not carry must fail naming the host, the command and that
library. ``test_the_default_slice_installs_as_its_user_does`` reads the gate's verdict on the default slice's real wheels.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.matrix.model import Cell, Framework, WheelFile
from cairn.userinstall.gate import (
    HostImage,
    cell_floor,
    choose_hosts,
    installer_command,
    projects_of,
    runs_python,
    user_install_gate,
    wheel_floor,
)
from support import need_tool

HOSTS = [HostImage("debian-12", "2.36", "x", "3.11"), HostImage("debian-13", "2.41", "y", "3.13"),
         HostImage("debian-sid", "2.43", "z", "3.13")]


def _cell(*filenames: str, python: str = "3.13") -> Cell:
    return Cell("1.0", "dev", "gfx1151", "gfx1151", (), "debian-sid", python, Framework("demo", "1.0"),
                index_url="staging/1.0/simple/gfx1151/", wheels=tuple(WheelFile(f, f"wheels/{f}", "0" * 64) for f in filenames))


def test_wheel_floor_reads_the_platform_tag() -> None:
    assert wheel_floor("a-1-py3-none-manylinux_2_39_x86_64.whl") == (2, 39)
    assert wheel_floor("a-1-py3-none-manylinux_2_28_x86_64.manylinux_2_39_x86_64.whl") == (2, 28)  # the most lenient tag
    assert wheel_floor("a-1-py3-none-manylinux2014_x86_64.whl") == (2, 17)
    assert wheel_floor("a-1-py3-none-linux_x86_64.whl") == (0, 0)  # claims every Linux: nothing refuses it
    assert wheel_floor("a-1-py3-none-any.whl") == (0, 0)
    assert wheel_floor("rocm_sdk_device-7.2.4-py3-none-manylinux_2_39_x86_64-gfx1151.whl") == (2, 39)  # a PEP 825 variant


def test_hosts_are_those_the_tags_admit_plus_one_below() -> None:
    floor, setter = cell_floor(_cell("a-1-py3-none-any.whl", "b-1-py3-none-manylinux_2_39_x86_64.whl"))
    assert (floor, setter) == ((2, 39), "b-1-py3-none-manylinux_2_39_x86_64.whl")
    admitted, below = choose_hosts(floor, HOSTS)
    assert [h.name for h in admitted] == ["debian-13", "debian-sid"]
    assert below is not None and below.name == "debian-12"
    admitted, below = choose_hosts((0, 0), HOSTS)  # today's linux_x86_64 wheels: every host, no refusal to check
    assert len(admitted) == 3 and below is None
    admitted, below = choose_hosts((2, 43), HOSTS[:2])
    assert admitted == [] and below is not None and below.name == "debian-13"
    # a dev build's one install host: the oldest the tags admit, the one nearest the floor; the refusal stays
    admitted, below = choose_hosts((0, 0), HOSTS, every_host=False)
    assert [h.name for h in admitted] == ["debian-12"] and below is None
    admitted, below = choose_hosts((2, 39), HOSTS, every_host=False)
    assert [h.name for h in admitted] == ["debian-13"] and below is not None and below.name == "debian-12"


def test_each_cell_has_its_own_verdict_and_each_image_its_cells() -> None:
    """The gate's status is the worst of its cells' (one cell that installs and then falls over fails it), but each
    cell keeps its own verdict, and an image gets its framework's: the runtime image stands for the SDK, proven by
    any cell that loaded it. A cell not tried never hides a pass, nor a failure."""
    from cairn.userinstall.gate import image_verdicts, overall

    cells = {"llama-cpp-python": {"status": "passed", "reason": "installed …: debian-13/pip", "cell": "7.2.4/gfx1151/x/py3.14/llama-cpp-python-0.3.36"},
             "jax": {"status": "failed", "reason": "debian-sid (glibc 2.43): `pip install …`: load xla_rocm_plugin.so: librocprofiler-sdk-attach.so.1",
                     "cell": "7.2.4/gfx1151/x/py3.14/jax-0.10.0"}}
    status, reason = overall(cells)
    assert status == "failed" and reason.startswith("jax: debian-sid (glibc 2.43)") and "(also: llama-cpp-python passed)" in reason
    assert overall({"jax": cells["jax"] | {"status": "not-run", "reason": "not-run: no host"}}) == ("not-run", "not-run: jax: no host")
    assert overall({"a": cells["llama-cpp-python"], "b": {"status": "not-run", "reason": "not-run: x", "cell": "c"}})[0] == "passed"
    images = image_verdicts(cells, {"runtime": "", "llama-cpp": "llama-cpp-python", "jax": "jax", "vllm": "vllm"})
    assert {k: v["status"] for k, v in images.items()} == {"runtime": "passed", "llama-cpp": "passed", "jax": "failed", "vllm": "not-run"}
    assert "llama-cpp-python-0.3.36" in images["runtime"]["reason"] and images["jax"]["reason"] == cells["jax"]["reason"]
    assert image_verdicts({"jax": cells["jax"]}, {"runtime": ""})["runtime"]["status"] == "failed"


def test_a_cell_for_another_python_is_not_tried_on_a_host() -> None:
    assert runs_python(_cell("a-1-py3-none-manylinux_2_39_x86_64.whl"), HOSTS[0])
    cp314 = _cell("numpy-2.4.6-cp314-cp314-manylinux_2_27_x86_64.whl", python="3.14")
    assert not runs_python(cp314, HOSTS[1])
    assert runs_python(_cell("jaxlib-1-cp311-abi3-manylinux_2_27_x86_64.whl"), HOSTS[1])  # abi3 of an older Python
    # llama-cpp-python's cell: its own wheel is py3, its requirements come for several Pythons; pip picks the host's
    llama = _cell("llama_cpp_python-0.3.36-py3-none-manylinux_2_39_x86_64.whl",
                  "numpy-2.4.6-cp313-cp313-manylinux_2_27_x86_64.whl", "numpy-2.4.6-cp314-cp314-manylinux_2_27_x86_64.whl",
                  python="3.14")
    assert runs_python(llama, HOSTS[1]) and not runs_python(llama, HOSTS[0])  # 3.13 has a numpy, 3.11 has none


def test_commands_are_the_matrix_pages() -> None:
    from cairn.matrix.commands import pip_command

    cell = _cell("rocm_sdk-7.2.4-py3-none-any.whl", "llama_cpp_python-0.3.16-py3-none-manylinux_2_39_x86_64.whl")
    command = pip_command(cell, "http://127.0.0.1:1/")
    assert command is not None
    assert installer_command("pip", command) == command
    assert installer_command("uv", command) == "uv " + command
    assert projects_of(command) == ["rocm-sdk", "llama-cpp-python"]
    with pytest.raises(Exception, match="not a pip install"):
        installer_command("uv", "docker pull x")


# -- the gate, for real --------------------------------------------------------------------------------

def _compile(directory: Path, name: str, source: str, *link: str) -> bytes:
    need_tool("cc", "gcc")
    c = directory / f"{name}.c"
    c.write_text(source)
    out = directory / name
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(c), f"-L{directory}", *link], check=True)
    return out.read_bytes()


def _bundle(root: Path, wheels: list[tuple[str, str, dict[str, bytes]]]) -> Path:
    """A release bundle of one gfx1151 cell listing ``wheels`` (project, tag, files)."""
    from cairn.matrix.bundle import write_bundle_json
    from cairn.publish.sample import write_wheel

    family_dir = root / "files" / "wheels" / "gfx1151"
    family_dir.mkdir(parents=True)
    artifacts = []
    for project, tag, files in wheels:
        wheel = write_wheel(family_dir, project, "1.0", tag, files)
        artifacts.append({"path": f"wheels/gfx1151/{wheel.name}", "kind": "wheel", "family": "gfx1151", "cells": ["gfx1151"],
                          "recipe": "tests/test_user_install.py"})
    requirements = {"driver": {"minimum": "", "below": "", "note": ""}, "kernel": {"minimum": "", "below": "", "note": ""}}
    write_bundle_json(root, {
        "release": {"name": "cairn-test", "version": "1.0", "channel": "dev", "source_date_epoch": 1700000000,
                    "manifest_sha256": hashlib.sha256(b"test").hexdigest(),
                    "required_gates": {"dev": ["static-coverage"], "nightly": ["static-coverage", "user-install"]}},
        "builder": {"id": "https://cairn.invalid/builder/local", "invocation": "test"},
        "pins": {}, "artifacts": artifacts,
        "cells": [{"gfx_target": "gfx1151", "family": "gfx1151", "os": "debian-sid", "python": "3.11",
                   "framework": "demo", "framework_version": "1.0", "images": [], "requirements": requirements}],
    })
    (root / "gates").mkdir(exist_ok=True)
    return root


def _published(tmp_path: Path, wheels: list[tuple[str, str, dict[str, bytes]]]) -> Path:
    from cairn.userinstall.run import publish_scratch

    repo = tmp_path / "repo"
    publish_scratch(_bundle(tmp_path / "bundle", wheels), repo, io.StringIO())
    return repo


@pytest.fixture(scope="session")
def stock_hosts(services: object, cache_dir: Path) -> dict[str, HostImage]:
    """Debian 12 and 13 as users have them: mmdebstrap minbase + python3-venv, imported into the private engine
    through the very runner and import the gate's ``host:<name>`` actions use. Kept in the test cache by the
    runner's inputs and code, as the store keeps a ``host:<name>`` tree (minutes of mmdebstrap each)."""
    from cairn.execute.runners import ActionContext
    from cairn.plan.graph import Action
    from cairn.userinstall import hosts as module
    from cairn.userinstall.hosts import HOSTS as TABLE
    from cairn.userinstall.hosts import ensure_image, read_host, run_host_rootfs

    need_tool("mmdebstrap", "mmdebstrap")
    hosts = {}
    for name in ("debian-12", "debian-13"):
        inputs = {"layout": 1, "host": name, "suite": TABLE[name].suite, "mirror": "host", "epoch": 1700000000}
        key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode() + Path(module.__file__).read_bytes()).hexdigest()[:16]
        out = cache_dir / "user-install-hosts" / f"{name}-{key}"
        log = io.StringIO()
        if not (out / "host.json").is_file():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            run_host_rootfs(ActionContext(Action(f"host:{name}", "host-rootfs", inputs), out, log, {}, {}))
        digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode() + (out / "packages.txt").read_bytes()).hexdigest()
        record = read_host(out)
        hosts[name] = HostImage(name, record["glibc"], ensure_image(out, digest, log), record["python"])
    assert hosts["debian-12"].glibc == "2.36" and hosts["debian-13"].glibc == "2.41"
    return hosts


LIB = "int cairn_answer(void) { return 42; }\n"


@pytest.mark.slow
@pytest.mark.docker
def test_manylinux_2_39_refused_on_debian_12_and_loads_on_debian_13(tmp_path: Path, stock_hosts: dict[str, HostImage]) -> None:
    lib = _compile(tmp_path, "libanswer.so", LIB)
    repo = _published(tmp_path, [("cairn-answer", "py3-none-manylinux_2_39_x86_64",
                                  {"cairn_answer/__init__.py": b"X = 1\n", "cairn_answer/libanswer.so": lib})])
    log = io.StringIO()
    status, reason, evidence = user_install_gate(repo, "gfx1151", list(stock_hosts.values()), log)
    assert status == "passed", reason + log.getvalue()[-3000:]
    runs = {(r["host"], r["installer"], r["expect"]) for r in evidence["runs"]}
    assert runs == {("debian-12", "pip", "refusal"), ("debian-12", "uv", "refusal"),
                    ("debian-13", "pip", "install"), ("debian-13", "uv", "install")}
    installed = [r for r in evidence["runs"] if r["expect"] == "install"]
    assert all(r["report"]["loaded"] == r["report"]["elf_files"] == 1 for r in installed)
    assert all(r["report"]["imported"] == ["cairn_answer"] for r in installed)
    assert "debian-12/pip refused" in reason and "debian-13/uv" in reason
    assert evidence["cells"]["demo"]["status"] == "passed" and reason.startswith("demo: installed from the served index")


@pytest.mark.slow
@pytest.mark.docker
def test_a_missing_library_fails_naming_host_command_and_library(tmp_path: Path, stock_hosts: dict[str, HostImage]) -> None:
    _compile(tmp_path, "libcairndep.so", "int dep(void) { return 1; }\n")
    needs = _compile(tmp_path, "libneeds.so", "int dep(void); int f(void) { return dep(); }\n", "-lcairndep")
    # linux_x86_64, as today's wheels are tagged: every host admits it, so it installs and then must load
    repo = _published(tmp_path, [("cairn-needs", "py3-none-linux_x86_64",
                                  {"cairn_needs/__init__.py": b"", "cairn_needs/libneeds.so": needs})])
    hosts = [stock_hosts["debian-13"]]
    status, reason, evidence = user_install_gate(repo, "gfx1151", hosts, io.StringIO(), installers=("pip",))
    assert status == "failed" and reason == "demo: " + evidence["cells"]["demo"]["reason"]
    reason = evidence["cells"]["demo"]["reason"]
    assert reason.startswith("debian-13 (glibc 2.41): `pip install --index-url http://127.0.0.1:")
    assert '"cairn-needs==1.0"`: load libneeds.so (cairn-needs): ' in reason
    assert "libcairndep.so: cannot open shared object file" in reason


@pytest.mark.slow
@pytest.mark.docker
def test_an_install_on_a_host_below_the_tag_fails_the_gate(tmp_path: Path, stock_hosts: dict[str, HostImage]) -> None:
    """An installer that installs on a host the gate holds to be below the tag fails the gate (install-then-fail is
    what the refusal check exists to catch): with Debian 12 recorded as glibc 2.30, a ``manylinux_2_36`` wheel is
    below it for the gate, while pip reads the real 2.36 and installs."""
    lib = _compile(tmp_path, "libanswer.so", LIB)
    repo = _published(tmp_path, [("cairn-answer", "py3-none-manylinux_2_36_x86_64",
                                  {"cairn_answer/__init__.py": b"", "cairn_answer/libanswer.so": lib})])
    # Debian 12 recorded as glibc 2.30: the gate expects a refusal there, and pip (reading the real 2.36) installs
    lying = dataclasses.replace(stock_hosts["debian-12"], glibc="2.30")
    status, reason, _ = user_install_gate(repo, "gfx1151", [lying, stock_hosts["debian-13"]], io.StringIO(), installers=("pip",))
    assert status == "failed"
    assert reason.startswith("demo: debian-12 (glibc 2.30) is below glibc 2.36 (cairn_answer-1.0-py3-none-manylinux_2_36_x86_64.whl) "
                             "but pip installed cairn-answer==1.0")



@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.registry
@pytest.mark.network
def test_the_default_slice_installs_as_its_user_does(default_slice: Path, tmp_path: Path) -> None:
    """The default slice's own user-install verdicts (its build ran the gate on Debian 12, 13 and sid, one install
    host per cell as a dev build does). Every wheel of gfx1151's index is tagged manylinux_2_39 or lower, so the
    llama.cpp cell's own pip command, and uv's, install and load on a stock Debian 13 with its Python 3.13 and are
    refused on Debian 12; the Python 3.14-only cells install on sid, the one stock host with 3.14. The JAX cell
    installs there and then fails to load AMD's plugin (it needs rocprofiler-sdk libraries Debian's ROCm 7.2.4 does
    not package): the gate says so for that cell alone, each verdict reaches the bundle's matching cells, and
    ``cairn gate --channel nightly`` judges each image by its own cell."""
    from support import ROOT, SLICE_RECORD

    actions = json.loads((default_slice / SLICE_RECORD).read_text())["actions"]
    gate_id = "gate:user-install:wheels@gfx1151"
    assert all(actions[f"host:{h}"]["output"] for h in ("debian-12", "debian-13", "debian-sid"))
    result = json.loads((default_slice / "trees" / actions[gate_id]["output"] / "gate.json").read_text())
    bundle = default_slice / "trees" / actions["bundle:release"]["output"]
    wheels = sorted(w.name for w in (bundle / "files" / "wheels" / "gfx1151").glob("*.whl"))
    assert any(w.startswith("llama_cpp_python-") for w in wheels) and any(w.startswith("rocm_sdk_device_gfx1151-") for w in wheels), wheels
    # the floor of issue 36: everything one GPU's `pip install llama-cpp-python` brings installs on glibc 2.39
    # (Ubuntu 24.04, RHEL 10, Debian 13) — RCCL's fortified inet calls no longer hold the libraries at 2.42
    above_floor = [w for w in wheels if wheel_floor(w) > (2, 39)]
    assert not above_floor, above_floor
    cells = result["evidence"]["cells"]
    runs = result["evidence"]["runs"]
    assert cells["llama-cpp-python"]["status"] == "passed", cells["llama-cpp-python"]["reason"]
    assert cells["cairn-smoke"]["status"] == "passed", cells["cairn-smoke"]["reason"]

    def done(framework: str, expect: str) -> set[tuple[str, str]]:
        cell = cells[framework]["cell"]
        return {(r["host"], r["installer"]) for r in runs if r.get("cell") == cell and r.get("expect") == expect}

    assert done("llama-cpp-python", "install") == {("debian-13", "pip"), ("debian-13", "uv")}, runs
    assert done("llama-cpp-python", "refusal") == {("debian-12", "pip"), ("debian-12", "uv")}, runs
    assert done("cairn-smoke", "install") == {("debian-sid", "pip"), ("debian-sid", "uv")}, runs
    # the JAX cell's pip command installs on sid, then AMD's plugin cannot load: the failure is JAX's alone
    jax = cells["jax"]
    assert jax["status"] == "failed" and jax["reason"].startswith("debian-sid (glibc 2.43): `pip install --index-url "), jax
    assert "librocprofiler" in jax["reason"] and "cannot open shared object file" in jax["reason"], jax
    assert result["status"] == "failed" and result["reason"].startswith("jax: debian-sid"), result["reason"]
    # each cell of the bundle gets its own framework's verdict
    for framework, verdict in cells.items():
        record = json.loads((bundle / "gates" / f"user-install--wheels@gfx1151--{framework}.json").read_text())
        assert (record["status"], record["reason"], record["gfx_target"], record["framework"]) == \
            (verdict["status"], verdict["reason"], "gfx1151", framework)
    # the slice's own build, whatever later tests built into its store since: its record over its trees
    view = tmp_path / "slice"
    view.mkdir()
    (view / "trees").symlink_to(default_slice / "trees")
    shutil.copyfile(default_slice / SLICE_RECORD, view / "last-build.json")
    judged = subprocess.run([sys.executable, "-m", "cairn.cli", "gate", "--store", str(view), "--channel", "nightly",
                             "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    rows = {r["image"]: r["status"] for r in json.loads(judged.stdout)["results"] if r["gate"] == "user-install"}
    assert rows == {image: result["evidence"]["images"][image]["status"] for image in result["evidence"]["images"]}, rows
    assert rows["runtime"] == rows["llama-cpp"] == "passed" and rows["jax"] == "failed", rows


def test_the_verdict_reaches_the_matrix_page(tmp_path: Path) -> None:
    """The bundle's record of the gate (no image digest: matched to every cell of its target) is the cell's
    user-install result in the staged matrix, and the page shows it with its reason."""
    from cairn.matrix.model import load_matrix
    from cairn.matrix.render import to_markdown
    from cairn.userinstall.gate import staged_matrix
    from cairn.userinstall.run import publish_scratch

    bundle = _bundle(tmp_path / "bundle", [("cairn-answer", "py3-none-linux_x86_64", {"cairn_answer/__init__.py": b""})])
    reason = "debian-13 (glibc 2.41): `pip install …`: load libx.so (cairn-answer): libfmt.so.11: cannot open shared object file"
    (bundle / "gates" / "user-install--wheels@gfx1151.json").write_text(json.dumps({
        "gate": "user-install", "status": "failed", "reason": reason, "image_digest": "", "gfx_target": "gfx1151",
        "framework": "", "evidence": {}}))
    publish_scratch(bundle, tmp_path / "repo", io.StringIO())
    matrix = load_matrix(staged_matrix(tmp_path / "repo"))
    (cell,) = matrix.cells
    assert (cell.gate("user-install").status, cell.gate("user-install").reason) == ("failed", reason)
    assert "user-install" in dict(matrix.release.required_gates)["nightly"]
    assert "libfmt.so.11: cannot open shared object file" in to_markdown(matrix)


def test_each_cell_is_promoted_by_its_own_verdict_and_shared_wheels_stay(tmp_path: Path) -> None:
    """Two cells of one target share the SDK's wheel; the gate passed one cell and failed the other (as it fails
    JAX's plugin beside a llama.cpp cell that loads). On the nightly channel, which requires the gate, the passing
    cell is served with the shared wheel, the failing cell is held, and its own wheel is on no page."""
    from cairn.matrix.bundle import write_bundle_json
    from cairn.publish.sample import write_wheel
    from cairn.userinstall.run import publish_scratch

    root = tmp_path / "bundle"
    family_dir = root / "files" / "wheels" / "gfx1151"
    family_dir.mkdir(parents=True)
    artifacts = []
    for project, framework in (("cairn-shared", ""), ("cairn-good", "good"), ("cairn-bad", "bad")):
        wheel = write_wheel(family_dir, project, "1.0", "py3-none-manylinux_2_39_x86_64", {f"{project.replace('-', '_')}/__init__.py": b""})
        artifacts.append({"path": f"wheels/gfx1151/{wheel.name}", "kind": "wheel", "family": "gfx1151", "cells": ["gfx1151"],
                          "recipe": "tests/userinstall", "framework": framework})
    requirements = {"driver": {"minimum": "", "below": "", "note": ""}, "kernel": {"minimum": "", "below": "", "note": ""}}
    write_bundle_json(root, {
        "release": {"name": "cairn-test", "version": "1.0", "channel": "dev", "source_date_epoch": 1700000000,
                    "manifest_sha256": hashlib.sha256(b"test").hexdigest(),
                    "required_gates": {"dev": ["user-install"], "nightly": ["user-install"]}},
        "builder": {"id": "https://cairn.invalid/builder/local", "invocation": "test"}, "pins": {}, "artifacts": artifacts,
        "cells": [{"gfx_target": "gfx1151", "family": "gfx1151", "os": "debian-sid", "python": "3.13", "framework": name,
                   "framework_version": "1.0", "images": [], "requirements": requirements} for name in ("good", "bad")],
    })
    # what the bundle stage writes from the gate's per-cell evidence (cairn.publish.run._write_cell_verdicts)
    from cairn.model.gate_result import GateResult
    from cairn.publish.run import _write_cell_verdicts

    (root / "gates").mkdir()
    result = GateResult("user-install", "wheels", "gfx1151", "gfx1151", "", "failed", "bad: …", {"cells": {
        "good": {"status": "passed", "reason": "installed …: debian-13/pip", "cell": "1.0/gfx1151/debian-sid/py3.13/good-1.0"},
        "bad": {"status": "failed", "reason": "debian-13 (glibc 2.41): `pip install …`: load libx.so: libfmt.so.11: cannot open",
                "cell": "1.0/gfx1151/debian-sid/py3.13/bad-1.0"}}, "runs": []})
    assert _write_cell_verdicts(root / "gates", result, "wheels", "gfx1151")
    repo = tmp_path / "repo"
    publish_scratch(root, repo, io.StringIO())
    promoted = subprocess.run([sys.executable, "-m", "cairn.cli", "promote", "--version", "1.0", "--channel", "nightly",
                               "--to", str(repo), "--dev-keys", "--store", str(tmp_path / "keys-store"), "--json"],
                              capture_output=True, text=True, timeout=600)
    assert promoted.returncode == 0, promoted.stderr[-2000:]
    matrix = json.loads((repo / "channels" / "nightly" / "matrix.json").read_text())
    served = {c["framework"]["name"]: sorted(w["filename"].split("-")[0] for w in c["wheels"]) for c in matrix["cells"]}
    assert served == {"good": ["cairn_good", "cairn_shared"]}, served
    pages = "".join(p.read_text() for p in (repo / "channels" / "nightly" / "simple").rglob("*.html"))
    assert "cairn_shared-1.0" in pages and "cairn_good-1.0" in pages and "cairn_bad" not in pages
    staged = json.loads((repo / "staging" / "1.0" / "gates.json").read_text())
    verdicts = {cid.rsplit("/", 1)[1]: g["user-install"]["status"] for cid, g in staged.items() if "user-install" in g}
    assert verdicts == {"good-1.0": "passed", "bad-1.0": "failed"}, staged
