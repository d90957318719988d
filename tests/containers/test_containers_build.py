"""Real images for one family of the default release: built through the engine, pushed, gated, rebuilt.

The whole chain runs once per session (``built`` fixture): SDK wheels and the gfx90a index → mmdebstrap
base → runtime and smoke images (wheels installed from the index, pinned by sha256) → pushed to the local
registry → static, in-container and GPU gates. The reproducibility test builds the images again from a
clean image state (the wheels, tested by their own suite, are reused) and compares manifest digests.
Broken images are derived from the real runtime image by adding one layer.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from cairn import proc
from cairn.cli import COMMANDS, main
from cairn.containers.diff import diff_layouts
from cairn.execute.executor import execute
from cairn.formats.oci import Layer, Layout, read_image
from cairn.gates.container import container_gate
from cairn.gates.plan import SDK_TEST
from cairn.gates.static import static_gate
from cairn.model.image_recipes import load_base
from cairn.plan.prepare import load, make_plan
from cairn.services import current, docker_client, services_dir
from cairn.stages import RUNNERS, STAGES
from cairn.store.local import LocalStore
from support import LEGACY, need, need_tool

FAMILY = "gfx90a"
CONTAINER_KINDS = ("image:", "push:", "gate:")
COMMANDS.setdefault("gate", ("cairn.gates.command", "gates"))
COMMANDS.setdefault("image", ("cairn.containers.command", "images"))
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.registry]


@pytest.fixture(scope="session")
def built(services: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("store-a")
    code = main(["build", LEGACY, "--store", str(store), "--family", FAMILY, "--jobs", "2"])
    need(code == 0 or (store / "last-build.json").exists(), "the build ran")
    return store


def _actions(store: Path) -> dict:
    return json.loads((store / "last-build.json").read_text())["actions"]


def _record(store: Path, action: str) -> dict:
    return json.loads((store / "trees" / _actions(store)[action]["output"] / "image.json").read_text())


def test_images_are_built_pushed_and_labelled(built: Path, services: object) -> None:
    actions = _actions(built)
    for name in ("image:runtime", "push:runtime", "image:smoke", "push:smoke"):
        assert actions[f"{name}@{FAMILY}"]["status"] == "ran", actions[f"{name}@{FAMILY}"]
    smoke = _record(built, f"image:smoke@{FAMILY}")
    runtime = _record(built, f"image:runtime@{FAMILY}")
    assert smoke["tags"] == [f"5.2.3-{FAMILY}-smoke0.1.0-py3.11"] and runtime["tags"] == [f"5.2.3-{FAMILY}"]
    # the smoke image adds small layers on top of the runtime image's layers (shared bytes)
    assert [x["digest"] for x in smoke["layers"][: len(runtime["layers"])]] == [x["digest"] for x in runtime["layers"]]
    assert sum(x["size"] for x in smoke["layers"][len(runtime["layers"]):]) < 1_000_000
    # the SDK came from the family index, pinned by the sha256 the index publishes
    index = built / "trees" / _actions(built)[f"index:{FAMILY}"]["output"] / FAMILY / "simple"
    for record, projects in ((runtime, ["rocm-sdk-core", f"rocm-sdk-libraries-{FAMILY}"]), (smoke, ["cairn-smoke"])):
        published = [json.loads((index / p / "index.v1.json").read_text())["files"][0] for p in projects]
        assert [(w["filename"], w["sha256"]) for w in record["wheels"]] == [(f["filename"], f["hashes"]["sha256"]) for f in published]
    registry = current().registry  # type: ignore[union-attr]
    raw = proc.run(["skopeo", "inspect", "--tls-verify=false", f"docker://{registry}/cairn/smoke@{smoke['digest']}"])
    labels = json.loads(raw.stdout)["Labels"]
    assert labels["dev.cairn.gfx-target"] == FAMILY and labels["dev.cairn.rocm-version"] == "5.2.3"
    assert labels["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
    dockerfile = (built / "trees" / _actions(built)[f"image:smoke@{FAMILY}"]["output"] / "Dockerfile").read_text()
    assert f"FROM ${{REGISTRY}}/cairn/rocm@{runtime['digest']}" in dockerfile
    assert f"sha256:{smoke['wheels'][0]['sha256']}" in dockerfile and "--require-hashes" in dockerfile


def test_gates_pass_and_gpu_is_not_run(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["gate", LEGACY, "--store", str(built), "--json"])
    report = json.loads(capsys.readouterr().out)
    status = {(r["gate"], r["image"]): r for r in report["results"]}
    for image in ("runtime", "smoke"):
        assert status[("static-coverage", image)]["status"] == "passed"
        assert status[("in-container", image)]["status"] == "passed"
        gpu = status[("gpu", image)]
        if not os.path.exists("/dev/kfd"):
            assert (gpu["status"], gpu["reason"]) == ("not-run", "not run: no AMD GPU on this host")
    # the smoke kernels and the family's math libraries (rocSPARSE, rocRAND) in the runtime layers under it
    assert "gfx90a: covered by all 3 binaries" in status[("static-coverage", "smoke")]["reason"]
    assert "gfx90a: covered by all 2 binaries" in status[("static-coverage", "runtime")]["reason"]
    # the in-container gate ran the SDK's own test and the smoke kernels' CPU references, for real
    evidence = json.loads((built / "trees" / _actions(built)[f"gate:in-container:smoke@{FAMILY}"]["output"]
                           / "gate.json").read_text())["evidence"]
    sdk_test = evidence["python3 -m rocm_sdk test"]
    loaded = re.search(r"libraries: (\d+) of \1 loaded from /usr/local/lib/python3\.11/dist-packages", sdk_test["report"])
    assert sdk_test["exit"] == 0 and loaded and int(loaded[1]) > 6  # core's 6 and the family's math libraries
    assert "no GPU visible to HIP" in sdk_test["report"]
    assert f"cairn-smoke {FAMILY}: CPU references ok" in evidence["python3 -m cairn_smoke"]["report"]
    assert evidence["cairn-smoke --cpu"]["report"]["cpu"] == {"gemm": True, "reduce_sum": True, "saxpy": True}
    assert report["families"][FAMILY]["pass_rate"] == 1.0
    # only gfx90a was built: the families that were not are named, and the command says no
    assert "gfx908 skips static-coverage" in report["parity_gaps"] and code == 1


def test_two_clean_builds_give_identical_digests(built: Path, tmp_path: Path) -> None:
    manifest, registry = load(LEGACY)
    plan = make_plan(manifest, registry, [FAMILY], stages=STAGES)
    store = LocalStore(tmp_path / "another" / "place" / "store-b")
    seed(built, store.root)
    wanted = {f"image:runtime@{FAMILY}", f"image:smoke@{FAMILY}"}
    other_tmp = tmp_path / "other-tmp"
    other_tmp.mkdir()
    old_umask, old_tmpdir = os.umask(0o077), os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(other_tmp)
    tempfile.tempdir = None  # re-read TMPDIR
    try:
        report = execute(plan, store, runners=RUNNERS, jobs=2, only=wanted)
    finally:
        os.umask(old_umask)
        if old_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_tmpdir
        tempfile.tempdir = None
    assert report.ok, {k: v.detail for k, v in report.outcomes.items() if v.status == "failed"}
    assert report.outcomes["image:base"].status == "ran"  # from clean state: mmdebstrap ran again
    # every package of the base is the locked one, on both machines (the lock is part of the key)
    packages = (store.tree(report.output("image:base")) / "packages.txt").read_text().split()
    assert packages == sorted(load_base().lock) and len(packages) > 100
    for action in ["image:base", *sorted(wanted)]:
        first = built / "trees" / _actions(built)[action]["output"]
        second = store.tree(report.output(action))
        a, b = json.loads((first / "image.json").read_text()), json.loads((second / "image.json").read_text())
        assert a["digest"] == b["digest"], diff_layouts(first / "oci", second / "oci")
    assert main(["image", "diff", str(first), str(second)]) == 0


def seed(src: Path, dest: Path) -> None:
    """Give ``dest`` every cached action of ``src`` except images, pushes and gates (hard links)."""
    for record_path in sorted((src / "ac").glob("*.json")):
        record = json.loads(record_path.read_text())
        if record["action"].startswith(CONTAINER_KINDS):
            continue
        tree = dest / "trees" / record["output"]
        if not tree.exists():
            shutil.copytree(src / "trees" / record["output"], tree, symlinks=True, copy_function=os.link)
        shutil.copyfile(record_path, dest / "ac" / record_path.name)


def test_diff_names_the_layer_and_file(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runtime = built / "trees" / _actions(built)[f"image:runtime@{FAMILY}"]["output"]
    smoke = built / "trees" / _actions(built)[f"image:smoke@{FAMILY}"]["output"]
    assert main(["image", "diff", str(runtime), str(smoke)]) == 1
    out = capsys.readouterr().out
    assert "layer 3" in out and "only in b" in out and "dist-packages/cairn_smoke" in out


def test_dockerfile_of_a_blocked_image_is_rendered_with_the_reason(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "dockerfile", f"sglang@{FAMILY}", LEGACY, "--store", str(built)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"# BLOCKED: sglang 0.5.10.post1: sglang is in index:{FAMILY}, but its runtime needs torch")
    runtime = _record(built, f"image:runtime@{FAMILY}")
    assert f"FROM ${{REGISTRY}}/cairn/rocm@{runtime['digest']} AS wheels" in out
    assert "sglang-0.5.10.post1+rocm.5.2.3.dev.1700000000-py3-none-any.whl sha256:" in out
    assert f"torch (not in index:{FAMILY})" in out
    assert main(["image", "dockerfile", f"runtime@{FAMILY}", LEGACY, "--store", str(built)]) == 0
    assert capsys.readouterr().out.startswith("# Rendered by cairn from dockerfiles/runtime.Dockerfile.j2")


def test_services_dir_is_reported(services: object) -> None:
    assert services_dir().name  # CAIRN_SERVICES_DIR or ~/.cache/cairn/services


# -- deliberately broken images (derived from the real runtime image by adding one layer) ----------
def derive(base: Path, dest: Path, files: dict[str, bytes]) -> Path:
    """A copy of the OCI layout ``base`` with one more layer holding ``files``."""
    manifest, config, _ = read_image(base)
    shutil.copytree(base, dest, copy_function=os.link)
    layer_tar = dest.parent / f"{dest.name}.tar"
    with tarfile.open(layer_tar, "w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    for shared in ("index.json", "oci-layout"):  # hard links into the store: replace, never rewrite in place
        (dest / shared).unlink()
    layout = Layout(dest)
    layer = layout.add_layer_tar(layer_tar, 1700000000, dest.parent)
    layers = [*[_layer(x) for x in manifest["layers"]], layer]
    config = {**config, "rootfs": {"type": "layers", "diff_ids": [*config["rootfs"]["diff_ids"], layer.diff_id]}}
    layout.write_image(config, layers, {}, ["broken"])
    return dest


def _layer(item: dict) -> Layer:
    return Layer(item["digest"], "", item["size"], 0)


@pytest.fixture(scope="module")
def runtime_layout(built: Path) -> Path:
    return built / "trees" / _actions(built)[f"image:runtime@{FAMILY}"]["output"] / "oci"


@pytest.fixture(scope="module")
def smoke_layout(built: Path) -> Path:
    return built / "trees" / _actions(built)[f"image:smoke@{FAMILY}"]["output"] / "oci"


def push_layout(layout: Path, name: str) -> str:
    """Push a derived image to the services' registry; returns ``repo@digest`` for the container gate."""
    registry = current().registry  # type: ignore[union-attr]
    _, _, digest = read_image(layout)
    proc.run([need_tool("skopeo"), "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
              f"oci:{layout}:broken", f"docker://{registry}/cairn/broken:{name}"])
    return f"cairn/broken@{digest}"


SITE = "/usr/local/lib/python3.11/dist-packages"


@pytest.mark.slow
def test_missing_library_fails_naming_it(runtime_layout: Path, tmp_path: Path) -> None:
    gcc = need_tool("gcc")
    (tmp_path / "dep.c").write_text("int dep(void) { return 1; }\n")
    (tmp_path / "needs.c").write_text("int dep(void); int needs(void) { return dep(); }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", tmp_path / "libcairndep.so", tmp_path / "dep.c"], check=True)
    subprocess.run([gcc, "-shared", "-fPIC", "-o", tmp_path / "libneeds.so", tmp_path / "needs.c",
                    f"-L{tmp_path}", "-lcairndep"], check=True)
    library = f"{SITE}/_rocm_sdk_core/lib/libneeds.so"
    broken = derive(runtime_layout, tmp_path / "broken", {library: (tmp_path / "libneeds.so").read_bytes()})
    status, reason, evidence = static_gate(broken, FAMILY, "5.2.3")
    assert status == "failed"
    assert f"{library} needs libcairndep.so: not found in the image" in reason
    assert evidence["unresolved_count"] == 1


@pytest.mark.slow
def test_wrong_target_library_fails_naming_it(runtime_layout: Path, tmp_path: Path) -> None:
    hipcc = need_tool("hipcc")
    (tmp_path / "k.hip").write_text('#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 1; }\n'
                                    'extern "C" void launch(float* x) { hipLaunchKernelGGL(k, 1, 1, 0, 0, x); }\n')
    subprocess.run([hipcc, "-fPIC", "-shared", "--rocm-device-lib-path=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
                    "--offload-arch=gfx1030", "-o", tmp_path / "libwrong.so", tmp_path / "k.hip"],
                   check=True, env={**os.environ, "HIP_PLATFORM": "amd"})
    broken = derive(runtime_layout, tmp_path / "broken", {"/opt/cairn/lib/libwrong.so": (tmp_path / "libwrong.so").read_bytes()})
    status, reason, _ = static_gate(broken, FAMILY, "5.2.3")
    assert status == "failed"
    assert reason.startswith(f"{FAMILY} is not covered") and "libwrong.so" in reason


@pytest.mark.slow
def test_a_library_debian_built_without_the_target_is_partial_only_where_its_audit_said_so(
        runtime_layout: Path, tmp_path: Path) -> None:
    """The libraries wheel's audit names what the release built without a target (``partial``): the gate then
    passes naming it, and the matrix marks the cell partial. The same bytes anywhere else still fail."""
    hipcc = need_tool("hipcc")
    (tmp_path / "k.hip").write_text('#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 1; }\n')
    subprocess.run([hipcc, "-fPIC", "-shared", "--rocm-device-lib-path=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
                    "--offload-arch=gfx1030", "-Wl,-rpath,$ORIGIN/../../_rocm_sdk_core/lib",  # finds libamdhip64 as shipped
                    "-o", tmp_path / "libother.so", tmp_path / "k.hip"],
                   check=True, env={**os.environ, "HIP_PLATFORM": "amd"})
    code = (tmp_path / "libother.so").read_bytes()
    shipped = derive(runtime_layout, tmp_path / "partial", {f"{SITE}/_rocm_sdk_libraries/lib/libother.so": code})

    status, reason, evidence = static_gate(shipped, FAMILY, "5.2.3", partial=("lib/libother.so",))
    assert status == "passed", reason
    assert "partial — the release's libother.so was built without gfx90a code" in reason
    assert evidence["coverage"]["partial"] == ["libother.so"]
    # the same image in another store gives the same result: a gate names the image by digest, never the store's
    # path (each shard job's store is elsewhere, and the gates differed between the jobs and one build)
    moved = tmp_path / "another-store" / "oci"
    shutil.copytree(shipped, moved, symlinks=True)
    assert static_gate(moved, FAMILY, "5.2.3", partial=("lib/libother.so",)) == (status, reason, evidence)
    assert str(tmp_path) not in json.dumps(evidence)

    status, reason, _ = static_gate(shipped, FAMILY, "5.2.3")  # the audit never said so: a plain failure
    assert status == "failed" and "libother.so" in reason

    elsewhere = derive(runtime_layout, tmp_path / "elsewhere", {"/opt/cairn/lib/libother.so": code})
    status, reason, _ = static_gate(elsewhere, FAMILY, "5.2.3", partial=("lib/libother.so",))
    assert status == "failed" and "/opt/cairn/lib/libother.so" in reason


@pytest.mark.slow
def test_wheel_for_another_rocm_fails_naming_it(runtime_layout: Path, tmp_path: Path) -> None:
    metadata = b"Metadata-Version: 2.1\nName: torch\nVersion: 2.3.0+rocm6.1\n"
    broken = derive(runtime_layout, tmp_path / "broken",
                    {"/usr/lib/python3/dist-packages/torch-2.3.0+rocm6.1.dist-info/METADATA": metadata})
    status, reason, _ = static_gate(broken, FAMILY, "5.2.3")
    assert status == "failed" and "torch-2.3.0+rocm6.1 is built for ROCm 6.1, the image's SDK is 5.2.3" in reason


@pytest.mark.slow
def test_removed_grafted_library_fails_both_gates_naming_it(runtime_layout: Path, tmp_path: Path) -> None:
    """The core wheel carries its own libnuma (grafted from a pinned .deb under a mangled name, so a host's copy
    cannot stand in for it): a layer that deletes it (an OCI whiteout), as a careless "slim the image" step would,
    fails both gates naming it."""
    from cairn.audit.imagefs import ImageFS

    manifest, _, _ = read_image(runtime_layout)
    lib = f"{SITE}/_rocm_sdk_core/lib"
    (grafted,) = [p for p in ImageFS.from_layout(runtime_layout, manifest).elf_files() if p.startswith(f"{lib}/libnuma-")]
    name = grafted.rsplit("/", 1)[1]
    broken = derive(runtime_layout, tmp_path / "broken", {f"{lib}/.wh.{name}": b""})
    status, reason, _ = static_gate(broken, FAMILY, "5.2.3")
    assert status == "failed"
    assert f"{lib}/libamdhip64.so.5 needs {name}: not found in the image" in reason, reason
    reference = push_layout(broken, "no-libnuma")
    try:
        status, reason, _ = container_gate(reference, [SDK_TEST], gpu=False, log=io.StringIO())
    finally:  # the engine is shared (vfs: a full copy per layer): drop the pulled broken image
        docker_client().api.remove_image(f"{current().registry}/{reference}", force=True, noprune=True)  # type: ignore[union-attr]
    assert status == "failed"
    assert reason.startswith("python3 -m rocm_sdk test exited 1") and f"{name}: cannot open shared object file" in reason, reason


@pytest.mark.slow
def test_wrong_target_smoke_wheel_fails_naming_the_library(smoke_layout: Path, tmp_path: Path) -> None:
    # the gfx90a smoke image carrying a cairn-smoke library built for gfx1030 (another family's wheel)
    hipcc = need_tool("hipcc")
    (tmp_path / "k.hip").write_text('#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 1; }\n'
                                    'extern "C" void launch(float* x) { hipLaunchKernelGGL(k, 1, 1, 0, 0, x); }\n')
    subprocess.run([hipcc, "-fPIC", "-shared", "--rocm-device-lib-path=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
                    "--offload-arch=gfx1030", "-o", tmp_path / "lib.so", tmp_path / "k.hip"],
                   check=True, env={**os.environ, "HIP_PLATFORM": "amd"})
    library = f"{SITE}/cairn_smoke/lib/libcairn_smoke.so"
    broken = derive(smoke_layout, tmp_path / "broken", {library: (tmp_path / "lib.so").read_bytes()})
    status, reason, _ = static_gate(broken, FAMILY, "5.2.3")
    assert status == "failed" and reason.startswith(f"{FAMILY} is not covered") and "libcairn_smoke.so" in reason


# -- framework wheels over the runtime image, before the image is built (cairn.containers.linkage) --------
def _wheel_with(path: Path, members: dict[str, bytes]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, data in sorted(members.items()):
            archive.writestr(name, data)
    return path


@pytest.mark.slow
@pytest.mark.network
def test_linkage_names_every_soname_the_rocm7_plugin_needs_and_the_image_lacks(runtime_layout: Path, tmp_path: Path,
                                                                               cache_dir: Path) -> None:
    """The real ROCm 7 JAX plugin laid over the real 5.2.3 runtime image: the check names its ROCm 7 sonames
    (libamdhip64.so.7, …), and a wheel whose library needs only what the image has passes — so the check is
    the image's own ld.so search, not a list."""
    from cairn.containers.linkage import check, reason

    gcc = need_tool("gcc")
    (tmp_path / "ok.c").write_text("int numa_available(void); int ok(void) { return numa_available(); }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", tmp_path / "libok.so", tmp_path / "ok.c", "-l:libnuma.so.1"], check=True)
    fine = _wheel_with(tmp_path / "fine-1.0-py3-none-any.whl", {"fine/libok.so": (tmp_path / "libok.so").read_bytes(),
                                                                 "fine/__init__.py": b""})
    assert check(runtime_layout, [fine], {}, SITE) == ([], 1)
    # auditwheel-vendored siblings resolve (scipy.libs/libgfortran-….so needs libquadmath-….so beside it)
    scipy = next(iter(sorted((cache_dir / "wheels").glob("scipy-1.17.1-cp314-*.whl"))), None)
    if scipy is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.14",
                        "--platform", "manylinux_2_28_x86_64", "--dest", str(cache_dir / "wheels"), "scipy==1.17.1"],
                       check=True, capture_output=True, timeout=600)
        scipy = next(iter(sorted((cache_dir / "wheels").glob("scipy-1.17.1-cp314-*.whl"))))
    vendored = [(f, lib) for f, lib in check(runtime_layout, [scipy], {}, SITE)[0] if "/scipy.libs/" in f]
    assert vendored == []

    plugin = "jax_rocm7_plugin-0.10.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheels = cache_dir / "wheels"
    if not (wheels / plugin).is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
                        "--platform", "manylinux_2_28_x86_64", "--dest", str(wheels), "jax-rocm7-plugin==0.10.0"],
                       check=True, capture_output=True, timeout=600)
    missing, checked = check(runtime_layout, [wheels / plugin], {}, SITE)
    assert checked == 8
    sonames = {lib for _, lib in missing}
    assert {"libamdhip64.so.7", "libhipblas.so.3", "libhipsparse.so.4", "librocsolver.so.0", "libMIOpen.so.1"} <= sonames
    assert (f"{SITE}/jax_rocm7_plugin/rocm_plugin_extension.so", "libamdhip64.so.7") in missing
    assert "libstdc++.so.6" not in sonames and "libc.so.6" not in sonames  # the image's own system libraries resolve
    said = reason(missing, "5.2.3", SITE)
    assert said.startswith(f"{len(sonames)} libraries its wheels link are not in the release's ROCm 5.2.3 image: ")
    assert "jax_rocm7_plugin/_linalg.so needs libhipblas.so.3" in said


@pytest.mark.slow
@pytest.mark.network
def test_a_framework_image_whose_wheels_lack_sonames_is_blocked_naming_them(built: Path, runtime_layout: Path,
                                                                             tmp_path: Path, cache_dir: Path) -> None:
    """linkage → image → push → gate, each by its real runner: the image is not built, and every gate of it
    records "not-run: image blocked" with the missing sonames — what the matrix shows for the image's cells."""
    from cairn.containers.linkage import plan_linkage, run_linkage
    from cairn.containers.run import run_image, run_push
    from cairn.execute.runners import ActionContext
    from cairn.gates.run import run_gate
    from cairn.plan.graph import Action
    from cairn.wheels.index import write_index

    plugin = cache_dir / "wheels" / "jax_rocm7_plugin-0.10.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    if not plugin.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
                        "--platform", "manylinux_2_28_x86_64", "--dest", str(plugin.parent), "jax-rocm7-plugin==0.10.0"],
                       check=True, capture_output=True, timeout=600)
    index = tmp_path / "index"
    write_index([plugin], index, FAMILY)

    def run(runner, action: Action, deps: dict[str, Path]) -> Path:
        out = tmp_path / action.id.replace(":", "_").replace("@", "_")
        out.mkdir()
        with open(tmp_path / "log.txt", "a") as log:
            runner(ActionContext(action, out, log, deps, {d: "" for d in deps}))
        return out

    runtime_tree = runtime_layout.parent
    link = plan_linkage("jax", FAMILY, "5.2.3", f"image:runtime@{FAMILY}", f"index:{FAMILY}", ["jax-rocm7-plugin"], {}, SITE,
                        "3.11")
    linked = run(run_linkage, link, {link.inputs["parent_image"]: runtime_tree, f"index:{FAMILY}": index})
    verdict = json.loads((linked / "linkage.json").read_text())
    assert "libamdhip64.so.7" in verdict["missing_sonames"] and verdict["elf_files_checked"] == 8
    image = Action(f"image:jax@{FAMILY}", "image-build", {"linkage": link.id, "recipe": {"name": "jax"}, "version": "0.10.0",
                                                         "target": FAMILY, "family": FAMILY}, (link.id,))
    built_image = run(run_image, image, {link.id: linked})
    assert not (built_image / "oci").exists()
    push = run(run_push, Action(f"push:jax@{FAMILY}", "image-push", {}, (image.id,)), {image.id: built_image})
    gates: dict[str, Path] = {}
    for gate in ("static-coverage", "in-container"):
        action = Action(f"gate:{gate}:jax@{FAMILY}", "gate", {"gate": gate, "image": "jax", "target": FAMILY,
                                                              "family": FAMILY, "rocm": "5.2.3"}, (image.id, f"push:jax@{FAMILY}"))
        result = json.loads((run(run_gate, action, {image.id: built_image, f"push:jax@{FAMILY}": push}) / "gate.json").read_text())
        assert result["status"] == "not-run"
        assert result["reason"].startswith("image blocked: jax 0.10.0: ") and "libamdhip64.so.7" in result["reason"]
        assert "jax_rocm7_plugin/rocm_plugin_extension.so needs libamdhip64.so.7" in result["reason"]
        gates[action.id] = tmp_path / action.id.replace(":", "_").replace("@", "_")
    # the bundle runner matches those results to the target's JAX cell: the matrix names the sonames
    from cairn.matrix.bundle import load_bundle
    from cairn.publish.plan import REQUIREMENTS
    from cairn.publish.run import run_bundle

    inputs = {"release": {"name": "cairn-rocm", "version": "5.2.3", "channel": "dev", "source_date_epoch": 1700000000,
                          "manifest_sha256": "0" * 64, "base_os": "debian-12", "python": ["3.11"],
                          "required_gates": {"dev": ["static-coverage", "in-container"]}},
              "families": {FAMILY: [FAMILY]}, "products": {}, "frameworks": {FAMILY: [["jax", "0.10.0"]]}, "pins": {},
              "not_built": {}, "planned_gates": sorted(gates), "planned_images": [image.id],
              "image_gates": {image.id: ["static-coverage", "in-container"]}, "image_frameworks": {"jax": "jax"},
              "wheel_frameworks": {}, "requirements": REQUIREMENTS, "blocked_frameworks": {}}
    bundle = Action("bundle:release", "bundle", inputs, tuple(sorted(gates)))
    run(run_bundle, bundle, dict(gates))
    loaded = load_bundle(tmp_path / "bundle_release")
    cell = next(c for c in loaded.cells if c.framework == "jax")
    for result in loaded.gates_for(cell):
        assert result.status == "not-run" and "libamdhip64.so.7" in result.reason, result


def test_new_layers_read_from_the_engine_store_are_the_bytes_docker_save_exports(built: Path, tmp_path: Path) -> None:
    """The build reads a new image's own layers from the engine's store (tar-split replayed over overlay2's
    files) instead of ``docker save``: the same config, the same tar bytes, the parent's layers not read at
    all — and a file changed behind the engine's back is caught by the DiffID and falls back to the save."""
    from cairn.containers import engine_store
    from cairn.containers.image import engine_build, remove_created, save

    client = docker_client()
    push = json.loads((built / "trees" / _actions(built)["push:base"]["output"] / "push.json").read_text())
    base_tree = built / "trees" / _actions(built)["image:base"]["output"]
    parent = set(read_image(base_tree / "oci")[1]["rootfs"]["diff_ids"])
    context = tmp_path / "context"
    (context / "files" / "odd name é").mkdir(parents=True)
    (context / "files" / "a.txt").write_text("probe\n")
    (context / "files" / "odd name é" / "big.bin").write_bytes(os.urandom(3 << 20))
    (context / "Dockerfile").write_text(f"FROM {current().registry}/{push['reference']}\n"  # type: ignore[union-attr]
                                        "RUN rm /etc/debian_version\nCOPY files/ /opt/probe/\n")
    log = io.StringIO()
    tag = "cairn-test/engine-store:probe"
    created = engine_build(client, context, tag, {}, log)
    try:
        fast, slow = tmp_path / "fast", tmp_path / "slow"
        fast.mkdir(), slow.mkdir()
        read = engine_store.read_new_layers(client, tag, fast, parent, log)
        assert read is not None, log.getvalue()[-2000:]
        config, tars = read
        saved_config, saved_tars = save(client, tag, slow)
        assert config == saved_config
        assert [t is None for t in tars] == [True] * len(parent) + [False, False]  # the RUN's whiteout, the COPY
        for mine, theirs in zip(tars, saved_tars, strict=True):
            assert mine is None or mine.read_bytes() == theirs.read_bytes()
        with tarfile.open(tars[-2]) as tar:  # type: ignore[arg-type]
            assert tar.getnames() == ["etc", "etc/.wh.debian_version"]
        # the engine's copy of the COPY layer changed after the build: not used, docker save instead
        upper = Path(client.images.get(tag).attrs["GraphDriver"]["Data"]["UpperDir"])
        (upper / "opt" / "probe" / "a.txt").write_text("Probe\n")  # same size: only the DiffID can tell
        again = tmp_path / "again"
        again.mkdir()
        assert engine_store.read_new_layers(client, tag, again, parent, log) is None
        assert "does not match its DiffID" in log.getvalue().splitlines()[-1]
    finally:
        client.api.remove_image(tag, force=True, noprune=True)
        remove_created(client, created, log)
