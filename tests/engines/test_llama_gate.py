"""The llama.cpp gate for real: llama-cpp-python 0.3.36 built for CPU runs the tiny models.

Needs ``llama_cpp`` importable (built from the pinned sdist: ``CMAKE_ARGS="-DGGML_NATIVE=OFF
-DLLAMA_BUILD_TESTS=OFF" pip install llama_cpp_python-0.3.36.tar.gz``): a developer's run without it skips,
CI (``CI=true``) fails. The gate runs as the image runs it, ``python -m cairn.engines.llama.gate``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from cairn.engines.llama import build, compare, gate, model, reference
from cairn.engines.llama.vocab import extract_vocab
from support import need
from support.llama_fixtures import llama_sdist

try:
    import llama_cpp
except ImportError:  # pragma: no cover - depends on the environment
    llama_cpp = None

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp_built() -> None:
    need(llama_cpp is not None, "llama_cpp is not importable: pip install the pinned llama-cpp-python "
                                "0.3.36 sdist with CMAKE_ARGS='-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF'")
    assert llama_cpp.__version__ == "0.3.36"


@pytest.fixture(scope="module")
def inputs(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    out = tmp_path_factory.mktemp("gate-inputs")
    vocab = extract_vocab(llama_sdist(cache_dir), "llama-spm", out)
    return {e["quant"]: {"model": out / e["path"], "reference": out / e["reference"]}
            for e in build.build_gate_inputs(vocab, out)}


def run_gate(model: Path, ref: Path, result: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cairn.engines.llama.gate", "--model", str(model),
                           "--reference", str(ref), "--result", str(result)], capture_output=True, text=True)


def corrupt(source: Path, dest: Path, tensor: str, factor: float) -> Path:
    """A copy of ``source`` with one tensor's values multiplied by ``factor`` (what a bad write or a broken
    conversion does); only F32 tensors, whose bytes are their values."""
    dest.write_bytes(source.read_bytes())
    reader = gguf.GGUFReader(dest, "r+")
    (target,) = [t for t in reader.tensors if t.name == tensor]
    assert target.tensor_type == gguf.GGMLQuantizationType.F32
    target.data[...] = target.data * factor
    reader.data.flush()
    return dest


@pytest.mark.parametrize("quant", ["F32", "Q8_0"])
def test_gate_passes_the_model_it_was_built_for(inputs: dict[str, dict[str, Path]], tmp_path: Path, quant: str) -> None:
    done = run_gate(inputs[quant]["model"], inputs[quant]["reference"], tmp_path / "gate.json")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["PASS model", "PASS tokenizer", "PASS logits", "PASS greedy"]
    assert lines[1].startswith(f"PASS tokenizer: {build.PROMPT_TEXT!r} → {build.PROMPT}")
    ref = reference.load_reference(inputs[quant]["reference"])
    assert lines[3] == f"PASS greedy: {build.N_NEW} tokens {ref.tokens[ref.n_prompt:]} as the reference"
    result = json.loads((tmp_path / "gate.json").read_text())
    assert result["passed"] and result["quant"] == quant and result["llama_cpp_python"] == "0.3.36"
    worst = result["comparison"]["max_abs_diff"]
    print(f"{quant}: max |Δlogit| {worst:.3g} over {len(ref.tokens)} positions")  # the figure docs/engines.md quotes
    assert 0 < worst < compare.TOLERANCES[quant].atol  # measured, not zero: llama.cpp really computed it


def test_a_scaled_query_weight_fails_at_position_1(inputs: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    """Position 0 attends only to itself, so a wrong W_q cannot show there: the first bad position is 1."""
    bad = corrupt(inputs["F32"]["model"], tmp_path / "bad.gguf", "blk.0.attn_q.weight", 1.5)
    done = run_gate(bad, inputs["F32"]["reference"], tmp_path / "gate.json")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("FAIL model: sha256 ") and "is not the reference's" in lines[0]
    assert lines[1].startswith("PASS tokenizer")
    assert lines[2].startswith("FAIL logits: position 1: max |Δlogit| ")
    result = json.loads((tmp_path / "gate.json").read_text())
    assert not result["passed"] and result["comparison"]["first_bad"] == 1
    assert result["comparison"]["positions"][0]["ok"]  # position 0 really matched


def test_compare_alone_catches_a_corrupted_tensor_the_sha_check_aside(inputs: dict[str, dict[str, Path]],
                                                                     tmp_path: Path) -> None:
    """The logits check stands on its own: run llama.cpp on a model with a scaled FFN and compare."""
    ref = reference.load_reference(inputs["F32"]["reference"])
    bad = corrupt(inputs["F32"]["model"], tmp_path / "bad.gguf", "blk.1.ffn_down.weight", 1.02)
    logits, _, _ = gate.llama_logits(bad, ref)
    result = compare.compare(logits, ref.logits, compare.TOLERANCES["F32"])
    assert not result.passed and result.first_bad == 0
    assert result.reason.startswith("position 0: max |Δlogit| ")
    good, _, _ = gate.llama_logits(inputs["F32"]["model"], ref)
    assert compare.compare(good, ref.logits, compare.TOLERANCES["F32"]).passed


def test_q8_0_is_held_to_its_own_arithmetic(inputs: dict[str, dict[str, Path]]) -> None:
    """The Q8_0 tolerance is tight enough to see the quantization path itself: llama.cpp's Q8_0 logits fail
    against the float weights' reference, and against a reference that skips GGML's activation
    quantization (what a kernel that multiplied float activations would compute)."""
    q8 = reference.load_reference(inputs["Q8_0"]["reference"])
    logits, _, _ = gate.llama_logits(inputs["Q8_0"]["model"], q8)
    assert compare.compare(logits, q8.logits, compare.TOLERANCES["Q8_0"]).passed
    f32 = reference.load_reference(inputs["F32"]["reference"])
    assert not compare.compare(logits, f32.logits, compare.TOLERANCES["Q8_0"]).passed
    stored = model.stored_weights(q8.hparams, q8.seed, "Q8_0")
    float_activations = reference.forward(reference.Weights(stored.tensors), q8.hparams, q8.tokens)
    result = compare.compare(logits, float_activations, compare.TOLERANCES["Q8_0"])
    assert not result.passed and result.first_bad == 0


def test_gate_input_errors_are_one_line(inputs: dict[str, dict[str, Path]], tmp_path: Path) -> None:
    missing = run_gate(tmp_path / "none.gguf", inputs["F32"]["reference"], tmp_path / "gate.json")
    assert missing.returncode == 2 and missing.stderr.strip().endswith(
        "none.gguf: no such model file — pass the .gguf the reference was written for")
    (tmp_path / "r.json").write_text("[]")
    bad_ref = run_gate(inputs["F32"]["model"], tmp_path / "r.json", tmp_path / "gate.json")
    assert bad_ref.returncode == 2 and len(bad_ref.stderr.strip().splitlines()) == 1
    assert "r.json: not a cairn.llama-reference/v1 file" in bad_ref.stderr
    not_gguf = tmp_path / "junk.gguf"
    not_gguf.write_bytes(b"not a model")
    junk = run_gate(not_gguf, inputs["F32"]["reference"], tmp_path / "gate.json")
    assert junk.returncode == 1 and "FAIL logits: llama.cpp could not run junk.gguf" in junk.stdout
    assert not (tmp_path / ".gate.json").exists()
