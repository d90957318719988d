"""The gates stage's runners: one gate on one pushed image, and the tiny model the engine gates run.

``cairn.gates.plan`` decides which gate runs on which image with which commands; these functions run it
and record a ``GateResult``. A gate on an image that was not built is recorded *not run*, with why; a
failed gate raises ``CheckFailed`` naming the image, its digest and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn.engines.llama.vocab import extract_vocab
from cairn.errors import CairnError, CheckFailed
from cairn.execute.runners import ActionContext
from cairn.gates.container import container_gate
from cairn.gates.gpu_host import gpu_lock, not_run_reason, read_gpu_host
from cairn.gates.static import static_gate
from cairn.gates.summary import BLOCKED_PREFIX
from cairn.model.gate_result import GateResult
from cairn.model.records import PushRecord, WheelReport
from cairn.plan.ids import parse_action_id
from cairn.services import registry_address
from cairn.services.registry_push import ensure_in_registry


def run_tiny_model(ctx: ActionContext) -> None:
    # lazy: numpy, gguf, yaml, 101 ms at start-up (python -X importtime)
    from cairn.engines.llama.build import build_gate_inputs

    inputs = ctx.action.inputs
    vocab = extract_vocab(ctx.deps[ctx.action.deps[0]] / inputs["sdist"], inputs["vocab"], ctx.out)
    for entry in build_gate_inputs(vocab, ctx.out, inputs["seed"]):
        ctx.log.write(f"{entry['quant']}: {entry['path']} ({entry['size']} bytes), reference {entry['reference']}\n")
    vocab.unlink()  # the models carry the vocab; the artifact is the models and their references


def _dependency(ctx: ActionContext, kind: str) -> str:
    """The id of the one dependency of ``kind`` (``image``, ``push``, ``package``): a gate finds its inputs by
    what they are, not by where the plan happened to list them."""
    found = [dep for dep in ctx.action.deps if parse_action_id(dep).kind == kind]
    if len(found) != 1:
        raise CairnError(f"{ctx.action.id}: expected one {kind}:… dependency, found {len(found)} — a Cairn bug in the gate's plan")
    return found[0]


def run_gate(ctx: ActionContext) -> None:
    inputs = ctx.action.inputs
    image_tree = ctx.deps[_dependency(ctx, "image")]
    pushed = _dependency(ctx, "push")
    push = PushRecord.read(ctx.deps[pushed], f"rebuild it: cairn build --only {pushed}")
    gate = inputs["gate"]
    if push.blocked:  # the image was not built (cairn.containers.linkage): no gate can run, say why
        result = GateResult(gate, inputs["image"], inputs["target"], inputs["family"], "", "not-run",
                            f"{BLOCKED_PREFIX}{push.blocked}", {})
        ctx.log.write(json.dumps(result.to_json(), indent=1, sort_keys=True) + "\n")
        result.write(ctx.out)
        return
    if gate == "static-coverage":
        partial = _known_partial(ctx, inputs["target"])
        status, reason, evidence = static_gate(image_tree / "oci", inputs["target"], inputs["rocm"], partial=partial,
                                                 cache=ctx.layer_scans)
    elif gate == "gpu":
        status, reason, evidence = _gpu_gate(ctx, image_tree, push.reference)
    else:
        _ensure_pushed(image_tree, ctx.log)
        status, reason, evidence = container_gate(push.reference, inputs["commands"], gpu=False, log=ctx.log)
        if status == "passed" and inputs.get("engine_inputs"):
            # lazy: numpy, cairn.engines, cairn.gates, 126 ms at start-up (python -X importtime)
            from cairn.gates.llama import llama_gate

            status, reason, engine = llama_gate(push.reference, ctx.deps[inputs["engine_inputs"]], gpu=False,
                                                log=ctx.log)
            evidence = {**evidence, "engine": engine}
    result = GateResult(gate, inputs["image"], inputs["target"], inputs["family"], push.digest, status, reason, evidence)
    ctx.log.write(json.dumps(result.to_json(), indent=1, sort_keys=True) + "\n")
    if status == "failed":
        raise CheckFailed(f"{gate} gate failed for {inputs['image']}@{inputs['target']} ({push.digest[:19]}): {reason}")
    result.write(ctx.out)


def _gpu_gate(ctx: ActionContext, image_tree: Path, reference: str) -> tuple[str, str, dict[str, Any]]:
    """The GPU gate: not run unless one of this host's GPU agents is the image's target (or a member of its
    generic target); else, holding the host's GPU lock, the image's GPU commands and, for an engine image,
    the engine's GPU gate (cairn.gates.llama.gpu_gate). The evidence names the host's agents and driver."""
    inputs = ctx.action.inputs
    host = read_gpu_host()
    ctx.log.write(f"host: {host.key()} (read from {host.source})\n")
    why = not_run_reason(host, inputs["target"])
    if why:
        return "not-run", why, {"host": host.key()}
    _ensure_pushed(image_tree, ctx.log)
    with gpu_lock(ctx.log):
        status, reason, evidence = container_gate(reference, inputs["commands"], gpu=True, log=ctx.log)
        if status == "passed" and inputs.get("engine_inputs"):
            # lazy: numpy, cairn.engines, cairn.gates, 93 ms at start-up (python -X importtime)
            from cairn.gates.llama import gpu_gate

            status, reason, engine = gpu_gate(reference, ctx.deps[inputs["engine_inputs"]], log=ctx.log)
            evidence = {**evidence, "engine": engine}
    return status, reason, {**evidence, "host": host.key()}


def _ensure_pushed(image_tree: Path, log: Any) -> None:
    """The gate runs the image from this host's registry: a push cached by another machine's job (or a registry
    reset since) left it elsewhere, so it is pushed again from the store when missing (same digest)."""
    registry, _ = registry_address()
    if registry:  # without one, the gate's own pull says what is missing
        ensure_in_registry(image_tree, registry, log)


def _known_partial(ctx: ActionContext, target: str) -> tuple[str, ...]:
    """Paths (under ``_rocm_sdk_libraries/``) the family's libraries wheel ships without ``target``'s code,
    as that wheel's audit recorded them; empty when the image's family has no libraries wheel."""
    libraries = next((d for d in ctx.action.deps if d.startswith("package:rocm-sdk-libraries@")), None)
    if libraries is None:
        return ()
    return WheelReport.read(ctx.deps[libraries], f"rebuild it: cairn build --only {libraries}").partial().get(target, ())


# the action kinds this stage adds, and what runs each (declared in cairn.stages)
RUNNERS = {
    "gate": run_gate,
    "tiny-model": run_tiny_model,
}
