"""llama.cpp compiled with HIP, packaged and gated for real, for two families: Strix Halo (gfx1151, its exact
target) from the default slice every test run builds, and — under ``nox -s engines`` (``engine_build``) — gfx110X-dgpu
(gfx11-generic, one compile for three GPUs), whose own tests check the generic code object and the per-target index.

For gfx110X-dgpu ``cairn build`` runs the whole chain into one store: the build image (mmdebstrap), llama.cpp from the pinned
sdist in it, the llama-cpp-python wheel and the family's index, the runtime and llama-cpp images for gfx1100,
the tiny-model artifact and the three gates. One compile of ggml's HIP backend for one target is the budget
a test may spend (docs/engines.md has the measured times); ``CAIRN_LLAMA_TEST_STORE`` may name a store that
already holds the build, which Cairn then reuses by key like any cached action.

The image is run as llama.cpp's users run upstream's server image: ``docker run … IMAGE -m /models/x.gguf``
with no further flag answers ``/v1/completions`` on port 8080 of every interface (the private engine has no
bridge network, so the test runs it with ``--network host`` and asks on the host's own non-loopback
address, which a server bound to 127.0.0.1 would not answer); ``import llama_cpp``, ``llama-cli``,
``llama-bench`` work in it and ``llama-server --version`` names llama.cpp's build b11312 (0c1e57098).

Then the deliberately wrong builds: the image with a libggml-hip.so that carries only gfx12-generic code
fails the static gate naming that library; one whose libggml-hip.so needs a library the image lacks fails
the in-container gate naming that library (not a silent CPU fallback); and a model with one corrupted
weight tensor fails the in-container gate naming the first position llama.cpp's answer departs from the
reference.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

import gguf
import pytest

from cairn.audit import audit_file, audit_paths
from cairn.gates.container import NO_GPU, host_has_gpu, run_in_image
from cairn.gates.llama import llama_gate
from cairn.gates.plan import IN_CONTAINER
from cairn.gates.static import static_gate
from support import DEFAULT_SLICE_FAMILY, ROOT, SLICE_RECORD, need_module, need_tool

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"
FAMILY, TARGET = "gfx110X-dgpu", "gfx1100"
GATES = [f"gate:{g}:llama-cpp@{TARGET}" for g in ("static-coverage", "in-container", "gpu")]
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.registry, pytest.mark.hipcc]


@dataclass(frozen=True)
class Built:
    """A store holding one family's llama.cpp build, its images and gates, and the actions that made them."""

    store: Path
    actions: dict
    family: str
    target: str

    def tree(self, action: str) -> Path:
        return self.store / "trees" / self.actions[action]["output"]

    def gate(self, action: str) -> dict:
        return json.loads(next(self.tree(action).glob("*.json")).read_text())

    def push(self, image: str = "llama-cpp") -> dict:
        return json.loads((self.tree(f"push:{image}@{self.target}") / "push.json").read_text())


@pytest.fixture(scope="module", params=[
    pytest.param("gfx1151", id="gfx1151", marks=pytest.mark.default_slice),  # asks for it below, by name
    pytest.param("gfx1100", id="gfx1100", marks=pytest.mark.engine_build),
])
def built(request: pytest.FixtureRequest) -> Built:
    """The llama.cpp image of a target: gfx1151's from the default slice, gfx1100's from its own build."""
    if request.param == "gfx1151":
        store = request.getfixturevalue("default_slice")
        actions = json.loads((store / SLICE_RECORD).read_text())["actions"]
        return Built(store, actions, DEFAULT_SLICE_FAMILY, "gfx1151")
    store, actions = request.getfixturevalue("built_gfx110x")
    return Built(store, actions, FAMILY, TARGET)


@pytest.fixture(scope="module")
def built_gfx110x(services: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    need_tool("mmdebstrap")
    need_tool("patchelf")
    store = Path(os.environ.get("CAIRN_LLAMA_TEST_STORE") or tmp_path_factory.mktemp("llama-store"))
    only = [arg for action in [*GATES, f"index:{FAMILY}", f"package:rocm-sdk@{TARGET}"] for arg in ("--only", action)]
    result = subprocess.run([sys.executable, "-m", "cairn.cli", "build", str(MANIFEST), "--family", FAMILY, *only,
                             "--store", str(store), "--jobs", "2"], capture_output=True, text=True, cwd=ROOT,
                            timeout=4 * 3600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    return store, json.loads((store / "last-build.json").read_text())["actions"]


def _tree(store: Path, actions: dict, action: str) -> Path:
    return store / "trees" / actions[action]["output"]


def _gate(store: Path, actions: dict, action: str) -> dict:
    return json.loads(next(_tree(store, actions, action).glob("*.json")).read_text())


@pytest.mark.engine_build
def test_the_family_index_serves_a_llama_cpp_python_wheel_with_device_code_for_every_member(built_gfx110x: tuple[Path, dict],
                                                                                               tmp_path: Path) -> None:
    store, actions = built_gfx110x
    index = _tree(store, actions, f"index:{FAMILY}") / FAMILY
    files = json.loads((index / "simple" / "llama-cpp-python" / "index.v1.json").read_text())["files"]
    (wheel,) = [f["filename"] for f in files]
    assert wheel.startswith("llama_cpp_python-0.3.36+rocm.7.2.4.dev.1761811681-py3-none-")
    with zipfile.ZipFile(index / "files" / wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path)
    assert {"llama_cpp/__init__.py", "llama_cpp/lib/libllama.so", "llama_cpp/lib/libggml.so",
            "llama_cpp/lib/libggml-hip.so"} <= set(names)
    hip = tmp_path / "llama_cpp" / "lib" / "libggml-hip.so"
    assert set(audit_file(hip).targets) == {"gfx11-generic"}
    report = audit_paths([hip])
    assert all(report.coverage(t).covered for t in ("gfx1100", "gfx1101", "gfx1102"))
    assert not report.coverage("gfx1201").covered


@pytest.mark.engine_build
def test_from_the_targets_own_index_pip_installs_llama_cpp_python_with_gfx1100_code_alone(built_gfx110x: tuple[Path, dict],
                                                                                             tmp_path: Path) -> None:
    """What a 7900 XTX user gets from ``simple/gfx1100/``: the wheels the publisher lists there (the family index's,
    with ``rocm-sdk <release>+gfx1100`` in place of the plain meta wheel and of the family's libraries wheel) —
    llama-cpp-python's own requirements included, mirrored into the family index by sha256: no other index and
    no wheelhouse. pip, and uv, resolve ``rocm-sdk[gfx110x-dgpu]`` to gfx1100's device wheel: every library with
    device code holds gfx1100's and no other target's, and libggml-hip its gfx11-generic build."""
    from cairn.wheels.index import write_index

    store, actions = built_gfx110x
    family_files = _tree(store, actions, f"index:{FAMILY}") / FAMILY / "files"
    plain = [w for w in family_files.glob("*.whl") if not w.name.startswith(("rocm_sdk-", "rocm_sdk_libraries_", "rocm_sdk_device_"))
             and "-gfx" not in w.name.removesuffix(".whl").rsplit("-", 1)[-1]]
    device = list(family_files.glob(f"rocm_sdk_device_{TARGET}-*.whl"))
    (own,) = (_tree(store, actions, f"package:rocm-sdk@{TARGET}") / "wheels").glob("*.whl")
    write_index([*plain, *device, own], tmp_path / "index", TARGET)
    index = (tmp_path / "index" / TARGET / "simple").as_uri()
    for tool in ("pip", "uv"):
        target = tmp_path / tool
        command = ([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir"]
                   if tool == "pip" else
                   [need_module("uv").find_uv_bin(), "pip", "install", "--no-config", "--python", sys.executable,
                    "--cache-dir", str(tmp_path / "uv-cache")])
        done = subprocess.run([*command, "--target", str(target), "--index-url", index, "llama-cpp-python"],
                              capture_output=True, text=True, timeout=1800,
                              env={k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
                              | {"PIP_CONFIG_FILE": os.devnull})
        assert done.returncode == 0, f"{tool}: {done.stderr[-3000:]}"
        installed = {p.name.split("-")[0].lower() for p in target.glob("*.dist-info")}
        assert {"llama_cpp_python", "rocm_sdk", "rocm_sdk_core", f"rocm_sdk_device_{TARGET}", "typing_extensions",
                "numpy", "diskcache", "jinja2", "markupsafe"} <= installed, tool
        assert not any(name.startswith("rocm_sdk_libraries") for name in installed), tool
        report = audit_paths([target])
        devices = {b.path: set(b.targets) for b in report.binaries if b.bundles}
        # (a library Debian built without gfx1100, named partial, keeps no device code at all)
        assert devices and all(targets <= {TARGET} or targets == {"gfx11-generic"} for targets in devices.values()), devices
        assert {"gfx11-generic"} in devices.values() and {TARGET} in devices.values(), tool


def test_the_in_container_gate_ran_llama_server_and_matched_the_reference(built: Built) -> None:
    result = built.gate(f"gate:in-container:llama-cpp@{built.target}")
    assert result["status"] == "passed", result["reason"]
    assert result["reason"].startswith("llama-server on CPU matched the NumPy reference for F32, Q8_0")
    for quant in ("F32", "Q8_0"):
        checks = result["evidence"]["engine"][quant]["checks"]
        assert [(c["name"], c["passed"]) for c in checks] == [("model", True), ("tokenizer", True), ("logprobs", True),
                                                               ("openai", True)]
        assert result["evidence"]["engine"][quant]["openai"]["finish_reason"] == "length"


def test_the_in_container_gate_loaded_ggmls_hip_backend_and_it_found_no_device(built: Built) -> None:
    result = built.gate(f"gate:in-container:llama-cpp@{built.target}")
    check = result["evidence"]["cairn-llama --backend-check --expect no-device"]
    assert check["exit"] == 0, check
    report = check["report"]
    assert report["library"].endswith("/llama_cpp/lib/libggml-hip.so") and report["not_found"] == []
    assert report["devices"] == 0 and "no ROCm-capable device is detected" in report["init_log"]
    assert "(build 11312, commit 0c1e57098)" in report["version"]


def test_the_static_gate_passed_and_the_gpu_gate_says_why_it_did_not_run(built: Built) -> None:
    static = built.gate(f"gate:static-coverage:llama-cpp@{built.target}")
    assert static["status"] == "passed", static["reason"]
    gpu = built.gate(f"gate:gpu:llama-cpp@{built.target}")
    if not host_has_gpu():
        assert (gpu["status"], gpu["reason"]) == ("not-run", NO_GPU)


def _host_address() -> str:
    """This host's own non-loopback IPv4 address: the first global-scope address ``ip`` lists."""
    listed = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True,
                            check=True).stdout.split()
    return listed[listed.index("inet") + 1].split("/", 1)[0]


def test_docker_run_with_only_a_model_serves_the_openai_api_on_port_8080(built: Built) -> None:
    """``docker run … -v models:/models IMAGE -m /models/<tiny>.gguf``: nothing else — no command, no --host,
    no --port. The engine here has no bridge, so --network host stands for ``-p 8080:8080``."""
    from cairn.services import engine_host, registry_address

    push = built.push()
    models = built.tree("model:tiny-llama")
    entry = next(e for e in json.loads((models / "gate-inputs.json").read_text()) if e["quant"] == "F32")
    reference = json.loads((models / entry["reference"]).read_text())
    address = _host_address()
    assert not address.startswith("127."), "the test needs a non-loopback address to tell 0.0.0.0 from 127.0.0.1"
    with socket.socket() as taken:
        assert taken.connect_ex((address, 8080)) != 0, f"port 8080 on {address} is in use: free it to run this test"
    registry, _ = registry_address()
    env = {**os.environ, "DOCKER_HOST": engine_host()}
    name = f"cairn-llama-serve-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "pull", "-q", f"{registry}/{push['reference']}"], check=True, capture_output=True, env=env)
    started = subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--network", "host",
                              "-v", f"{models}:/models:ro", f"{registry}/{push['reference']}", "-m", f"/models/{entry['path']}"],
                             capture_output=True, text=True, env=env)
    assert started.returncode == 0, started.stderr
    try:
        answer, deadline = None, time.monotonic() + 180
        while answer is None and time.monotonic() < deadline:
            request = urllib.request.Request(f"http://{address}:8080/v1/completions", headers={"Content-Type": "application/json"},
                                             data=json.dumps({"prompt": reference["prompt_text"], "max_tokens": 4,
                                                              "temperature": 0}).encode())
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    answer = json.loads(response.read())
            except OSError:  # not listening yet, or 503 while the model loads
                time.sleep(1)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, env=env)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, env=env)
    assert answer is not None, logs.stdout[-2000:] + logs.stderr[-2000:]
    assert answer["object"] == "text_completion" and answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 4
    assert "0.0.0.0:8080" in logs.stdout + logs.stderr  # the server says where it listens


def test_import_llama_cpp_the_tools_and_the_version_work_in_the_image(built: Built) -> None:
    push = built.push()
    with open(os.devnull, "w") as log:
        code, output = run_in_image(push["reference"], ["python3", "-c", "import llama_cpp, typing_extensions, numpy, jinja2; "
                                                        "print('llama_cpp', llama_cpp.__version__)"], gpu=False, log=log)
        assert (code, output.strip()) == (0, "llama_cpp 0.3.36"), output[-2000:]
        for tool in ("llama-server", "llama-cli", "llama-bench"):
            code, output = run_in_image(push["reference"], [tool, "--version"], gpu=False, log=log)
            assert code == 0 and "(build 11312, commit 0c1e57098)" in output, f"{tool}: {output[-1500:]}"
        code, output = run_in_image(push["reference"], ["test-backend-ops", "--help"], gpu=False, log=log)
        assert "compare with CPU backend for correctness" in output, output[-1500:]


def test_the_images_labels_name_its_target_rocm_source_and_base(built: Built) -> None:
    from cairn.formats.oci import read_image

    tree = built.tree(f"image:llama-cpp@{built.target}")
    _, config, _ = read_image(tree / "oci")
    labels = config["config"]["Labels"]
    runtime = built.push("runtime")
    assert labels["dev.cairn.gfx-target"] == built.target and labels["dev.cairn.rocm-version"] == "7.2.4"
    assert labels["dev.cairn.source-digest"] == "sha256:832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
    assert labels["dev.cairn.source-name"] == "llama_cpp_python-0.3.36.tar.gz"
    assert labels["dev.cairn.llama.cpp-build"] == "b11312-0c1e57098"
    assert labels["org.opencontainers.image.base.digest"] == runtime["digest"]
    assert config["config"]["Entrypoint"] == ["llama-server"] and not config["config"].get("Cmd")
    assert {"LLAMA_ARG_HOST=0.0.0.0", "LLAMA_ARG_PORT=8080"} <= set(config["config"]["Env"])


def test_an_image_whose_libggml_hip_needs_a_missing_library_fails_the_in_container_gate_naming_it(
        built: Built, tmp_path: Path) -> None:
    """The wrong build: libggml-hip.so from the family's wheel, its hipBLAS dependency renamed to a soname the
    image does not have (as a build against another hipBLAS would), put into the gfx1100 image through Cairn's
    own image build and pushed. llama.cpp would abort or fall back; the gate fails naming the library."""
    from cairn.containers.image import build_image
    from cairn.gates.container import container_gate
    from cairn.services import registry_address
    from cairn.services.registry_push import push as push_image

    index = built.tree(f"index:{built.family}") / built.family / "files"
    (wheel,) = index.glob("llama_cpp_python-*.whl")
    context = tmp_path / "context"
    context.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        (context / "libggml-hip.so").write_bytes(archive.read("llama_cpp/lib/libggml-hip.so"))
    needed = subprocess.run(["patchelf", "--print-needed", str(context / "libggml-hip.so")], check=True,
                            capture_output=True, text=True).stdout.split()
    (hipblas,) = [n for n in needed if n.startswith("libhipblas.so")]
    subprocess.run(["patchelf", "--replace-needed", hipblas, "libhipblas.so.99", str(context / "libggml-hip.so")], check=True)
    push = built.push()
    dockerfile = (f"ARG REGISTRY\nFROM ${{REGISTRY}}/{push['reference']}\n"
                  "COPY libggml-hip.so /usr/local/lib/python3.14/dist-packages/llama_cpp/lib/libggml-hip.so\n")
    out = tmp_path / "wrong"
    out.mkdir()
    with open(tmp_path / "log", "w") as log:
        build_image(out=out, context=context, dockerfile=dockerfile, parent_tree=built.tree(f"image:llama-cpp@{built.target}"),
                    parent_ref=push["reference"], epoch=1761811681, labels={}, tags=["missing-hipblas"],
                    record={"name": "llama-cpp-missing-hipblas", "repo": "cairn-test/llama-cpp-missing-hipblas",
                            "target": built.target}, log=log)
        registry, _ = registry_address()
        wrong = push_image(out, registry, log)
        status, reason, _ = container_gate(wrong.reference, IN_CONTAINER["llama-cpp"], gpu=False, log=log)
    assert status == "failed"
    # the image's first check (every library of the installed wheels loads) already names it; the backend check
    # behind it would say the same of libggml-hip.so — either way the gate fails naming the missing library
    assert "libggml-hip.so" in reason and "libhipblas.so.99" in reason, reason
    assert reason.startswith(("cairn-check exited 1: ", "cairn-llama --backend-check --expect no-device exited 1: ")), reason


def test_docker_run_of_the_image_with_a_gguf_model_answers(built: Built) -> None:
    push = built.push()
    models = built.tree("model:tiny-llama")
    entry = json.loads((models / "gate-inputs.json").read_text())[0]
    with open(os.devnull, "w") as log:
        code, output = run_in_image(push["reference"], ["llama-simple", "-m", f"/gate/{entry['path']}", "-n", "8",
                                                        "The quick brown fox"], gpu=False, log=log,
                                    mounts={str(models): "/gate"})
    assert code == 0, output[-2000:]
    assert "The quick brown fox" in output


@pytest.mark.engine_build
def test_an_image_whose_ggml_carries_only_gfx12_code_fails_the_static_gate_naming_it(built_gfx110x: tuple[Path, dict],
                                                                                     tmp_path: Path) -> None:
    """The wrong build: libggml-hip.so compiled for gfx12-generic (with the build image's hipcc) put into the
    gfx1100 image in place of the right one, through Cairn's own image build."""
    from cairn.containers.image import build_image
    from cairn.services import engine_host, registry_address

    store, actions = built_gfx110x
    registry, _ = registry_address()
    toolchain = json.loads((_tree(store, actions, "push:toolchain") / "push.json").read_text())
    context = tmp_path / "context"
    context.mkdir()
    (context / "kernel.hip").write_text('#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 1.0f; }\n')
    subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{context}:/w", "-w", "/w",
                    f"{registry}/{toolchain['reference']}", "hipcc", "-shared", "-fPIC", "--offload-arch=gfx12-generic",
                    "-o", "libggml-hip.so", "kernel.hip"], check=True, capture_output=True,
                   env={**os.environ, "DOCKER_HOST": engine_host()})
    assert set(audit_file(context / "libggml-hip.so").targets) == {"gfx12-generic"}
    push = json.loads((_tree(store, actions, f"push:llama-cpp@{TARGET}") / "push.json").read_text())
    dockerfile = (f"ARG REGISTRY\nFROM ${{REGISTRY}}/{push['reference']}\n"
                  "COPY libggml-hip.so /usr/local/lib/python3.14/dist-packages/llama_cpp/lib/libggml-hip.so\n")
    out = tmp_path / "wrong"
    out.mkdir()
    with open(tmp_path / "log", "w") as log:
        build_image(out=out, context=context, dockerfile=dockerfile, parent_tree=_tree(store, actions, f"image:llama-cpp@{TARGET}"),
                    parent_ref=push["reference"], epoch=1761811681, labels={}, tags=["wrong-target"],
                    record={"name": "llama-cpp", "repo": "cairn/llama-cpp", "target": TARGET, "family": FAMILY}, log=log)
    # the libraries the family's SDK wheel ships without gfx1100 code are accepted as partial, as the gate action does
    report = json.loads((_tree(store, actions, f"package:rocm-sdk-libraries@{FAMILY}") / "report.json").read_text())
    partial = tuple(report.get("audit", {}).get("partial", {}).get(TARGET, ()))
    status, reason, _ = static_gate(out / "oci", TARGET, "7.2.4", partial=partial)
    assert status == "failed"
    assert "libggml-hip.so" in reason and TARGET in reason


def test_a_corrupted_weight_tensor_fails_the_in_container_gate_naming_the_first_differing_position(
        built: Built, tmp_path: Path) -> None:
    push = built.push()
    models = built.tree("model:tiny-llama")
    entry = next(e for e in json.loads((models / "gate-inputs.json").read_text()) if e["quant"] == "F32")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    corrupted = inputs / entry["path"]
    corrupted.write_bytes((models / entry["path"]).read_bytes())
    reader = gguf.GGUFReader(corrupted, "r+")
    (tensor,) = [t for t in reader.tensors if t.name == "blk.1.ffn_down.weight"]
    tensor.data[...] = tensor.data * 1.5
    reader.data.flush()
    (inputs / entry["reference"]).write_bytes((models / entry["reference"]).read_bytes())
    (inputs / "gate-inputs.json").write_text(json.dumps([entry]))
    with open(tmp_path / "log", "w") as log:
        status, reason, _ = llama_gate(push["reference"], inputs, gpu=False, log=log)
    assert status == "failed"
    assert reason.startswith("F32: logprobs: position 11: ")  # the first generated position, right after the prompt
