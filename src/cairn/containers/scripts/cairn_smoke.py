#!/usr/bin/python3
"""cairn-smoke: the smoke image's validation script (stdlib only), run by the in-container and GPU gates.

``--cpu``: call each kernel's CPU reference in libcairn_smoke.so and check it against values computed
here independently, and check that asking for devices on a GPU-less host answers cleanly (no crash).
``--gpu``: launch every kernel on every device and compare with the CPU reference within tolerance —
the check that catches silent wrong answers. Prints one JSON document; exit 0 = pass.
"""

import argparse
import ctypes
import json
import os
import sys


def _library_path():
    """$CAIRN_SMOKE_LIB, else the library of the installed cairn-smoke wheel."""
    if os.environ.get("CAIRN_SMOKE_LIB"):
        return os.environ["CAIRN_SMOKE_LIB"]
    try:
        import cairn_smoke
    except ImportError:
        return "/opt/cairn/lib/libcairn_smoke.so"
    return os.path.join(os.path.dirname(cairn_smoke.__file__), "lib", "libcairn_smoke.so")


LIB = _library_path()
F = ctypes.c_float


def floats(values):
    return (F * len(values))(*values)


def load():
    lib = ctypes.CDLL(LIB)
    lib.cairn_error_string.restype = ctypes.c_char_p
    return lib


def close(a, b, rel=1e-4, abs_tol=1e-3):
    return all(abs(x - y) <= max(abs_tol, rel * max(abs(x), abs(y))) for x, y in zip(a, b, strict=True))


def cpu_checks(lib):
    checks = {}
    n = 1000
    y = floats([1.0] * n)
    lib.cairn_saxpy_cpu(n, F(2.0), floats([float(i) for i in range(n)]), y)
    checks["saxpy"] = close(list(y), [2.0 * i + 1.0 for i in range(n)])
    m, k, p = 7, 5, 3
    a = [float(i % 5 - 2) for i in range(m * k)]
    b = [float((3 * i) % 7 - 3) for i in range(k * p)]
    c = floats([0.0] * (m * p))
    lib.cairn_gemm_cpu(m, p, k, floats(a), floats(b), c)
    want = [sum(a[r * k + t] * b[t * p + col] for t in range(k)) for r in range(m) for col in range(p)]
    checks["gemm"] = close(list(c), want)
    out = ctypes.c_double(0.0)
    lib.cairn_reduce_sum_cpu(n, floats([float(i) for i in range(n)]), ctypes.byref(out))
    checks["reduce_sum"] = abs(out.value - n * (n - 1) / 2) < 1e-6
    return checks


def gpu_checks(lib, device_count):
    checks = {}
    n = 1 << 16
    x = [float(i % 97) / 7.0 for i in range(n)]
    y_gpu, y_cpu = floats([0.5] * n), floats([0.5] * n)
    code = lib.cairn_saxpy_gpu(n, F(1.5), floats(x), y_gpu)
    lib.cairn_saxpy_cpu(n, F(1.5), floats(x), y_cpu)
    checks["saxpy"] = code == 0 and close(list(y_gpu), list(y_cpu))
    m = k = p = 64
    a = [float((i * 7) % 13 - 6) for i in range(m * k)]
    b = [float((i * 5) % 11 - 5) for i in range(k * p)]
    c_gpu, c_cpu = floats([0.0] * (m * p)), floats([0.0] * (m * p))
    code_g = lib.cairn_gemm_gpu(m, p, k, floats(a), floats(b), c_gpu)
    lib.cairn_gemm_cpu(m, p, k, floats(a), floats(b), c_cpu)
    checks["gemm"] = code_g == 0 and close(list(c_gpu), list(c_cpu))
    g, c = ctypes.c_double(0.0), ctypes.c_double(0.0)
    code_r = lib.cairn_reduce_sum_gpu(n, floats(x), ctypes.byref(g))
    lib.cairn_reduce_sum_cpu(n, floats(x), ctypes.byref(c))
    checks["reduce_sum"] = code_r == 0 and abs(g.value - c.value) <= 1e-3 * max(1.0, abs(c.value))
    checks["devices"] = device_count
    return checks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()
    report = {"library": LIB}
    failures = []
    try:
        lib = load()
    except OSError as exc:
        print(json.dumps({"library": LIB, "failures": [f"cannot load {LIB}: {exc}"]}))
        return 1
    count = lib.cairn_device_count()
    report["device_count"] = count
    report["device_message"] = lib.cairn_error_string(count).decode() if count < 0 else f"{count} device(s)"
    if args.cpu or not args.gpu:
        report["cpu"] = cpu_checks(lib)
        failures += [f"CPU reference {name} gave a wrong answer" for name, ok in report["cpu"].items() if not ok]
    if args.gpu:
        if count <= 0:
            failures.append(f"no GPU visible: {report['device_message']}")
        else:
            report["gpu"] = gpu_checks(lib, count)
            failures += [f"GPU {name} differs from the CPU reference" for name, ok in report["gpu"].items()
                         if ok is False]
    report["failures"] = failures
    print(json.dumps(report, indent=1, sort_keys=True))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
