"""The grid the matrix page draws (status of each square from the cell's own data) and the commands it offers
(image references on the public registry, never a loopback one; pip pins of exactly the cell's wheels)."""

from __future__ import annotations

import pytest

from cairn.errors import CairnError
from cairn.matrix import grid
from cairn.matrix.commands import check_registry, is_loopback, pip_command, public_image, registry_host
from cairn.matrix.model import Cell, Framework, GateResult, ImageRef, Matrix, Release, WheelFile
from cairn.matrix.render import to_html
from support import ROOT

DIGEST = "sha256:" + "ab" * 32
SHA = "cd" * 32
REQUIRED = (("dev", ("static-coverage",)), ("stable", ("static-coverage", "gpu")))


def cell(framework: str = "cairn-smoke", *, target: str = "gfx942", family: str = "gfx94X-dcgpu", channel: str = "dev",
         gates: tuple[GateResult, ...] = (GateResult("static-coverage", "passed"),), wheels: tuple[str, ...] = ("cairn_smoke-0.1.0-py3-none-linux_x86_64.whl",),
         images: tuple[str, ...] = ("127.0.0.1:5000/cairn/smoke:7.2.4-gfx942",), partial: tuple[str, ...] = (), python: str = "3.12") -> Cell:
    return Cell(release="7.2.4", channel=channel, gfx_target=target, family=family, products=("MI300X",), os="debian-sid", python=python,
                framework=Framework(framework, "1.0"), index_url=f"channels/{channel}/simple/{family}/",
                wheels=tuple(WheelFile(w, f"packages/{family}/{w}", SHA) for w in wheels),
                images=tuple(ImageRef(i, DIGEST) for i in images), gates=gates, partial=partial)


def matrix(*cells: Cell) -> Matrix:
    return Matrix(Release("cairn-rocm", "7.2.4", "dev", 1700000000, required_gates=REQUIRED), cells)


def test_status_of_each_kind_from_the_cell_data():
    m = matrix()
    assert grid.entry(cell(), m).status == "passed"
    partial = grid.entry(cell(partial=("librccl.so.1",)), m)
    assert (partial.status, partial.reasons) == ("partial", ("partial — no gfx942 code in: librccl.so.1",))
    held = grid.entry(cell(channel="stable"), m)  # stable requires gpu, which never reported
    assert held.status == "held"
    assert held.reasons == ("not promoted to stable: required gates did not pass", "gpu: not-run — no result recorded")
    failed = grid.entry(cell(gates=(GateResult("static-coverage", "failed", "gfx942: 2 binaries without code"),)), m)
    assert failed.status == "held" and "static-coverage: failed — gfx942: 2 binaries without code" in failed.reasons
    blocked = grid.entry(cell("jax", wheels=(), images=(), gates=(GateResult("static-coverage", "not-run", "image blocked: jax needs librocm_smi64.so.1"),)), m)
    assert (blocked.status, blocked.reasons) == ("blocked", ("not built: image blocked: jax needs librocm_smi64.so.1",))
    # a framework whose wheels cannot be had: its cell lists only the SDK's wheels and the runtime image, no gate ran
    not_run = (GateResult("static-coverage", "not-run", "blocked: no wheel for cp312"), GateResult("gpu", "not-run", "no AMD GPU"))
    sdk_only = cell("sglang", wheels=("rocm_sdk-7.2.4-py3-none-any.whl", "rocm_sdk_core-7.2.4-py3-none-linux_x86_64.whl"),
                    images=("127.0.0.1:5000/cairn/rocm:7.2.4-gfx942",), gates=not_run)
    assert grid.entry(sdk_only, m).reasons == ("not built: blocked: no wheel for cp312", "no AMD GPU")
    assert grid.entry(sdk_only, m).status == "blocked"
    # its own wheels were built, its image was not: held, with the gates' reason
    assert grid.entry(cell("jax", wheels=("jax-0.10.0-py3-none-any.whl",), gates=not_run), m).status == "held"
    # the SDK's own cell with its wheels: built
    assert grid.entry(cell("rocm-sdk", wheels=("rocm_sdk-7.2.4-py3-none-any.whl",), gates=not_run), m).status == "held"


def test_columns_rows_and_the_best_status_of_a_square():
    cells = (cell("rocm-sdk"), cell("torch"), cell("llama-cpp-python"), cell("onnxruntime-rocm"),
             cell("vllm", python="3.11", channel="stable"), cell("vllm", python="3.12"))
    m = matrix(*cells)
    # the columns are what users run; the SDK and the validation kernels are details of a target, never columns
    assert grid.columns(m) == ["llama.cpp", "JAX", "PyTorch", "vLLM", "SGLang", "Ollama", "onnxruntime-rocm"]
    assert grid.columns(matrix(cell(), cell("rocm-sdk"))) == ["llama.cpp", "JAX", "PyTorch", "vLLM", "SGLang", "Ollama"]
    rows = grid.rows(m, {"gfx942": ("MI300X", "MI300A")})
    assert [(r.product, r.gfx_target) for r in rows] == [("MI300X", "gfx942"), ("MI300A", "gfx942")]
    status = {sq.column: sq.status for sq in rows[0].squares}
    assert status == {"llama.cpp": "passed", "JAX": "absent", "PyTorch": "passed",
                      "vLLM": "passed", "SGLang": "absent", "Ollama": "absent", "onnxruntime-rocm": "passed"}
    assert {sq.column: sq.status for sq in rows[0].details} == {"runtime": "passed", "smoke": "absent"}
    vllm = next(sq for sq in rows[0].squares if sq.column == "vLLM")
    assert [e.status for e in vllm.entries] == ["passed", "held"]  # the cell a user can install first
    html = to_html(m, {"gfx942": ("MI300X", "MI300A")}, "ghcr.io/o", "https://cairn.invalid/r/")
    assert '<td class="sq st-passed" data-column="vLLM" data-status="passed"><details><summary>passed (2 cells)</summary>' in html


def test_runtime_square_is_the_sdk_as_the_best_cell_ships_it():
    """No rocm-sdk cell of its own: the runtime square is the SDK from the best built cell listing the meta wheel,
    with that cell's status, its id, and a pip command for the SDK alone (no framework wheel, no image)."""
    sdk = ("rocm_sdk-7.2.4.dev1-py3-none-any.whl", "rocm_sdk_core-7.2.4.dev1-py3-none-linux_x86_64.whl")
    smoke = cell(wheels=(*sdk, "cairn_smoke-0.1.0-py3-none-linux_x86_64.whl"), partial=("librccl.so.1",))
    jax = cell("jax", wheels=(*sdk, "jax-0.10.0-py3-none-any.whl"), gates=(GateResult("static-coverage", "not-run", "image blocked"),))
    m = matrix(smoke, jax)
    [runtime] = grid.runtime_entries(m.cells, m)
    assert (runtime.status, runtime.via, runtime.cell.framework) == ("partial", smoke.id, Framework("rocm-sdk", "7.2.4.dev1"))
    assert runtime.reasons[1:] == ("partial — no gfx942 code in: librccl.so.1",)
    assert runtime.cell.images == ()
    assert pip_command(runtime.cell, "https://cairn.invalid/r/") == (
        'pip install --index-url https://cairn.invalid/r/channels/dev/simple/gfx94X-dcgpu/ "rocm-sdk[gfx94x-dcgpu]==7.2.4.dev1"')
    [row] = grid.rows(m, {"gfx942": ("MI300X",)})
    assert row.details[0].column == "runtime" and row.details[0].status == "partial"
    assert [(sq.column, sq.status) for sq in row.squares if sq.status != "absent"] == [("JAX", "held")]  # smoke: a detail
    blocked = cell("sglang", wheels=sdk, images=(), gates=(GateResult("static-coverage", "not-run", "no wheel"),))
    assert [(e.status, e.reasons[0]) for e in grid.runtime_entries([blocked], matrix(blocked))] == [
        ("held", "the SDK as the sglang 1.0 cell ships it: no gate ran with it")]
    assert grid.runtime_entries([cell()], matrix()) == []  # no cell lists the SDK: not in this release


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1:5000", True), ("127.3.4.5", True), ("localhost:5000", True), ("localhost", True), ("[::1]:5000", True),
    ("registry.localhost:80", True), ("ghcr.io", False), ("10.0.0.1:5000", False), ("registry.cairn.invalid:443", False),
])
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_image_references_use_the_public_registry():
    local = ImageRef("127.0.0.1:54617/cairn/rocm:7.2.4-gfx1151", DIGEST)
    assert registry_host(local.reference) == "127.0.0.1:54617"
    assert public_image(local, "ghcr.io/cairn-rocm") == f"ghcr.io/cairn-rocm/cairn/rocm@{DIGEST}"
    assert public_image(local, None) is None  # local only: no pull command
    public = ImageRef("quay.io/cairn/rocm:7.2.4", DIGEST)
    assert public_image(public, None) == public_image(public, "ghcr.io/x") == f"quay.io/cairn/rocm@{DIGEST}"
    assert public_image(ImageRef("cairn/rocm:1", DIGEST), None) == f"cairn/rocm@{DIGEST}"  # a Docker Hub name has no host
    assert check_registry("ghcr.io/cairn-rocm/") == "ghcr.io/cairn-rocm"
    for bad in ("127.0.0.1:5000", "localhost/x", "http://ghcr.io", "ghcr.io/Upper", "a b"):
        with pytest.raises(CairnError):
            check_registry(bad)


def test_pip_command_pins_the_meta_extra_and_the_framework_wheels():
    wheels = ("jax-0.10.0-py3-none-any.whl", "jax_rocm7_plugin-0.10.0-cp312-cp312-manylinux_2_28_x86_64.whl",
              "rocm_sdk-7.2.4.dev1-py3-none-any.whl", "rocm_sdk_core-7.2.4.dev1-py3-none-linux_x86_64.whl",
              "rocm_sdk_libraries_gfx94x_dcgpu-7.2.4.dev1-py3-none-linux_x86_64.whl")
    assert pip_command(cell("jax", wheels=wheels), "https://cairn.invalid/r/") == (
        'pip install --index-url https://cairn.invalid/r/channels/dev/simple/gfx94X-dcgpu/ "rocm-sdk[gfx94x-dcgpu]==7.2.4.dev1" '
        '"jax==0.10.0" "jax-rocm7-plugin==0.10.0"')
    assert pip_command(cell(), None) is None  # a relative index and no URL to hang it off: no command
    device = ("rocm_sdk-7.2.4.dev1-py3-none-any.whl", "rocm_sdk_core-7.2.4.dev1-py3-none-linux_x86_64.whl",
              "rocm_sdk_device_gfx942-7.2.4.dev1-py3-none-linux_x86_64.whl")
    assert pip_command(cell("rocm-sdk", wheels=device), "https://cairn.invalid/r/") == (  # the SDK alone: gfx942's code
        'pip install --index-url https://cairn.invalid/r/channels/dev/simple/gfx94X-dcgpu/ "rocm-sdk[device-gfx942]==7.2.4.dev1"')
    assert "rocm-sdk[gfx94x-dcgpu]" in str(pip_command(cell("jax", wheels=(*device, wheels[0])), "https://cairn.invalid/r/"))
    assert pip_command(cell(wheels=()), "https://cairn.invalid/r/") is None


def test_a_cell_offers_its_own_image_and_the_sdk_detail_the_runtime_image():
    """A framework cell lists the runtime image beside its own: its square pulls and runs its own (llama.cpp's with
    the GPU devices, its port and a model volume), and the SDK's detail pulls the runtime image."""
    import tomllib

    from cairn.matrix.commands import RUNTIME_REPO, pull_commands, run_commands

    recipe = tomllib.loads((ROOT / "recipes" / "containers" / "runtime.toml").read_text())
    assert recipe["image"]["repo"] == RUNTIME_REPO
    sdk = ("rocm_sdk-7.2.4-py3-none-any.whl", "rocm_sdk_core-7.2.4-py3-none-linux_x86_64.whl")
    llama = cell("llama-cpp-python", wheels=(*sdk, "llama_cpp_python-0.3.36+rocm.7.2.4-py3-none-manylinux_2_39_x86_64.whl"),
                 images=("127.0.0.1:5000/cairn/rocm:7.2.4-gfx942", "127.0.0.1:5000/cairn/llama-cpp:7.2.4-gfx942"))
    assert pull_commands(llama, "ghcr.io/o") == [f"docker pull ghcr.io/o/cairn/llama-cpp@{DIGEST}"]
    assert run_commands(llama, "ghcr.io/o") == [
        f'docker run --rm --device /dev/kfd --device /dev/dri -p 8080:8080 -v "$HOME/models:/models" ghcr.io/o/cairn/llama-cpp@{DIGEST} '
        "-m /models/model.gguf"]
    assert run_commands(llama, None) == []  # local only: nothing to run
    [runtime] = grid.runtime_entries([llama], matrix(llama))
    assert pull_commands(runtime.cell, "ghcr.io/o") == [f"docker pull ghcr.io/o/cairn/rocm@{DIGEST}"]
    assert run_commands(runtime.cell, "ghcr.io/o") == [f"docker run --rm --device /dev/kfd --device /dev/dri -it ghcr.io/o/cairn/rocm@{DIGEST}"]


def test_an_engine_cell_says_its_partial_is_what_its_binaries_load():
    llama = cell("llama-cpp-python", partial=("rocblas kernel files",))
    assert grid.partial_text(llama) == "partial — no gfx942 code in: rocblas kernel files (libraries llama-cpp-python's own binaries load)"
    assert grid.partial_text(cell(partial=("librccl.so.1",))) == "partial — no gfx942 code in: librccl.so.1"
