"""The llama.cpp image's gate: llama-server in the image runs the tiny models; the NumPy reference judges.

The image runs ``cairn-llama`` (containers/scripts/cairn_llama.py) with the gate inputs mounted read-only
at ``/gate``; it reports llama.cpp's greedy tokens with the top log-probabilities of the raw distribution at
every generated position, its tokenization of the prompt and its OpenAI-compatible ``/v1/completions``
answer. This module holds that report to the reference, outside the image:

- ``model``: the mounted file is the one the reference was computed for (sha256);
- ``tokenizer``: llama.cpp spells the prompt text as the reference's ids;
- ``logprobs`` (per generated position ``p``, in order): every reported log-probability within
  **2 × the logit tolerance** of ``compare.TOLERANCES`` at ``p`` of the reference's float64 log-softmax
  (``log p_v = l_v − logsumexp(l)`` moves by at most twice the largest logit error), and llama.cpp's token
  is the reference's greedy token unless the reference's top-2 margin is within that bound (a tie);
  the first position that fails is named and nothing after it is judged (llama.cpp generated past it
  from its own tokens);
- ``openai``: ``/v1/completions`` with the prompt text returns, greedily, the reference's continuation.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cairn.engines.llama.compare import TOLERANCES
from cairn.engines.llama.reference import Reference


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def log_softmax(logits: np.ndarray) -> np.ndarray:
    row = logits.astype(np.float64)
    top = row.max()
    return row - (top + np.log(np.exp(row - top).sum()))


def judge(report: dict[str, Any], ref: Reference, model: Path) -> list[Check]:
    """Every check's verdict for one model's report (see the module docstring)."""
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    checks = [Check("model", sha == ref.model_sha256, f"sha256 {sha[:16]}… " + (
        "is the reference's" if sha == ref.model_sha256 else f"is not the reference's {ref.model_sha256[:16]}…"))]
    want = ref.tokens[: ref.n_prompt]
    spelled = report.get("tokenize")
    checks.append(Check("tokenizer", spelled == want, f"{ref.prompt_text!r} → {spelled}"
                        + ("" if spelled == want else f", the reference's ids are {want}")))
    checks.append(_logprobs(report.get("completion") or [], ref))
    openai = report.get("openai") or {}
    text, expected = openai.get("text"), report.get("expected_text")
    checks.append(Check("openai", isinstance(text, str) and text == expected,
                        f"/v1/completions answered {text!r}" + ("" if text == expected else f", the reference continues {expected!r}")))
    return checks


def _logprobs(steps: list[dict[str, Any]], ref: Reference) -> Check:
    tolerance = TOLERANCES[ref.quant]
    expected = len(ref.tokens) - ref.n_prompt
    if len(steps) != expected:
        return Check("logprobs", False, f"llama.cpp generated {len(steps)} tokens, the reference {expected}")
    worst = 0.0
    generated: list[int] = []
    for k, step in enumerate(steps):
        position = ref.n_prompt - 1 + k
        row = ref.logits[position]
        bound = 2 * tolerance.at(float(np.abs(row).max()))
        reference = log_softmax(row)
        for token, logprob in step["top"]:
            diff = abs(float(logprob) - float(reference[int(token)]))
            worst = max(worst, diff)
            if not diff <= bound:
                return Check("logprobs", False, f"position {position}: log-probability of token {token} is "
                                                f"{float(logprob):.6g}, the reference's {float(reference[int(token)]):.6g} "
                                                f"(|Δ| {diff:.3g} > tolerance {bound:.3g})")
        want = ref.tokens[position + 1]
        ordered = np.sort(row.astype(np.float64))
        tie = float(ordered[-1] - ordered[-2]) <= bound
        if int(step["id"]) != want and not tie:
            return Check("logprobs", False, f"position {position}: llama.cpp picks {step['id']}, the reference {want}; "
                                            f"llama.cpp's tokens so far {[*generated, int(step['id'])]}")
        generated.append(int(step["id"]))
    return Check("logprobs", True, f"{len(steps)} greedy tokens {generated} as the reference, top log-probabilities "
                                   f"within tolerance (max |Δ| {worst:.3g}; {ref.quant}: 2 × (atol {tolerance.atol:g} "
                                   f"+ rtol {tolerance.rtol:g} × scale))")


def command(entry: dict[str, Any], ref: Reference, *, gpu_layers: int = 0) -> list[str]:
    """The ``cairn-llama`` command the image runs for one gate-inputs entry (mounted at /gate)."""
    return ["cairn-llama", "--model", f"/gate/{entry['path']}", "--prompt-ids", ",".join(map(str, ref.tokens[: ref.n_prompt])),
            "--prompt-text", ref.prompt_text, "--continuation", ",".join(map(str, ref.tokens[ref.n_prompt:])),
            "--gpu-layers", str(gpu_layers)]
