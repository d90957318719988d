"""Measure how far llama.cpp's logits sit from the NumPy reference: the figures behind compare's tolerances.

For each seed it writes the tiny models (F32 and Q8_0) and their references, runs llama.cpp (the installed
``llama_cpp``, CPU, one thread) as the gate does, and records per encoding the worst absolute logit error,
the worst error relative to its position's logit scale, and the tolerance's headroom over it. Usage:

    python bench/llama_gate_bench.py --out bench/results/llama_gate.json [--seeds 5] [--sdist SDIST]

The sdist defaults to ``$CAIRN_TEST_CACHE/sdists/`` (default ~/.cache/cairn-test), where the tests cache it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import describe

from cairn.engines.llama import build, compare, gate, reference
from cairn.engines.llama.vocab import SDIST, extract_vocab

CACHE = Path(os.environ.get("CAIRN_TEST_CACHE", "~/.cache/cairn-test")).expanduser()


def measure(sdist: Path, seeds: list[int]) -> dict[str, object]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        vocab = extract_vocab(sdist, "llama-spm", out)
        for seed in seeds:
            for entry in build.build_gate_inputs(vocab, out / str(seed), seed):
                ref = reference.load_reference(out / str(seed) / entry["reference"])
                start = time.perf_counter()
                got, _, version = gate.llama_logits(out / str(seed) / entry["path"], ref)
                seconds = time.perf_counter() - start
                diff = np.abs(got.astype(np.float64) - ref.logits)
                scale = np.max(np.abs(ref.logits), axis=1)
                result = compare.compare(got, ref.logits, compare.TOLERANCES[entry["quant"]])
                rows.append({
                    "seed": seed, "quant": entry["quant"], "size": entry["size"], "llama_cpp_python": version,
                    "max_abs_diff": float(diff.max()), "max_rel_diff": float((diff.max(axis=1) / scale).max()),
                    "logit_scale_max": float(scale.max()), "passed": result.passed,
                    "headroom": float(min(p.tolerance / p.max_abs_diff for p in result.positions)),
                    "seconds": round(seconds, 3),
                })
                print(f"seed {seed} {entry['quant']:5s} max |Δ| {rows[-1]['max_abs_diff']:.3g}  "
                      f"max |Δ|/scale {rows[-1]['max_rel_diff']:.3g}  headroom {rows[-1]['headroom']:.1f}×  "
                      f"{'PASS' if result.passed else 'FAIL'}")
    return {"machine": describe(), "command": "python bench/llama_gate_bench.py " + " ".join(sys.argv[1:]),
            "tolerances": {q: vars(t) for q, t in compare.TOLERANCES.items()}, "runs": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, default=CACHE / "sdists" / SDIST["filename"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    if not args.sdist.is_file():
        sys.exit(f"error: {args.sdist}: no such file — pip download {SDIST['name']}=={SDIST['version']} "
                 "--no-deps --no-binary=:all: (or run tests/engines/test_llama_model.py once) and pass it with --sdist")
    doc = measure(args.sdist, [build.DEFAULT_SEED + i for i in range(args.seeds)])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
