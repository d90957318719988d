"""JAX on ROCm 7 in the ROCm 7.2.4 release: one matching 0.10.0 set for Python 3.14, pinned in the recipe and
the manifest, really served by the registry, mirrored unchanged and audited for its real device code."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.errors import ManifestError
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.model.wheel_recipes import load_recipe
from cairn.plan.prepare import make_plan
from cairn.plan.probe import Host
from cairn.stages import RUNNERS, STAGES
from support import ROOT

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"
HOST = Host(tools=frozenset({"git", "pip", "patchelf", "apt-get", "dpkg-deb"}))
FAMILY = "gfx110X-dgpu"
PLUGIN = "jax_rocm7_plugin-0.10.0-cp314-cp314-manylinux_2_28_x86_64.whl"
JAX = "jax-0.10.0-py3-none-any.whl"
SET = {"jax", "jaxlib", "jax-rocm7-plugin", "jax-rocm7-pjrt"}


def _plan(manifest: Path = MANIFEST, families: tuple[str, ...] = (FAMILY,)) -> dict:
    registry = load_registry()
    return make_plan(load_manifest(manifest, registry), registry, list(families), host=HOST, stages=STAGES).by_id()


def _py314_files() -> list:
    return [f for f in load_recipe("jax").mirror_files("0.10.0") if f.python == "3.14"]


def test_one_matching_set_for_the_release_python():
    files = _py314_files()
    versions = {f.name: f.version for f in files}
    assert set(versions) >= SET and {versions[n] for n in SET} == {"0.10.0"}
    for f in files:  # wheels for Python 3.14: cp314 or pure/py3, nothing built for another interpreter
        python_tag = f.filename.split("-")[-3]
        assert python_tag in ("cp314", "py3"), f.filename


def test_the_7_2_4_index_mirrors_exactly_the_pinned_set():
    """JAX's 3.14 set, and llama-cpp-python's run-time requirements (built for this family): numpy 2.4.6 for
    3.14 is in both and mirrored once."""
    actions = _plan()
    index = actions[f"index:{FAMILY}"]
    mirrored = sorted(d.removeprefix("mirror:") for d in index.deps if d.startswith("mirror:"))
    wanted = {f.filename: f.sha256 for f in [*_py314_files(), *load_recipe("llama-cpp-python").mirror_files("0.3.36")]}
    assert mirrored == sorted(wanted)
    fetched = {a.inputs["source"]["pypi"]["filename"]: a.inputs["source"]["pypi"]["sha256"]
               for a in actions.values() if a.id.startswith("fetch:pypi:") and a.id.endswith(".whl")}
    assert fetched == wanted  # (the llama.cpp sdist is an engine's source)


@pytest.mark.parametrize(("edit", "said"), [
    ("drop", "leaves out jax_rocm7_pjrt-0.10.0-py3-none-manylinux_2_28_x86_64.whl (sha256 fe0a40550c60e1b9…)"),
    ("sha", "pins jax_rocm7_pjrt-0.10.0-py3-none-manylinux_2_28_x86_64.whl (sha256 fe0a40550c60e1b8…), which "
            "recipes/wheels/jax.toml does not mirror for 0.10.0"),
], ids=["a file left out", "another sha256"])
def test_manifest_pins_every_file_the_recipe_mirrors(tmp_path, edit, said):
    text = MANIFEST.read_text()
    line = next(x for x in text.splitlines() if "jax_rocm7_pjrt-0.10.0" in x)
    changed = text.replace(line + "\n", "") if edit == "drop" else text.replace("fe0a40550c60e1b9", "fe0a40550c60e1b8")
    manifest = tmp_path / "rocm-7.2.4.toml"
    manifest.write_text(changed)
    with pytest.raises(ManifestError) as caught:
        _plan(manifest)
    at = changed[: changed.index("files = [", changed.index("[frameworks.jax]"))].count("\n") + 1
    assert str(caught.value).startswith(f"{manifest}:{at}:"), str(caught.value)
    assert said in str(caught.value) and str(caught.value).endswith("pin the same files and sha256s in both")


@pytest.mark.network
def test_the_registry_serves_the_pinned_set_for_python_3_14(tmp_path):
    """pip itself, asked for Python 3.14 binaries, downloads the very bytes the recipe pins (the small ones:
    jaxlib and pjrt are 85 and 137 MB and are fetched by the mirror test of the build instead)."""
    wanted = [f for f in _py314_files() if f.name in ("jax", "jax-rocm7-plugin")]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.14",
                           "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--dest", str(tmp_path),
                           "--disable-pip-version-check", *[f"{f.name}=={f.version}" for f in wanted]],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-1500:]
    got = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.glob("*.whl")}
    assert got == {f.filename: f.sha256 for f in wanted}


@pytest.mark.network
@pytest.mark.slow
def test_the_mirrored_plugin_is_unchanged_and_audited_for_its_generic_targets(tmp_path):
    """The build fetches the plugin by exact name and sha256 and records which targets its device code really
    covers: generic targets (gfx11-generic covers every gfx110X target), not the names on the package."""
    from cairn.execute.executor import execute
    from cairn.store.local import LocalStore

    registry = load_registry()
    plan = make_plan(load_manifest(MANIFEST, registry), registry, [FAMILY], stages=STAGES)
    store = LocalStore(tmp_path / "store")
    store.lock()
    try:
        report = execute(plan, store, runners=RUNNERS, jobs=1, only={f"mirror:{PLUGIN}", f"mirror:{JAX}"})
    finally:
        store.unlock()
    outcome = report.outcomes[f"mirror:{PLUGIN}"]
    assert outcome.status == "ran", outcome.detail
    tree = store.tree(outcome.output)
    wheel = tree / "wheels" / PLUGIN
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == "7dd40f921ac27117ba91342a7b962de50e712daebf90c8eac22f5f1a48dd52ac"
    audit = json.loads((tree / "report.json").read_text())["audit"]
    assert {"gfx11-generic", "gfx12-generic", "gfx10-3-generic", "gfx9-4-generic"} <= set(audit["targets_everywhere"])
    family = audit["families"][FAMILY]
    assert family["covered"] is True
    assert {t: v["via"] for t, v in family["targets"].items()} == {t: ["gfx11-generic"] for t in ("gfx1100", "gfx1101", "gfx1102")}
    # jax itself has no device code: it belongs in every family's index (it used to be left out as "not covered")
    pure = json.loads((store.tree(report.outcomes[f"mirror:{JAX}"].output) / "report.json").read_text())["audit"]
    assert pure["device_binaries"] == 0 and pure["families"][FAMILY]["covered"] is True


SCRIPT = ROOT / "src" / "cairn" / "containers" / "scripts" / "cairn_jax.py"


@pytest.fixture(scope="module")
def jax_venv(tmp_path_factory) -> Path:
    """A venv with the real jax, jaxlib and ROCm 7 plugin 0.10.0 for this interpreter (pjrt left out: 137 MB)."""
    venv = tmp_path_factory.mktemp("jax-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    done = subprocess.run([*pip, "jax==0.10.0", "jaxlib==0.10.0"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-1500:]
    done = subprocess.run([*pip, "--no-deps", "jax-rocm7-plugin==0.10.0"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-1500:]
    return venv


def _gate(venv: Path, *args: str) -> tuple[int, dict]:
    done = subprocess.run([str(venv / "bin" / "python"), str(SCRIPT), *args], capture_output=True, text=True, timeout=900)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.network
@pytest.mark.slow
def test_the_jax_gate_computes_on_cpu_and_names_the_plugin_library_that_cannot_load(jax_venv):
    """On this host the ROCm 7 libraries are absent: the CPU computation still matches NumPy, and the gate fails
    naming each plugin library and the soname it cannot load — exactly what it would say in a broken image."""
    code, report = _gate(jax_venv, "--cpu")
    assert code == 1
    assert report["probe"]["returncode"] == 0 and report["probe"]["default_backend"] == "cpu"
    assert max(report["probe"]["cpu"].values()) < 1e-4
    site = next(p for p in report["plugin_libraries"]).rsplit("/jax_rocm7_plugin/", 1)[0]
    assert (f"{site}/jax_rocm7_plugin/rocm_plugin_extension.so: libamdhip64.so.7: cannot open shared object file: "
            "No such file or directory") in report["failures"]
    assert all("cannot open shared object file" in f for f in report["failures"]), report["failures"]


@pytest.mark.network
@pytest.mark.slow
def test_the_jax_gate_refuses_an_image_without_the_plugin(jax_venv, tmp_path):
    subprocess.run([str(jax_venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", "jax-rocm7-plugin"], check=True)
    try:
        code, report = _gate(jax_venv, "--cpu")
    finally:
        subprocess.run([str(jax_venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                        "jax-rocm7-plugin==0.10.0"], check=True)
    assert code == 1 and report["failures"] == [
        "no ROCm plugin libraries under jax_plugins/xla_rocm7, jax_rocm7_plugin: jax-rocm7-plugin/pjrt not installed"]
    assert max(report["probe"]["cpu"].values()) < 1e-4
