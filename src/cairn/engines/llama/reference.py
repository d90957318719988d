"""What the tiny llama model must compute, written out in NumPy so that the reference is not llama.cpp.

The forward pass follows llama.cpp's LLAMA graph for the tensors exactly as ``model`` writes them:

- ``x = token_embd[token]``; per layer ``h = x + attn(rms_norm(x) * attn_norm)`` then
  ``x = h + ffn(rms_norm(h) * ffn_norm)``; logits ``output @ (rms_norm(x) * output_norm)``.
- RMSNorm divides by ``sqrt(mean(x²) + eps)`` with the eps written into the GGUF.
- RoPE is GGML's "normal" mode, the one llama.cpp uses for the llama architecture: it rotates adjacent pairs
  ``(x[2i], x[2i+1])`` by ``pos * base**(-2i/head_dim)`` — not NeoX's split halves. HF checkpoints are
  permuted by the converter to fit this; our weights are born in this layout, so nothing is permuted.
- Attention is causal, scaled by ``1/sqrt(head_dim)``; with grouped-query attention query head ``h`` reads
  KV head ``h // (n_head // n_head_kv)`` (GGML's broadcast in ``mul_mat``).
- The FFN is SwiGLU: ``ffn_down @ (silu(ffn_gate @ x) * (ffn_up @ x))``.
- A Q8_0 matrix is a product of two Q8_0 operands: GGML's CPU matmul for Q8_0 weights (``vec_dot_type``
  Q8_0) first quantizes each activation row into blocks of 32 — scale ``amax/127`` stored as float16,
  values ``round(x * 127/amax)`` (nearest, ties to even, as ``_mm256_round_ps`` does) — so the reference
  does the same to the inputs of exactly those matrices (``q8_0_matrices``). Without it the reference
  would disagree with any correct Q8_0 engine by ~1 % of the logit scale and the tolerance would have to
  be loose enough to hide a broken kernel.

Matrices are NumPy ``(out, in)`` arrays (GGUF stores them as ``ne = {in, out}``), so every projection is
``W @ x``. The pass runs in float64: the reference is the exact math on the float32 weights as written, and
llama.cpp's float32 rounding is what the tolerance in ``compare`` allows for.

Only NumPy and the standard library are imported: the gate copies this file into the image.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA = "cairn.llama-reference/v1"
Q8_0_BLOCK = 32  # values per Q8_0 block: one float16 scale, then 32 int8s (34 bytes)


@dataclass(frozen=True)
class Hparams:
    """The architecture's numbers, as written into the GGUF's ``llama.*`` keys."""

    n_vocab: int
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 128
    rope_base: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def dequantize_q8_0(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values of a Q8_0 tensor from its bytes: each block is ``d`` (float16) times 32 int8s.

    Written here from the GGML block layout rather than borrowed from ``gguf``, so a writer that packed
    blocks wrongly would show up as a mismatch instead of being reproduced on both sides."""
    blocks = np.frombuffer(np.ascontiguousarray(raw).tobytes(), dtype=np.uint8).reshape(-1, 2 + Q8_0_BLOCK)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)
    values = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (scale * values).reshape(shape)


def q8_0_round_trip(x: np.ndarray) -> np.ndarray:
    """``x`` (float32 rows, length a multiple of 32) after GGML quantizes it to Q8_0 and back."""
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, Q8_0_BLOCK)
    amax = np.max(np.abs(blocks), axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        inverse = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    scale = (amax / np.float32(127.0)).astype(np.float16).astype(np.float32)
    return (np.round(blocks * inverse) * scale).reshape(np.shape(x)).astype(np.float64)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """GGML_ROPE_TYPE_NORMAL on ``x[pos, head, dim]``: rotate each adjacent pair of a head's values."""
    head_dim = x.shape[-1]
    freqs = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    theta = positions[:, None].astype(np.float64) * freqs[None, :]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


class Weights:
    """The tensors as float64, and which matrices multiply Q8_0-quantized activations."""

    def __init__(self, tensors: dict[str, np.ndarray], q8_0_matrices: frozenset[str] = frozenset()) -> None:
        self.tensors = {name: np.asarray(value, dtype=np.float64) for name, value in tensors.items()}
        self.q8_0 = q8_0_matrices

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[name]

    def project(self, x: np.ndarray, name: str) -> np.ndarray:
        """``W @ x`` for every row of ``x``, as GGML multiplies by matrix ``name``."""
        return (q8_0_round_trip(x) if name in self.q8_0 else x) @ self.tensors[name].T


def attention(x: np.ndarray, w: Weights, layer: int, hp: Hparams) -> np.ndarray:
    n, hd = x.shape[0], hp.head_dim
    positions = np.arange(n)
    q = w.project(x, f"blk.{layer}.attn_q.weight").reshape(n, hp.n_head, hd)
    k = w.project(x, f"blk.{layer}.attn_k.weight").reshape(n, hp.n_head_kv, hd)
    v = w.project(x, f"blk.{layer}.attn_v.weight").reshape(n, hp.n_head_kv, hd)
    q, k = rope(q, positions, hp.rope_base), rope(k, positions, hp.rope_base)
    group = hp.n_head // hp.n_head_kv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # query head h reads KV head h // group
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
    scores = np.where(np.tril(np.ones((n, n), dtype=bool))[None], scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    heads = np.einsum("hqk,khd->qhd", probs, v).reshape(n, hp.n_head * hd)
    return w.project(heads, f"blk.{layer}.attn_output.weight")


def swiglu(x: np.ndarray, w: Weights, layer: int) -> np.ndarray:
    gate = w.project(x, f"blk.{layer}.ffn_gate.weight")
    up = w.project(x, f"blk.{layer}.ffn_up.weight")
    return w.project(gate / (1.0 + np.exp(-gate)) * up, f"blk.{layer}.ffn_down.weight")


def forward(w: Weights, hp: Hparams, tokens: list[int]) -> np.ndarray:
    """Logits ``[position, vocab]`` for ``tokens``: row ``i`` scores the token after ``tokens[i]``."""
    eps = float(np.float32(hp.rms_eps))  # the GGUF key is a float32: use the value llama.cpp reads
    x = w["token_embd.weight"][np.asarray(tokens)]
    for layer in range(hp.n_layer):
        x = x + attention(rms_norm(x, w[f"blk.{layer}.attn_norm.weight"], eps), w, layer, hp)
        x = x + swiglu(rms_norm(x, w[f"blk.{layer}.ffn_norm.weight"], eps), w, layer)
    return w.project(rms_norm(x, w["output_norm.weight"], eps), "output.weight")


def greedy(w: Weights, hp: Hparams, prompt: list[int], n_new: int) -> tuple[list[int], np.ndarray]:
    """The prompt followed by ``n_new`` greedy tokens, and the logits of every position of that sequence."""
    tokens = list(prompt)
    for _ in range(n_new):
        tokens.append(int(np.argmax(forward(w, hp, tokens)[-1])))
    return tokens, forward(w, hp, tokens)


@dataclass(frozen=True)
class Reference:
    """What the gate checks llama.cpp against: the model it is for, the tokens, and the logits."""

    model_sha256: str
    quant: str
    seed: int
    hparams: Hparams
    tokens: list[int]
    n_prompt: int
    logits: np.ndarray  # float32 [len(tokens), n_vocab]
    prompt_text: str = ""  # what the prompt ids spell in the model's vocab; the gate checks llama.cpp agrees

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "model": {"sha256": self.model_sha256, "quant": self.quant, "seed": self.seed},
            "hparams": asdict(self.hparams),
            "tokens": self.tokens,
            "n_prompt": self.n_prompt,
            "prompt_text": self.prompt_text,
            "greedy": [int(t) for t in np.argmax(self.logits, axis=1)],
            "logits": {
                "dtype": "float32-le",
                "shape": list(self.logits.shape),
                "base64": base64.b64encode(self.logits.astype("<f4").tobytes()).decode(),
            },
        }
        return json.dumps(doc, indent=1) + "\n"


class ReferenceError(Exception):
    """A reference file that cannot be used: the message names the file and what is wrong with it."""


def load_reference(path: Path) -> Reference:
    """Read a reference written by ``Reference.to_json``; a malformed one raises ReferenceError (one line)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReferenceError(f"{path}: cannot read the reference: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ReferenceError(f"{path}: not a {SCHEMA} file — write it with `python -m cairn.engines.llama.build`")
    try:
        logits_doc = doc["logits"]
        shape = tuple(int(n) for n in logits_doc["shape"])
        logits = np.frombuffer(base64.b64decode(logits_doc["base64"]), dtype="<f4").reshape(shape)
        tokens = [int(t) for t in doc["tokens"]]
        reference = Reference(
            model_sha256=str(doc["model"]["sha256"]), quant=str(doc["model"]["quant"]), seed=int(doc["model"]["seed"]),
            hparams=Hparams(**doc["hparams"]), tokens=tokens, n_prompt=int(doc["n_prompt"]),
            logits=logits.astype(np.float32), prompt_text=str(doc.get("prompt_text", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ReferenceError(f"{path}: malformed reference ({type(exc).__name__}: {exc}) — write it again") from None
    if logits.shape != (len(tokens), reference.hparams.n_vocab):
        raise ReferenceError(f"{path}: logits are {logits.shape}, expected ({len(tokens)}, {reference.hparams.n_vocab})")
    return reference
