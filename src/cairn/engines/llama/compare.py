"""Judge llama.cpp's logits against the NumPy reference, position by position, and name the first bad one.

The rule, per position ``i`` (its row of logits scores the token after ``tokens[i]``):

1. ``max_v |llama[i, v] - ref[i, v]| <= atol + rtol * max_v |ref[i, v]|`` — the error is measured against
   the position's logit scale, because a float error grows with the size of the values it rounds.
2. llama.cpp's top-1 token is the reference's — unless the reference's own margin between its first and
   second token is within twice the tolerance, where an error the tolerance allows could swap them: then
   the position is a tie, reported, not failed. (Greedy decoding is the top-1 at each position.) Away from
   ties a swap implies an error beyond rule 1, so this rule never fails a position alone; it is kept so a
   failure says which token llama.cpp would have generated, and so a forgiven tie is reported.

The tolerances were measured (``bench/llama_gate_bench.py``, docs/engines.md): llama.cpp 0.3.36 on x86
CPU stays within ~1.5e-6 of the reference for F32 and ~5e-7 for Q8_0 (whose integer dot products are exact
once the reference quantizes activations as GGML does). F32 allows 1e-4 (+1e-4 × scale), a few hundred
times the worst error seen: other CPUs sum in other orders. Q8_0 allows 2e-3 (+2e-3 × scale), which covers
the one rare disagreement float rounding can still cause — an activation whose ``x * 127/amax`` sits within
a float32 ulp of .5 rounds one step apart, moving a logit by up to ~1e-2 × its scale at worst, typically far
less — and is still well below what a Q8_0 path that skipped or botched the activation quantization
produces (~5e-2), let alone a wrong weight (order one).

NumPy and the standard library only: the gate copies this file into the image.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    rtol: float  # times the position's logit scale, max |ref|
    atol: float  # floor, for positions whose logits are all small

    def at(self, scale: float) -> float:
        return self.atol + self.rtol * scale


TOLERANCES = {
    "F32": Tolerance(rtol=1e-4, atol=1e-4),
    "Q8_0": Tolerance(rtol=2e-3, atol=2e-3),
}


@dataclass(frozen=True)
class Position:
    position: int
    max_abs_diff: float
    tolerance: float
    ref_top1: int
    got_top1: int
    margin: float  # the reference's top-1 minus top-2 logit
    ok: bool
    tie: bool


@dataclass(frozen=True)
class Comparison:
    passed: bool
    reason: str  # one line: why it failed, or a summary of the pass
    first_bad: int | None
    max_abs_diff: float
    positions: list[Position] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(got: np.ndarray, ref: np.ndarray, tolerance: Tolerance) -> Comparison:
    """Compare llama.cpp's logits ``got`` with ``ref`` (both ``[position, vocab]``) under ``tolerance``."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return Comparison(False, f"llama.cpp gave logits of shape {got.shape}, the reference has {ref.shape}",
                          0, float("inf"))
    positions = [_position(i, got[i], ref[i], tolerance) for i in range(ref.shape[0])]
    worst = max((p.max_abs_diff for p in positions), default=0.0)
    bad = next((p for p in positions if not p.ok), None)
    if bad is None:
        ties = [p.position for p in positions if p.tie]
        note = f"; near-ties at {ties}" if ties else ""
        return Comparison(True, f"{len(positions)} positions within tolerance, max |Δlogit| {worst:.3g}{note}",
                          None, worst, positions)
    return Comparison(False, _why(bad), bad.position, worst, positions)


def _position(i: int, got: np.ndarray, ref: np.ndarray, tolerance: Tolerance) -> Position:
    diff = np.abs(got - ref)
    max_diff = float(np.max(diff)) if np.all(np.isfinite(got)) else float("inf")
    allowed = tolerance.at(float(np.max(np.abs(ref))))
    ref_top1, got_top1 = int(np.argmax(ref)), int(np.argmax(got))
    top2 = np.partition(ref, -2)[-2:]
    margin = float(top2[1] - top2[0])
    tie = margin <= 2 * allowed
    ok = max_diff <= allowed and (got_top1 == ref_top1 or tie)
    return Position(i, max_diff, allowed, ref_top1, got_top1, margin, ok, tie and got_top1 != ref_top1)


def _why(p: Position) -> str:
    parts = []
    if not p.max_abs_diff <= p.tolerance:
        parts.append(f"max |Δlogit| {p.max_abs_diff:.4g} > tolerance {p.tolerance:.3g}")
    if p.got_top1 != p.ref_top1:
        parts.append(f"top-1 token {p.got_top1}, the reference's is {p.ref_top1} (margin {p.margin:.3g})")
    return f"position {p.position}: " + "; ".join(parts)
