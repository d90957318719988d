"""Cairn's HIP validation kernels for one gfx family, with the CPU reference each GPU result is checked against.

    >>> import cairn_smoke
    >>> cairn_smoke.saxpy(2.0, [1, 2], [10, 20])          # GPU, or CairnSmokeError without one
    >>> cairn_smoke.saxpy(2.0, [1, 2], [10, 20], cpu=True)  # [12.0, 24.0]
    >>> cairn_smoke.targets(), cairn_smoke.device_count()

The kernels live in ``lib/libcairn_smoke.so`` (built for this wheel's family); it finds the HIP runtime of
``rocm-sdk-core`` through its ``$ORIGIN``-relative RPATH.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Sequence
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_lib: ctypes.CDLL | None = None


class CairnSmokeError(RuntimeError):
    """A GPU path returned a HIP error code (e.g. no device)."""

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"cairn_smoke: {_library().cairn_error_string(code).decode()} (code {code})")


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(str(_HERE / "lib" / "libcairn_smoke.so"))
        lib.cairn_error_string.restype = ctypes.c_char_p
        lib.cairn_saxpy_gpu.argtypes = [ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
        lib.cairn_saxpy_cpu.argtypes = lib.cairn_saxpy_gpu.argtypes
        lib.cairn_gemm_gpu.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3
        lib.cairn_gemm_cpu.argtypes = lib.cairn_gemm_gpu.argtypes
        lib.cairn_reduce_sum_gpu.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.cairn_reduce_sum_cpu.argtypes = lib.cairn_reduce_sum_gpu.argtypes
        _lib = lib
    return _lib


def build_info() -> dict:
    """Family, targets and toolchain the kernels were compiled for."""
    return json.loads((_HERE / "build.json").read_text())


def targets() -> tuple[str, ...]:
    return tuple(build_info()["targets"])


def device_count() -> int:
    """Usable HIP devices; 0 when there is none (the runtime's error is not raised)."""
    count = _library().cairn_device_count()
    return max(count, 0)


def _floats(values: Sequence[float]) -> ctypes.Array:
    return (ctypes.c_float * len(values))(*values)


def _check(code: int) -> None:
    if code != 0:
        raise CairnSmokeError(code)


def saxpy(a: float, x: Sequence[float], y: Sequence[float], *, cpu: bool = False) -> list[float]:
    """``a*x + y``; ``cpu=True`` runs the reference implementation."""
    if len(x) != len(y):
        raise ValueError("x and y must have the same length")
    xs, ys = _floats(x), _floats(y)
    lib = _library()
    if cpu:
        lib.cairn_saxpy_cpu(len(xs), a, xs, ys)
    else:
        _check(lib.cairn_saxpy_gpu(len(xs), a, xs, ys))
    return list(ys)


def gemm(m: int, n: int, k: int, a: Sequence[float], b: Sequence[float], *, cpu: bool = False) -> list[float]:
    """Row-major ``C = A(m×k) · B(k×n)``."""
    if len(a) != m * k or len(b) != k * n:
        raise ValueError("a must hold m*k and b k*n values")
    out = (ctypes.c_float * (m * n))()
    lib = _library()
    if cpu:
        lib.cairn_gemm_cpu(m, n, k, _floats(a), _floats(b), out)
    else:
        _check(lib.cairn_gemm_gpu(m, n, k, _floats(a), _floats(b), out))
    return list(out)


def reduce_sum(x: Sequence[float], *, cpu: bool = False) -> float:
    result = ctypes.c_double(0.0)
    lib = _library()
    if cpu:
        lib.cairn_reduce_sum_cpu(len(x), _floats(x), ctypes.byref(result))
    else:
        _check(lib.cairn_reduce_sum_gpu(len(x), _floats(x), ctypes.byref(result)))
    return result.value


def selftest() -> int:
    """CPU references always; GPU paths compared with them when a device is present. Returns an exit code."""
    expect = saxpy(2.0, [1.0, 2.0, 3.0], [10.0, 20.0, 30.0], cpu=True)
    assert expect == [12.0, 24.0, 36.0], expect
    assert gemm(1, 1, 2, [1.0, 2.0], [3.0, 4.0], cpu=True) == [11.0]
    assert reduce_sum([0.5] * 8, cpu=True) == 4.0
    print(f"cairn-smoke {build_info().get('family')}: CPU references ok; targets {','.join(targets())}")
    if device_count() == 0:
        print("device: none — GPU paths not run")
        return 0
    got = saxpy(2.0, [1.0, 2.0, 3.0], [10.0, 20.0, 30.0])
    ok = all(abs(g - e) < 1e-5 for g, e in zip(got, expect, strict=True))
    print(f"device: saxpy {'matches' if ok else 'DIFFERS FROM'} the CPU reference")
    return 0 if ok else 1
