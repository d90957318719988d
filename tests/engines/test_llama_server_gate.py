"""How the llama.cpp image's gate judges llama-server's report against the NumPy reference.

The reports here are built from the reference itself (what a correct engine reports, rounded to float32 as
llama-server's JSON is) and then changed the way a broken engine would change them; the real engine in the
real image is run by test_llama_hip_image.py. The model and reference are the project's own, built from the
pinned sdist's vocab.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn.engines.llama import build
from cairn.engines.llama.reference import Reference, load_reference
from cairn.engines.llama.server_gate import command, judge, log_softmax
from cairn.engines.llama.vocab import extract_vocab
from support.llama_fixtures import llama_sdist


@pytest.fixture(scope="module")
def f32(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Reference, dict[str, Any]]:
    out = tmp_path_factory.mktemp("server-gate")
    vocab = extract_vocab(llama_sdist(cache_dir), "llama-spm", out)
    entry, = build.build_gate_inputs(vocab, out, quants=("F32",))
    return out / entry["path"], load_reference(out / entry["reference"]), entry


def correct_report(ref: Reference, n_probs: int = 8) -> dict[str, Any]:
    steps = []
    for position in range(ref.n_prompt - 1, len(ref.tokens) - 1):
        lp = log_softmax(ref.logits[position]).astype(np.float32)
        best = np.argsort(-lp)[:n_probs]
        steps.append({"id": ref.tokens[position + 1], "logprob": float(lp[ref.tokens[position + 1]]),
                      "top": [[int(t), float(lp[t])] for t in best]})
    return {"tokenize": ref.tokens[: ref.n_prompt], "completion": steps,
            "expected_text": " continuation", "openai": {"text": " continuation", "finish_reason": "length"}}


def failing(checks: list) -> list[tuple[str, str]]:
    return [(c.name, c.detail) for c in checks if not c.passed]


def test_a_correct_engine_passes_every_check(f32: tuple[Path, Reference, dict[str, Any]]) -> None:
    model, ref, _ = f32
    checks = judge(correct_report(ref), ref, model)
    assert [c.name for c in checks] == ["model", "tokenizer", "logprobs", "openai"] and not failing(checks)


def test_a_wrong_log_probability_names_its_position(f32: tuple[Path, Reference, dict[str, Any]]) -> None:
    model, ref, _ = f32
    report = correct_report(ref)
    bad = copy.deepcopy(report)
    bad["completion"][3]["top"][1][1] += 0.01  # position n_prompt - 1 + 3 = 14
    (name, detail), = failing(judge(bad, ref, model))
    assert name == "logprobs" and detail.startswith("position 14: log-probability of token ")
    assert "> tolerance" in detail


def test_a_different_greedy_token_names_the_first_position_it_differs(f32: tuple[Path, Reference, dict[str, Any]]) -> None:
    model, ref, _ = f32
    report = correct_report(ref)
    report["completion"][1]["id"] = report["completion"][1]["top"][1][0]  # the second-best token at position 12
    (name, detail), = failing(judge(report, ref, model))
    assert name == "logprobs" and detail.startswith(f"position 12: llama.cpp picks {report['completion'][1]['id']}, "
                                                     f"the reference {ref.tokens[13]}")


def test_tokenizer_openai_and_model_file_are_each_checked(f32: tuple[Path, Reference, dict[str, Any]], tmp_path: Path) -> None:
    model, ref, _ = f32
    report = correct_report(ref)
    report["tokenize"] = [1, *ref.tokens[2: ref.n_prompt]]
    report["openai"]["text"] = " something else"
    other = tmp_path / "other.gguf"
    other.write_bytes(model.read_bytes() + b"\0")
    assert [name for name, _ in failing(judge(report, ref, other))] == ["model", "tokenizer", "openai"]
    report["completion"] = report["completion"][:-1]
    assert failing(judge(report, ref, model))[-2] == ("logprobs", "llama.cpp generated 7 tokens, the reference 8")


def test_the_image_is_asked_for_the_prompt_ids_and_the_reference_continuation(f32: tuple[Path, Reference, dict[str, Any]]) -> None:
    _, ref, entry = f32
    argv = command(entry, ref)
    assert argv[:3] == ["cairn-llama", "--model", f"/gate/{entry['path']}"]
    assert argv[argv.index("--prompt-ids") + 1] == ",".join(map(str, build.PROMPT))
    assert argv[argv.index("--continuation") + 1] == ",".join(map(str, ref.tokens[ref.n_prompt:]))
    assert argv[-2:] == ["--gpu-layers", "0"] and command(entry, ref, gpu_layers=99)[-1] == "99"
