"""Stage planner for gates: one action per (gate, image, target) for every image the containers stage pushes.

``gate:<gate>:<image>@<target>`` depends on the image (its OCI layout, for the static gate) and on its
push (the digest the in-container and GPU gates run). The GPU gate's key includes this host's GPU agents'
gfx targets and its driver (``cairn.gates.gpu_host``), so a "not run" recorded here is never reused on a GPU
host, nor a gfx1100 verdict on a gfx1201 host or after a driver change. It comes after the images stage
in ``cairn.stages``; its runners are in ``cairn.gates.run``.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

from cairn import digest
from cairn.engines.llama.vocab import DEFAULT_VOCAB, SDIST
from cairn.gates.gpu_host import HOST_ROOT_ENV, read_gpu_host
from cairn.plan.context import StageContext
from cairn.plan.graph import Action
from cairn.plan.ids import action_id, gate_action_id, parse_action_id

LAYOUT_VERSION = 1
# the commands each image's scripts answer to (see cairn/containers/scripts)
SDK_TEST = ["python3", "-m", "rocm_sdk", "test"]
IN_CONTAINER = {"runtime": [["cairn-check"], SDK_TEST],
                "smoke": [["cairn-check"], SDK_TEST, ["python3", "-m", "cairn_smoke"], ["cairn-smoke", "--cpu"]],
                "jax": [["cairn-check"], ["cairn-jax", "--cpu"]],
                # ggml's HIP backend loads and finds no device, and llama-server names its real build, before any
                # tool runs: a library it cannot load is then the reason, by name
                "llama-cpp": [["cairn-check"], SDK_TEST, ["cairn-llama", "--backend-check", "--expect", "no-device"],
                              ["llama-cli", "--version"],
                              ["python3", "-c", "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"]]}
ON_GPU = {"runtime": [["cairn-check"]], "smoke": [["cairn-smoke", "--gpu"]], "jax": [["cairn-jax", "--gpu"]],
          "llama-cpp": [["cairn-check"], ["cairn-llama", "--backend-check", "--expect", "device"]]}
# images whose gates also run an engine on the project's own tiny model (cairn.gates.llama)
ENGINE_IMAGES = {"llama-cpp": "model:tiny-llama"}
TINY_MODEL_LAYOUT = 1


@cache
def code_digest() -> str:
    """sha256 of the gates' code and the in-image scripts: a verdict is reused only while they are unchanged."""
    scripts = digest.files_digest((Path(__file__).parents[1] / "containers" / "scripts").glob("*.py"))  # shipped: their bytes count
    return hashlib.sha256(f"{digest.stage_code_digest('gates')} {scripts}".encode()).hexdigest()


def extend_plan(context: StageContext) -> None:
    images = [a for a in list(context.actions.values()) if a.kind == "image-build"]
    for image in images:
        ref = parse_action_id(image.id)
        name, target = ref.name, ref.where
        push_id = action_id("push", name, target)
        if push_id not in context.actions:
            continue
        for gate in image.inputs["recipe"]["gates"]:
            inputs: dict[str, Any] = {"layout": LAYOUT_VERSION, "code": code_digest(), "gate": gate, "image": name, "target": target,
                                      "family": image.family, "rocm": image.inputs["rocm"]}
            if gate == "in-container":
                inputs["commands"] = IN_CONTAINER.get(name, [["cairn-check"], SDK_TEST])
            if gate == "gpu":
                inputs["commands"] = ON_GPU.get(name, [["cairn-check"]])
                inputs["host_gpu"] = _host_gpu(os.environ.get(HOST_ROOT_ENV, ""))
            deps: tuple[str, ...] = (image.id, push_id)
            libraries = f"package:rocm-sdk-libraries@{image.family}"
            if gate == "static-coverage" and libraries in context.actions:
                deps += (libraries,)  # what its audit says the family's libraries lack: partial, not failed
            if name in ENGINE_IMAGES and gate in ("in-container", "gpu"):
                inputs["engine_inputs"] = ENGINE_IMAGES[name]
                deps = (*deps, _tiny_model(context))
            gate_id = gate_action_id(gate, name, target)
            context.actions[gate_id] = Action(id=gate_id, kind="gate", inputs=inputs, deps=deps, family=image.family)


@cache
def _host_gpu(root: str) -> str:
    """This host's GPU agents and driver as the GPU gate's key (read once per plan and host root)."""
    return read_gpu_host(Path(root) if root else None).key()


def _tiny_model(context: StageContext) -> str:
    """``model:tiny-llama``: the seeded tiny models and their NumPy references, from the pinned sdist's vocab
    (cairn.engines.llama.build) — a content-addressed artifact of the build, never a committed file."""
    # lazy: numpy, gguf, yaml, 100 ms at start-up (python -X importtime)
    from cairn.engines.llama.build import DEFAULT_SEED

    model_id = ENGINE_IMAGES["llama-cpp"]
    if model_id not in context.actions:
        fetch = f"fetch:pypi:{SDIST['filename']}"
        code = digest.stage_code_digest("tiny-model")
        context.actions[model_id] = Action(id=model_id, kind="tiny-model", deps=(fetch,), inputs={
            "layout": TINY_MODEL_LAYOUT, "code": code, "seed": DEFAULT_SEED, "vocab": DEFAULT_VOCAB,
            "sdist": SDIST["filename"], "gguf": version("gguf"), "numpy": version("numpy")})
    return model_id
