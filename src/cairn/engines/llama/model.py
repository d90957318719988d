"""A tiny llama-architecture GGUF written from a seed: the model the llama.cpp gate runs.

No model can be downloaded, and a committed binary would be a second truth. So the build writes one: two
layers, 64-wide, four query heads over two KV heads (grouped-query attention is on the path every modern
llama takes), SwiGLU, RoPE, with weights drawn from ``numpy.random.default_rng(seed)``. Its tokenizer
metadata is copied from one of llama.cpp's vocab-only GGUFs (see ``vocab``), so llama.cpp loads it through
the same vocab code as a real model. The same seed, vocab and ``gguf`` version give the same bytes; the
file is named by its sha256 where it is stored (``build``).

Two encodings: ``F32`` (llama.cpp's float path) and ``Q8_0`` (every matrix quantized, norms stay F32),
which sends the matmuls through GGML's quantized dot products.
"""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from cairn.digest import file_sha256
from cairn.engines.llama.reference import Hparams, Weights, dequantize_q8_0
from cairn.errors import CairnError, InputError

QUANTS = {
    "F32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "Q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}
MODEL_NAME = "cairn-tiny-llama"


def tensor_shapes(hp: Hparams) -> dict[str, tuple[int, ...]]:
    """Every tensor in file order, as NumPy ``(out, in)`` shapes; 1-D ones are the norm weights."""
    kv = hp.n_head_kv * hp.head_dim
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (hp.n_vocab, hp.n_embd)}
    for i in range(hp.n_layer):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (hp.n_embd,),
            f"blk.{i}.attn_q.weight": (hp.n_embd, hp.n_embd),
            f"blk.{i}.attn_k.weight": (kv, hp.n_embd),
            f"blk.{i}.attn_v.weight": (kv, hp.n_embd),
            f"blk.{i}.attn_output.weight": (hp.n_embd, hp.n_embd),
            f"blk.{i}.ffn_norm.weight": (hp.n_embd,),
            f"blk.{i}.ffn_gate.weight": (hp.n_ff, hp.n_embd),
            f"blk.{i}.ffn_up.weight": (hp.n_ff, hp.n_embd),
            f"blk.{i}.ffn_down.weight": (hp.n_embd, hp.n_ff),
        }
    return shapes | {"output_norm.weight": (hp.n_embd,), "output.weight": (hp.n_vocab, hp.n_embd)}


def float_weights(hp: Hparams, seed: int) -> dict[str, np.ndarray]:
    """float32 weights drawn in file order from one generator.

    Scales keep every activation near unit size so attention is not uniform and logits spread over a few
    units: embeddings ~N(0, 1), matrices ~N(0, 1/fan_in), norm weights 1 + N(0, 0.1²) (not all ones, so a
    loader that dropped them would be seen)."""
    rng = np.random.default_rng(seed)
    weights: dict[str, np.ndarray] = {}
    for name, shape in tensor_shapes(hp).items():
        draw = rng.standard_normal(shape)
        if len(shape) == 1:
            draw = 1.0 + 0.1 * draw
        elif name != "token_embd.weight":
            draw = draw / np.sqrt(shape[1])
        weights[name] = draw.astype(np.float32)
    return weights


def encode(weights: dict[str, np.ndarray], quant: str) -> dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType]]:
    """The bytes each tensor is stored as: F32 as is; for Q8_0 every matrix through ``gguf.quants``."""
    qtype = QUANTS[quant][0]
    stored: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType]] = {}
    for name, values in weights.items():
        if values.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32:
            stored[name] = (gguf.quants.quantize(values, qtype), qtype)
        else:
            stored[name] = (values, gguf.GGMLQuantizationType.F32)
    return stored


def stored_weights(hp: Hparams, seed: int, quant: str) -> Weights:
    """The weights as the file holds them, for the reference: what llama.cpp multiplies by.

    Q8_0 blocks are decoded by ``reference.dequantize_q8_0`` (our own decoder, not the encoder's inverse),
    and the Q8_0 matrices are marked so the reference quantizes their inputs as GGML does; the
    reference then measures llama.cpp against the quantized model itself, and the tolerance only has to
    cover float rounding, not quantization error."""
    tensors, q8_0 = {}, set()
    for name, (data, qtype) in encode(float_weights(hp, seed), quant).items():
        if qtype == gguf.GGMLQuantizationType.Q8_0:
            tensors[name] = dequantize_q8_0(data, tensor_shapes(hp)[name])
            q8_0.add(name)
        else:
            tensors[name] = data
    return Weights(tensors, frozenset(q8_0 - {"token_embd.weight"}))  # embeddings are looked up, not multiplied


def vocab_fields(vocab_gguf: Path) -> list[tuple[str, Any, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """Every ``tokenizer.*`` key of a vocab-only GGUF with its value and GGUF types, in file order.

    ``gguf``'s reader takes seconds over 32000 token strings, so a file is read once per process (keyed by
    its size and mtime as well as its path, so a replaced file is read again)."""
    stat = vocab_gguf.stat()
    return list(_read_vocab_fields(vocab_gguf, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=4)
def _read_vocab_fields(vocab_gguf: Path, size: int, mtime_ns: int) -> tuple[Any, ...]:
    try:
        reader = gguf.GGUFReader(vocab_gguf)
    except (OSError, ValueError) as exc:
        raise InputError(vocab_gguf, f"not a readable GGUF file ({exc})", "pass a models/ggml-vocab-*.gguf") from None
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            fields.append((key, field.contents(), field.types[0], sub))
    if not any(key == "tokenizer.ggml.tokens" for key, *_ in fields):
        raise InputError(vocab_gguf, "has no tokenizer.ggml.tokens", "pass a models/ggml-vocab-*.gguf")
    return tuple(fields)


def write_tiny_llama(vocab_gguf: Path, out: Path, seed: int, quant: str = "F32", **arch: Any) -> dict[str, Any]:
    """Write the tiny model to ``out`` (atomically) and describe it: sha256, size, hparams, vocab.

    ``arch`` overrides ``Hparams`` fields (n_layer, n_embd, …); ``n_vocab`` always comes from the vocab."""
    if quant not in QUANTS:
        raise CairnError(f"unknown quantization {quant!r}: choose one of {', '.join(QUANTS)}")
    try:
        fields = vocab_fields(vocab_gguf)
    except OSError as exc:
        raise InputError(vocab_gguf, f"cannot read the vocab ({exc.strerror})", "pass a models/ggml-vocab-*.gguf") from None
    tokens = next(value for key, value, *_ in fields if key == "tokenizer.ggml.tokens")
    hp = Hparams(n_vocab=len(tokens), **arch)
    writer = _writer_with_header(hp, quant, fields)
    for name, (data, qtype) in encode(float_weights(hp, seed), quant).items():
        writer.add_tensor(name, data, raw_dtype=None if qtype == gguf.GGMLQuantizationType.F32 else qtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        writer.write_header_to_file(Path(tmp))
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {
        "path": str(out), "sha256": file_sha256(out), "size": out.stat().st_size, "quant": quant, "seed": seed,
        "hparams": asdict(hp), "vocab": {"file": vocab_gguf.name, "sha256": file_sha256(vocab_gguf)},
    }


def _writer_with_header(hp: Hparams, quant: str, fields: list[Any]) -> gguf.GGUFWriter:
    writer = gguf.GGUFWriter(None, "llama")
    writer.add_name(MODEL_NAME)
    writer.add_context_length(hp.n_ctx)
    writer.add_embedding_length(hp.n_embd)
    writer.add_block_count(hp.n_layer)
    writer.add_feed_forward_length(hp.n_ff)
    writer.add_head_count(hp.n_head)
    writer.add_head_count_kv(hp.n_head_kv)
    writer.add_rope_dimension_count(hp.head_dim)
    writer.add_rope_freq_base(hp.rope_base)
    writer.add_layer_norm_rms_eps(hp.rms_eps)
    writer.add_vocab_size(hp.n_vocab)
    writer.add_file_type(QUANTS[quant][1])
    if quant != "F32":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, value, vtype, sub_type in fields:
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    return writer
