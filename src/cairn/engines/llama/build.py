"""Write the gate's inputs: the tiny models and their references, named by content.

``python -m cairn.engines.llama.build --sdist llama_cpp_python-0.3.36.tar.gz --out DIR [--seed N]`` writes,
for each encoding, ``tiny-llama-<quant>-<sha256[:16]>.gguf`` and ``….reference.json`` (the NumPy logits
for the fixed prompt followed by the reference's own greedy continuation), plus ``gate-inputs.json``
listing them. Nothing here is committed: the same pin and seed give the same files, so they are build
artifacts like any other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from cairn.engines.llama import model, reference
from cairn.engines.llama.vocab import DEFAULT_VOCAB, extract_vocab
from cairn.errors import CairnError
from cairn.io import atomic_write

# "The quick brown fox jumps over the lazy dog" in the llama-spm vocab, after BOS (a test checks that
# llama.cpp's tokenizer, loaded from the model's copied metadata, produces exactly these ids).
PROMPT_TEXT = "The quick brown fox jumps over the lazy dog"
PROMPT = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203]
N_NEW = 8  # greedy tokens after the prompt: they take llama.cpp's one-token decode path through the KV cache
DEFAULT_SEED = 20260901


def build_gate_inputs(vocab_gguf: Path, out_dir: Path, seed: int = DEFAULT_SEED,
                      quants: tuple[str, ...] = tuple(model.QUANTS)) -> list[dict[str, Any]]:
    """Write one model and one reference per quantization into ``out_dir``; return their descriptions."""
    entries = []
    for quant in quants:
        scratch = out_dir / f".tiny-llama-{quant}.gguf"
        info = model.write_tiny_llama(vocab_gguf, scratch, seed, quant)
        stem = f"tiny-llama-{quant}-{info['sha256'][:16]}"
        model_path = out_dir / f"{stem}.gguf"
        os.replace(scratch, model_path)
        hp = reference.Hparams(**info["hparams"])
        tokens, logits = reference.greedy(model.stored_weights(hp, seed, quant), hp, PROMPT, N_NEW)
        ref = reference.Reference(info["sha256"], quant, seed, hp, tokens, len(PROMPT), logits.astype("float32"),
                                  PROMPT_TEXT)
        ref_path = out_dir / f"{stem}.reference.json"
        atomic_write(ref_path, ref.to_json())
        entries.append(info | {"path": model_path.name, "reference": ref_path.name})
    atomic_write(out_dir / "gate-inputs.json", json.dumps(entries, indent=2) + "\n")
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cairn.engines.llama.build", description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, required=True, help="the pinned llama-cpp-python sdist")
    parser.add_argument("--out", type=Path, required=True, help="directory for the models and references")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--vocab", default=DEFAULT_VOCAB, help="which models/ggml-vocab-<name>.gguf")
    args = parser.parse_args(argv)
    try:
        vocab = extract_vocab(args.sdist, args.vocab, args.out)
        for entry in build_gate_inputs(vocab, args.out, args.seed):
            print(f"{entry['quant']}: {args.out / entry['path']} ({entry['size']} bytes) + {entry['reference']}")
    except CairnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
