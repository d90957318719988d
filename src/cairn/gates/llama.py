"""The engine part of the llama.cpp image's in-container and GPU gates.

For every tiny model of the ``model:tiny-llama`` artifact (F32 and Q8_0, with their NumPy references) the
pushed image runs ``cairn-llama`` with the artifact mounted read-only at ``/gate`` — on CPU for the
in-container gate, with every layer offloaded (``-ngl 99``) for the GPU gate — and
``cairn.engines.llama.server_gate.judge`` holds the report to the reference. The first failing check of
the first failing model is the gate's reason (e.g. ``F32: logprobs: position 12: …``).

On a GPU the gate cannot pass without ggml's HIP backend doing the work:

- **offload**: the server's own log must say every layer went to the ROCm device (``using device ROCm0``
  and ``offloaded N/N layers to GPU``); a build that fell back to the CPU answers correctly and fails here;
- **parity**: the same models run on the CPU in the same image; the GPU's greedy tokens must be the CPU's;
- **ops**: llama.cpp's own ``test-backend-ops`` (built from the same sdist) in mode ``test`` on ``ROCm0``
  against the CPU backend, for ``BACKEND_OPS``: the ops a llama model runs, MUL_MAT for the types the tiny
  models and common quantizations use. ``-b ROCm0`` with no such device skips every backend and exits 0, so
  the gate requires the ROCm0 backend's own ``OK`` and a passed count above zero.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cairn.engines.llama import server_gate
from cairn.engines.llama.reference import ReferenceError, load_reference
from cairn.errors import CairnError
from cairn.gates.container import report_of, run_in_image

GPU_LAYERS = 99
HIP_DEVICE = "ROCm0"  # ggml's name for the first HIP device (GGML_CUDA_NAME "ROCm" + index)
# (ops, params regex) per test-backend-ops run (op names as ggml_op_desc gives them: a GLU op is named by its
# variant, SWIGLU): what a llama-architecture model computes, MUL_MAT for the
# types of the tiny models (F32, Q8_0) and the common quantizations (F16, Q4_0, Q4_K), activations in F32.
# A subset meant to fit a few minutes on one GPU (the CPU backend computes each case's reference).
BACKEND_OPS = (
    ("MUL_MAT", r"type_a=(f32|f16|q8_0|q4_0|q4_K),type_b=f32,"),
    ("GET_ROWS,RMS_NORM,ROPE,SOFT_MAX,ADD,MUL,SCALE,CPY,CONT,SILU,SWIGLU", ""),
)
BACKEND_OPS_TIMEOUT = 1200
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_PASSED = re.compile(r"(\d+)/(\d+) tests passed")


def llama_gate(reference: str, inputs: Path, *, gpu: bool, log: Any) -> tuple[str, str, dict[str, Any]]:
    """(status, reason, evidence) for the image ``reference`` on every model listed in ``inputs``."""
    try:
        entries = json.loads((inputs / "gate-inputs.json").read_text())
    except (OSError, ValueError) as exc:
        raise CairnError(f"{inputs}: no readable gate-inputs.json ({exc}) — rebuild model:tiny-llama") from None
    evidence: dict[str, Any] = {}
    failures: list[str] = []
    for entry in entries:
        try:
            ref = load_reference(inputs / entry["reference"])
        except ReferenceError as exc:
            raise CairnError(str(exc)) from None
        command = server_gate.command(entry, ref, gpu_layers=GPU_LAYERS if gpu else 0)
        code, output = run_in_image(reference, command, gpu=gpu, log=log, mounts={str(inputs): "/gate"})
        report = report_of(output)
        if code != 0 or not report:
            detail = "; ".join(report.get("failures", [])[:2]) if report else output.strip()[-300:]
            failures.append(f"{ref.quant}: cairn-llama exited {code}: {detail}")
            evidence[ref.quant] = {"exit": code, "report": report or output[-2000:]}
            continue
        checks = server_gate.judge(report, ref, inputs / entry["path"])
        evidence[ref.quant] = {"exit": code, "checks": [vars(c) for c in checks],
                               "openai": report.get("openai"), "completion": report.get("completion"),
                               "offload": report.get("offload")}
        log.write("".join(f"{ref.quant} {'PASS' if c.passed else 'FAIL'} {c.name}: {c.detail}\n" for c in checks))
        # the engine's own answer first: a wrong logit names its position even when the file is wrong too
        for check in sorted((c for c in checks if not c.passed), key=lambda c: c.name == "model"):
            failures.append(f"{ref.quant}: {check.name}: {check.detail}")
        if gpu:
            failures += [f"{ref.quant}: offload: {problem}" for problem in [offload_problem(report.get("offload") or [])]
                         if problem]
    if failures:
        return "failed", failures[0], evidence
    where = f"GPU (-ngl {GPU_LAYERS})" if gpu else "CPU"
    return "passed", (f"llama-server on {where} matched the NumPy reference for {', '.join(evidence)} "
                      "(tokenizer, greedy tokens and log-probabilities, /v1/completions)"), evidence


def offload_problem(lines: list[str]) -> str:
    """"" when the server's log says every layer went to the ROCm device, else what it says instead."""
    device = [line for line in lines if "using device" in line]
    counts = [m for line in lines if (m := _OFFLOADED.search(line))]
    if not any(HIP_DEVICE in line for line in device):
        init = [line for line in lines if "ggml_cuda_init" in line or "failed to initialize" in line]
        return (f"llama-server used no {HIP_DEVICE} device (" + ("; ".join(init[:2]) or "its log names no GPU device") +
                ") — it ran on the CPU")
    if not counts:
        return "llama-server's log has no 'offloaded N/N layers to GPU' line"
    done, total = int(counts[-1].group(1)), int(counts[-1].group(2))
    if done != total:
        return f"llama-server offloaded {done}/{total} layers to GPU, not all"
    return ""


def gpu_gate(reference: str, inputs: Path, *, log: Any) -> tuple[str, str, dict[str, Any]]:
    """The GPU gate's engine part: the models with every layer offloaded (matching the reference, with offload
    evidence), the same models on the CPU (the GPU's greedy tokens must be the CPU's), then test-backend-ops."""
    status, reason, on_gpu = llama_gate(reference, inputs, gpu=True, log=log)
    evidence: dict[str, Any] = {"gpu": on_gpu}
    if status != "passed":
        return status, reason, evidence
    _, _, on_cpu = llama_gate(reference, inputs, gpu=False, log=log)
    evidence["cpu"] = on_cpu
    problem = parity_problem(on_gpu, on_cpu)
    if problem:
        return "failed", problem, evidence
    ops_status, ops_reason, ops = backend_ops(reference, log=log)
    evidence["test-backend-ops"] = ops
    if ops_status != "passed":
        return ops_status, ops_reason, evidence
    return "passed", f"{reason}; every layer offloaded to {HIP_DEVICE}; greedy tokens equal the CPU's; {ops_reason}", evidence


def parity_problem(on_gpu: dict[str, Any], on_cpu: dict[str, Any]) -> str:
    """"" when each model's greedy tokens on the GPU are the CPU's, else the first model and position that differ."""
    for quant, run in on_gpu.items():
        gpu_ids = [step["id"] for step in run.get("completion") or []]
        cpu_ids = [step["id"] for step in (on_cpu.get(quant) or {}).get("completion") or []]
        if not cpu_ids:
            return f"{quant}: parity: the CPU run gave no tokens to compare ({(on_cpu.get(quant) or {}).get('exit')})"
        if gpu_ids != cpu_ids:
            first = next((i for i, (a, b) in enumerate(zip(gpu_ids, cpu_ids, strict=False)) if a != b), min(len(gpu_ids), len(cpu_ids)))
            return f"{quant}: parity: generated token {first} is {gpu_ids[first:first + 1]} on the GPU, {cpu_ids[first:first + 1]} on the CPU"
    return ""


def backend_ops_command(ops: str, params: str) -> list[str]:
    command = ["test-backend-ops", "test", "-b", HIP_DEVICE, "-o", ops]
    return [*command, "-p", params] if params else command


def judge_backend_ops(output: str) -> tuple[bool, str]:
    """(passed, detail) from one test-backend-ops run's console output."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", output)
    if re.search(rf"Backend \d+/\d+: {HIP_DEVICE}\s*\n\s*Skipping", text) or f"Backend {HIP_DEVICE}:" not in text:
        return False, f"test-backend-ops did not test {HIP_DEVICE} (no such device: ggml's HIP backend found no GPU)"
    failed = [line.strip() for line in text.splitlines() if line.rstrip().endswith("FAIL") and "Backend" not in line]
    counts = _PASSED.findall(text)
    passed, total = (int(counts[-1][0]), int(counts[-1][1])) if counts else (0, 0)
    if failed or f"Backend {HIP_DEVICE}: OK" not in text:
        return False, f"{len(failed)} case(s) differ from the CPU backend, first: {failed[0] if failed else 'backend FAIL'}"
    if total == 0 or passed != total:
        return False, f"{passed}/{total} cases passed"
    return True, f"{passed}/{total}"


def backend_ops(reference: str, *, log: Any) -> tuple[str, str, dict[str, Any]]:
    """``test-backend-ops test`` on the GPU for each ``BACKEND_OPS`` subset; the first failing subset is the reason."""
    evidence: dict[str, Any] = {}
    counts = []
    for ops, params in BACKEND_OPS:
        command = backend_ops_command(ops, params)
        code, output = run_in_image(reference, command, gpu=True, log=log, timeout=BACKEND_OPS_TIMEOUT)
        ok, detail = judge_backend_ops(output)
        evidence[" ".join(command)] = {"exit": code, "result": detail, "tail": output[-1500:]}
        if code != 0 or not ok:
            return "failed", f"test-backend-ops -o {ops}: {detail}" + (f" (exit {code})" if code else ""), evidence
        counts.append(f"{ops.split(',')[0] if len(ops) < 12 else 'other ops'} {detail}")
    return "passed", f"test-backend-ops on {HIP_DEVICE} matched the CPU backend ({'; '.join(counts)})", evidence
