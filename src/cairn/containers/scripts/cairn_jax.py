#!/usr/bin/python3
"""cairn-jax: the JAX image's gate script, run inside the image (stdlib + the image's own jax; no Cairn).

``--cpu`` (the in-container gate, no devices, no network):

1. the ROCm plugin loads: every shared library of ``jax_plugins/xla_rocm7`` (the pjrt) and of
   ``jax_rocm7_plugin`` is dlopened with RTLD_NOW, so a DT_NEEDED that does not resolve fails here, naming it;
2. with the plugin installed and nothing else chosen (``JAX_PLATFORMS`` unset), ``import jax`` reports no GPU
   cleanly: the default backend is cpu, no ROCm device is listed, and nothing on stderr is a traceback;
3. a JAX computation on CPU (a jitted matmul with a reduction, and a linear solve) equals NumPy's, computed
   from the same seeded inputs, within rtol 1e-4.

``--gpu`` (the GPU gate, only where /dev/kfd exists): jax lists ROCm devices and the same computation on the
first one equals the CPU's. Prints one JSON document; exit 0 = pass.
"""

import ctypes
import glob
import json
import os
import subprocess
import sys

PLUGIN_PACKAGES = ("jax_plugins/xla_rocm7", "jax_rocm7_plugin")

# Run in a child interpreter so its stderr (where jax logs plugin errors) is captured whole.
PROBE = r"""
import json, sys
import numpy as np
import jax, jax.numpy as jnp
want_gpu = sys.argv[1] == "gpu"
devices = jax.devices()
out = {"default_backend": jax.default_backend(), "platforms": sorted({d.platform for d in devices}),
       "jax": jax.__version__}
rng = np.random.default_rng(20261201)
a = rng.standard_normal((64, 48)).astype(np.float32)
b = rng.standard_normal((48, 32)).astype(np.float32)
m = rng.standard_normal((16, 16)).astype(np.float32) + 16 * np.eye(16, dtype=np.float32)
v = rng.standard_normal(16).astype(np.float32)
f = jax.jit(lambda x, y: jnp.tanh(x @ y).sum(axis=0))
want = np.tanh(a.astype(np.float64) @ b.astype(np.float64)).sum(axis=0)
want_x = np.linalg.solve(m.astype(np.float64), v.astype(np.float64))
cpu = jax.devices("cpu")[0]
def run(device):
    got = np.asarray(f(jax.device_put(a, device), jax.device_put(b, device)))
    x = np.asarray(jnp.linalg.solve(jax.device_put(m, device), jax.device_put(v, device)))
    return got, x
got, x = run(cpu)
out["cpu"] = {"matmul_max_rel_err": float(np.max(np.abs(got - want) / (np.abs(want) + 1e-3))),
              "solve_max_rel_err": float(np.max(np.abs(x - want_x) / (np.abs(want_x) + 1e-3)))}
if want_gpu:
    gpus = [d for d in devices if d.platform == "rocm"]
    out["gpu_devices"] = [str(d) for d in gpus]
    if gpus:
        g, gx = run(gpus[0])
        out["gpu"] = {"matmul_max_rel_err": float(np.max(np.abs(g - got) / (np.abs(got) + 1e-3))),
                      "solve_max_rel_err": float(np.max(np.abs(gx - x) / (np.abs(x) + 1e-3)))}
print("CAIRN-JAX " + json.dumps(out, sort_keys=True))
"""
RTOL = 1e-4


def plugin_libraries():
    """Every shared library the ROCm plugin packages install, by site-packages directory."""
    found = []
    for site in sys.path:
        for package in PLUGIN_PACKAGES:
            found += sorted(glob.glob(os.path.join(site, package, "*.so*")))
    return sorted(set(os.path.realpath(p) for p in found))


def load(paths):
    results = {}
    for path in paths:
        try:
            ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            results[path] = "ok"
        except OSError as exc:
            results[path] = str(exc)
    return results


def probe(mode):
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}  # let jax choose, plugin installed
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=600, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ran": False, "detail": str(exc)}, ""
    line = next((x for x in proc.stdout.splitlines() if x.startswith("CAIRN-JAX ")), "")
    report = json.loads(line[len("CAIRN-JAX "):]) if line else {}
    return {"ran": True, "returncode": proc.returncode, **report}, proc.stderr


def main(argv):
    mode = "gpu" if "--gpu" in argv else "cpu"
    libraries = plugin_libraries()
    loaded = load(libraries)
    result, stderr = probe(mode)
    report = {"mode": mode, "plugin_libraries": loaded, "probe": result, "stderr": stderr[-3000:]}
    failures = []
    if not libraries:
        failures.append(f"no ROCm plugin libraries under {', '.join(PLUGIN_PACKAGES)}: jax-rocm7-plugin/pjrt not installed")
    failures += [f"{path}: {error}" for path, error in loaded.items() if error != "ok"]
    if not result.get("ran") or result.get("returncode") != 0 or "cpu" not in result:
        tail = [x for x in stderr.strip().splitlines() if x.strip()][-1:] or [result.get("detail", "no output")]
        failures.append(f"the JAX probe failed (exit {result.get('returncode', '?')}): {tail[0][:300]}")
    else:
        for name, err in result["cpu"].items():
            if err > RTOL:
                failures.append(f"cpu {name} {err:.2e} exceeds {RTOL:g}: JAX on CPU disagrees with NumPy")
        if "Traceback" in stderr:
            first = next(x for x in stderr.splitlines() if "rror" in x or "Traceback" in x)
            failures.append(f"jax printed a traceback while choosing its backend (not a clean 'no GPU'): {first.strip()[:300]}")
        if mode == "cpu":
            if result["default_backend"] != "cpu" or "rocm" in result["platforms"]:
                failures.append(f"no GPU here, yet jax chose {result['default_backend']} ({', '.join(result['platforms'])})")
        else:
            if not result.get("gpu_devices"):
                failures.append("jax lists no ROCm device on a host with /dev/kfd: the plugin did not initialize")
            for name, err in result.get("gpu", {}).items():
                if err > RTOL:
                    failures.append(f"gpu {name} {err:.2e} exceeds {RTOL:g}: the GPU disagrees with the CPU")
    report["failures"] = failures
    print(json.dumps(report, indent=1, sort_keys=True))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
