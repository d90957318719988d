"""The tiny llama model, its NumPy reference and the comparison — everything that needs no llama.cpp.

The model is written for real from the vocab in the pinned llama-cpp-python sdist and read back with
``gguf``'s reader; llama.cpp itself runs in tests/engines/test_llama_gate.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import gguf
import numpy as np
import pytest

from cairn.digest import file_sha256
from cairn.engines.llama import build, compare, model, reference
from cairn.engines.llama.vocab import extract_vocab
from cairn.errors import CairnError, InputError
from support import ROOT
from support.llama_fixtures import llama_sdist


@pytest.fixture(scope="module")
def vocab(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_vocab(llama_sdist(cache_dir), "llama-spm", tmp_path_factory.mktemp("vocab"))


@pytest.mark.parametrize("quant", ["F32", "Q8_0"])
def test_same_seed_same_bytes_other_seed_other_bytes(vocab: Path, tmp_path: Path, quant: str) -> None:
    first = model.write_tiny_llama(vocab, tmp_path / "a.gguf", seed=7, quant=quant)
    again = model.write_tiny_llama(vocab, tmp_path / "b.gguf", seed=7, quant=quant)
    other = model.write_tiny_llama(vocab, tmp_path / "c.gguf", seed=8, quant=quant)
    assert first["sha256"] == again["sha256"] == file_sha256(tmp_path / "b.gguf")
    assert other["sha256"] != first["sha256"]
    assert first["size"] < 18_000_000 and not list(tmp_path.glob(".*"))  # no temp file left behind


def test_file_holds_the_architecture_and_the_vocab_s_tokenizer(vocab: Path, tmp_path: Path) -> None:
    info = model.write_tiny_llama(vocab, tmp_path / "m.gguf", seed=3, quant="Q8_0")
    written, source = gguf.GGUFReader(tmp_path / "m.gguf"), gguf.GGUFReader(vocab)
    keys = {k: f.contents() for k, f in written.fields.items()}
    assert keys["general.architecture"] == "llama"
    assert (keys["llama.block_count"], keys["llama.embedding_length"], keys["llama.attention.head_count"],
            keys["llama.attention.head_count_kv"], keys["llama.feed_forward_length"]) == (2, 64, 4, 2, 128)
    assert keys["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    for key, field in source.fields.items():
        if key.startswith("tokenizer."):
            assert keys[key] == field.contents(), key
    assert info["hparams"]["n_vocab"] == len(keys["tokenizer.ggml.tokens"]) == 32000
    types = {t.name: t.tensor_type.name for t in written.tensors}
    assert types["blk.0.attn_q.weight"] == "Q8_0" and types["token_embd.weight"] == "Q8_0"
    assert types["blk.1.ffn_norm.weight"] == "F32"
    assert len(types) == 3 + 2 * 9


def test_our_q8_0_decoder_agrees_with_gguf_s(vocab: Path) -> None:
    hp = reference.Hparams(n_vocab=32000)
    for name, (data, qtype) in model.encode(model.float_weights(hp, 5), "Q8_0").items():
        if qtype == gguf.GGMLQuantizationType.Q8_0:
            ours = reference.dequantize_q8_0(data, model.tensor_shapes(hp)[name])
            np.testing.assert_array_equal(ours, gguf.quants.dequantize(data, qtype), err_msg=name)


def test_q8_0_round_trip_is_ggml_s_block_format() -> None:
    x = np.linspace(-2.0, 1.0, 64, dtype=np.float32).reshape(2, 32)
    x[1] = 0.0  # an all-zero block stays zero (GGML's scale 0, multiplier 0)
    out = reference.q8_0_round_trip(x)
    scale = np.float32(np.float16(2.0 / 127))  # the first block's amax is 2
    np.testing.assert_array_equal(out[0], np.round(x[0] * np.float32(127 / 2.0)) * scale)
    assert out[0, 0] == -127 * scale and not out[1].any()
    assert 0 < np.max(np.abs(out[0] - x[0])) <= scale / 2 + 1e-7


def test_the_q8_0_reference_multiplies_quantized_activations() -> None:
    hp = reference.Hparams(n_vocab=64)
    stored = model.stored_weights(hp, 9, "Q8_0")
    assert "output.weight" in stored.q8_0 and "token_embd.weight" not in stored.q8_0
    assert not any(name.endswith("norm.weight") for name in stored.q8_0)
    plain = reference.forward(reference.Weights(stored.tensors), hp, [1, 2, 3])
    quantized = reference.forward(stored, hp, [1, 2, 3])
    assert 1e-3 < np.max(np.abs(plain - quantized)) < 0.5  # the activation rounding GGML does is modelled


def test_reference_is_causal_and_rope_is_relative() -> None:
    hp = reference.Hparams(n_vocab=300)
    weights = reference.Weights(model.float_weights(hp, 11))
    logits = reference.forward(weights, hp, [1, 5, 9, 200, 7, 42])
    changed = reference.forward(weights, hp, [1, 5, 9, 200, 8, 42])
    np.testing.assert_array_equal(logits[:4], changed[:4])  # a later token never changes an earlier position
    assert not np.allclose(logits[4:], changed[4:])
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 1, 16)), rng.standard_normal((1, 1, 16))

    def score(m: int, n: int) -> float:
        return float(np.sum(reference.rope(q, np.array([m]), 1e4) * reference.rope(k, np.array([n]), 1e4)))

    assert score(9, 4) == pytest.approx(score(25, 20)) and score(9, 4) != pytest.approx(score(9, 5))


def test_rope_rotates_adjacent_pairs() -> None:
    x = np.zeros((1, 1, 4))
    x[0, 0, 0] = 1.0  # the first pair is (x0, x1): a rotation by pos * base**0 = pos radians
    out = reference.rope(x, np.array([1]), 1e4)[0, 0]
    np.testing.assert_allclose(out, [np.cos(1.0), np.sin(1.0), 0.0, 0.0], atol=1e-12)


def test_compare_names_the_first_position_off_by_more_than_the_tolerance() -> None:
    ref = np.random.default_rng(1).standard_normal((6, 50)) * 3
    tolerance = compare.TOLERANCES["F32"]
    assert compare.compare(ref + 1e-5, ref, tolerance).passed
    bad = ref.copy()
    bad[3, 17] += 0.05
    bad[5, 2] += 1.0
    result = compare.compare(bad, ref, tolerance)
    assert not result.passed and result.first_bad == 3
    assert result.reason.startswith("position 3: max |Δlogit| 0.05 > tolerance")
    assert compare.compare(ref[:5], ref, tolerance).reason.startswith("llama.cpp gave logits of shape (5, 50)")
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert compare.compare(nan, ref, tolerance).first_bad == 0


def test_compare_fails_a_swapped_top1_and_forgives_a_near_tie() -> None:
    ref = np.zeros((2, 4))
    ref[0] = [5.0, 1.0, 0.0, 0.0]
    ref[1] = [5.0, 5.0 - 1e-5, 0.0, 0.0]
    swapped = ref.copy()
    swapped[0] = [1.0, 5.0, 0.0, 0.0]
    result = compare.compare(swapped, ref, compare.TOLERANCES["F32"])
    assert result.first_bad == 0
    assert result.reason.startswith("position 0: max |Δlogit| 4 > tolerance")
    assert result.reason.endswith("; top-1 token 1, the reference's is 0 (margin 4)")
    tied = ref.copy()
    tied[1] = [5.0 - 1e-5, 5.0, 0.0, 0.0]
    result = compare.compare(tied, ref, compare.TOLERANCES["F32"])
    assert result.passed and "near-ties at [1]" in result.reason


def test_reference_file_round_trips_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    hp = reference.Hparams(n_vocab=300)
    tokens, logits = reference.greedy(reference.Weights(model.float_weights(hp, 2)), hp, [1, 2, 3], 2)
    ref = reference.Reference("ab" * 32, "F32", 2, hp, tokens, 3, logits.astype(np.float32), "x")
    (tmp_path / "r.json").write_text(ref.to_json())
    back = reference.load_reference(tmp_path / "r.json")
    assert back.tokens == tokens and back.hparams == hp and back.prompt_text == "x"
    np.testing.assert_array_equal(back.logits, logits.astype(np.float32))
    doc = json.loads(ref.to_json())
    assert doc["greedy"][2:4] == tokens[3:5]  # the continuation is the argmax of the previous position
    doc["logits"]["shape"] = [4, 300]  # 1500 floats do not fill 4 rows
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(reference.ReferenceError, match=r"bad\.json: malformed reference"):
        reference.load_reference(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(reference.ReferenceError, match=r"other\.json: not a cairn\.llama-reference/v1 file"):
        reference.load_reference(tmp_path / "other.json")


def test_build_names_files_by_content(vocab: Path, tmp_path: Path) -> None:
    entries = build.build_gate_inputs(vocab, tmp_path, seed=4, quants=("Q8_0",))
    (entry,) = entries
    assert entry["path"] == f"tiny-llama-Q8_0-{file_sha256(tmp_path / entry['path'])[:16]}.gguf"
    ref = reference.load_reference(tmp_path / entry["reference"])
    assert ref.model_sha256 == entry["sha256"] and ref.tokens[: ref.n_prompt] == build.PROMPT
    assert len(ref.tokens) == len(build.PROMPT) + build.N_NEW
    assert json.loads((tmp_path / "gate-inputs.json").read_text()) == entries
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["gate-inputs.json", entry["path"], entry["reference"]])


def test_vocab_from_a_wrong_sdist_or_name_is_one_line(cache_dir: Path, tmp_path: Path) -> None:
    fake = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(fake, "w:gz"):
        pass
    with pytest.raises(CairnError, match=r"sha256 [0-9a-f]{64} is not the pinned"):
        extract_vocab(fake, "llama-spm", tmp_path)
    with pytest.raises(InputError, match=r"vocab name '\.\./x' is not a llama.cpp vocab name"):
        extract_vocab(llama_sdist(cache_dir), "../x", tmp_path)
    with pytest.raises(InputError, match=r"no llama_cpp_python-0\.3\.36/vendor/llama\.cpp/models/ggml-vocab-nope\.gguf"):
        extract_vocab(llama_sdist(cache_dir), "nope", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [fake.name]


def test_a_vocab_that_is_not_gguf_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "ggml-vocab-junk.gguf"
    junk.write_bytes(b"GGUX" + bytes(64))
    with pytest.raises(InputError, match=r"ggml-vocab-junk\.gguf: not a readable GGUF file .* — pass a models/"):
        model.write_tiny_llama(junk, tmp_path / "m.gguf", seed=1)
    with pytest.raises(InputError, match=r"absent\.gguf: cannot read the vocab \(No such file or directory\)"):
        model.write_tiny_llama(tmp_path / "absent.gguf", tmp_path / "m.gguf", seed=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [junk.name]


def test_the_gate_runs_from_its_own_files_with_numpy_only(tmp_path: Path) -> None:
    """The image gets the gate as these five files: nothing else of Cairn (nor gguf) may be imported."""
    src = ROOT / "src"
    for name in ["cairn/__init__.py", "cairn/engines/__init__.py", "cairn/engines/llama/__init__.py",
                 "cairn/engines/llama/gate.py", "cairn/engines/llama/compare.py", "cairn/engines/llama/reference.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / name, tmp_path / name)
    probe = ("import sys; import cairn.engines.llama.gate as g; print(g.__file__); "
             "print(sorted(m for m in sys.modules if m.startswith(('cairn', 'gguf', 'llama_cpp'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    where, imported = done.stdout.splitlines()
    assert where == str(tmp_path / "cairn/engines/llama/gate.py")  # the copies, not the installed package
    assert imported == str(sorted(["cairn", "cairn.engines", "cairn.engines.llama", "cairn.engines.llama.gate",
                                              "cairn.engines.llama.compare", "cairn.engines.llama.reference"]))
    usage = subprocess.run([sys.executable, "-m", "cairn.engines.llama.gate", "--model", "m.gguf",
                            "--reference", "none.json"], cwd=tmp_path, capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("error: none.json: cannot read the reference")
