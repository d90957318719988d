"""The llama.cpp gate: run the tiny model with llama.cpp on CPU and hold its logits to the NumPy reference.

``python -m cairn.engines.llama.gate --model M.gguf --reference M.reference.json [--result gate.json]``
prints one ``PASS``/``FAIL`` line per check and exits 0 when all pass, 1 when one fails, 2 on unusable
input. The checks:

- ``model``: the file is the one the reference was computed for (its sha256);
- ``tokenizer``: llama.cpp, reading the vocab copied into the model, spells the prompt as the reference's ids;
- ``logits``: every position's logits within the tolerance of ``compare`` for the model's encoding — the
  prompt goes through in one batch, the continuation one token at a time through the KV cache;
- ``greedy``: llama.cpp's top-1 token after each prompt and continuation position is the reference's.

llama.cpp runs with one thread, no flash attention and a float32 KV cache, so the F32 model is compared at
float32 precision; quantization is exercised by the Q8_0 model, not by the cache. Imports only NumPy,
``llama_cpp`` and this package's NumPy-only modules, so it runs in an image with nothing else of Cairn.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cairn.engines.llama.compare import TOLERANCES, Comparison, compare
from cairn.engines.llama.reference import Reference, ReferenceError, load_reference

SCHEMA = "cairn.llama-gate/v1"
GGML_TYPE_F32 = 0  # llama.cpp's ggml_type for float32, for the KV cache


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


class LlamaRunFailed(Exception):
    """llama.cpp could not load or evaluate the model: the gate fails with this message."""


def llama_logits(model: Path, ref: Reference) -> tuple[np.ndarray, list[int], str]:
    """llama.cpp's logits for ``ref.tokens`` (prompt in one batch, then one token per decode), the prompt
    text as llama.cpp tokenizes it, and llama_cpp's version."""
    # lazy: an optional dependency, absent where cairn runs (present in the image that runs this gate)
    import llama_cpp

    try:
        llm = llama_cpp.Llama(
            model_path=str(model), logits_all=True, n_ctx=ref.hparams.n_ctx, n_batch=ref.hparams.n_ctx,
            n_threads=1, n_threads_batch=1, seed=0, flash_attn=False, type_k=GGML_TYPE_F32,
            type_v=GGML_TYPE_F32, verbose=False,
        )
        llm.eval(ref.tokens[: ref.n_prompt])
        for token in ref.tokens[ref.n_prompt :]:
            llm.eval([token])
        logits = np.array(llm.scores[: len(ref.tokens)], dtype=np.float32)
        spelled = llm.tokenize(ref.prompt_text.encode(), add_bos=True) if ref.prompt_text else []
    except (ValueError, RuntimeError, OSError) as exc:
        raise LlamaRunFailed(f"llama.cpp could not run {model.name}: {exc}") from None
    return logits, spelled, llama_cpp.__version__


def run_gate(model: Path, ref: Reference) -> tuple[list[Check], Comparison | None, str]:
    """Every check's verdict, the logits comparison (None when llama.cpp could not run), llama_cpp's version."""
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    checks = [Check("model", sha == ref.model_sha256,
                    f"sha256 {sha[:16]}… " + ("is the reference's" if sha == ref.model_sha256 else
                                              f"is not the reference's {ref.model_sha256[:16]}…"))]
    try:
        logits, spelled, version = llama_logits(model, ref)
    except LlamaRunFailed as exc:
        return [*checks, Check("logits", False, str(exc))], None, ""
    if ref.prompt_text:
        want = ref.tokens[: ref.n_prompt]
        checks.append(Check("tokenizer", spelled == want, f"{ref.prompt_text!r} → {spelled}"
                            + ("" if spelled == want else f", the reference's ids are {want}")))
    tolerance = TOLERANCES[ref.quant]
    result = compare(logits, ref.logits, tolerance)
    checks.append(Check("logits", result.passed, f"{result.reason} ({ref.quant}: rtol {tolerance.rtol:g}, "
                                                 f"atol {tolerance.atol:g})"))
    checks.append(_greedy_check(result, ref))
    return checks, result, version


def _greedy_check(result: Comparison, ref: Reference) -> Check:
    generated = range(ref.n_prompt - 1, len(ref.tokens) - 1)  # positions whose top-1 chose the continuation
    by_position = {p.position: p for p in result.positions}
    missing = [i for i in generated if i not in by_position]
    if missing:
        return Check("greedy", False, f"no logits for positions {missing}")
    wrong = [by_position[i] for i in generated if by_position[i].got_top1 != by_position[i].ref_top1
             and not by_position[i].tie]
    got = [by_position[i].got_top1 for i in generated]
    if wrong:
        first = wrong[0]
        return Check("greedy", False, f"position {first.position}: llama.cpp picks {first.got_top1}, "
                                      f"the reference {first.ref_top1}; llama.cpp's greedy tokens {got}")
    return Check("greedy", True, f"{len(got)} tokens {got} as the reference")


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    """Temp file and rename, by hand: this module runs in images that have nothing else of Cairn (no cairn.io)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        json.dump(doc, handle, indent=1)
        handle.write("\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cairn.engines.llama.gate", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--result", type=Path, default=Path("llama-gate.json"), help="where the JSON verdict goes")
    args = parser.parse_args(argv)
    try:
        ref = load_reference(args.reference)
    except ReferenceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.model.is_file():
        print(f"error: {args.model}: no such model file — pass the .gguf the reference was written for",
              file=sys.stderr)
        return 2
    if ref.quant not in TOLERANCES:
        print(f"error: {args.reference}: no tolerance for encoding {ref.quant!r}", file=sys.stderr)
        return 2
    checks, result, version = run_gate(args.model, ref)
    for check in checks:
        print(f"{'PASS' if check.passed else 'FAIL'} {check.name}: {check.detail}")
    passed = all(check.passed for check in checks)
    _write_json(args.result, {
        "schema": SCHEMA, "passed": passed, "model": str(args.model), "model_sha256": ref.model_sha256,
        "quant": ref.quant, "llama_cpp_python": version,
        "checks": [vars(check) for check in checks],
        "comparison": result.to_dict() if result else None,
    })
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
