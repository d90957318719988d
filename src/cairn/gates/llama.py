"""The engine part of the llama.cpp image's in-container and GPU gates.

For every tiny model of the ``model:tiny-llama`` artifact (F32 and Q8_0, with their NumPy references) the
pushed image runs ``cairn-llama`` with the artifact mounted read-only at ``/gate`` — on CPU for the
in-container gate, with every layer offloaded (``-ngl 99``) for the GPU gate — and
``cairn.engines.llama.server_gate.judge`` holds the report to the reference. The first failing check of
the first failing model is the gate's reason (e.g. ``F32: logprobs: position 12: …``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn.engines.llama import server_gate
from cairn.engines.llama.reference import ReferenceError, load_reference
from cairn.errors import CairnError
from cairn.gates.container import report_of, run_in_image

GPU_LAYERS = 99


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
                               "openai": report.get("openai"), "completion": report.get("completion")}
        log.write("".join(f"{ref.quant} {'PASS' if c.passed else 'FAIL'} {c.name}: {c.detail}\n" for c in checks))
        # the engine's own answer first: a wrong logit names its position even when the file is wrong too
        for check in sorted((c for c in checks if not c.passed), key=lambda c: c.name == "model"):
            failures.append(f"{ref.quant}: {check.name}: {check.detail}")
    if failures:
        return "failed", failures[0], evidence
    where = f"GPU (-ngl {GPU_LAYERS})" if gpu else "CPU"
    return "passed", (f"llama-server on {where} matched the NumPy reference for {', '.join(evidence)} "
                      "(tokenizer, greedy tokens and log-probabilities, /v1/completions)"), evidence
