#!/usr/bin/python3
"""cairn-check: run inside an image by the in-container gate (stdlib only; the image has no Cairn).

Loads every shared library of the SDK installed from the release's wheels (a missing dependency or a
broken library fails here, not on a user's machine), runs ``rocminfo`` and accepts only a clean "no GPU"
answer or a real agent list (a crash or a hang fails). ``python -m rocm_sdk test`` is a separate gate
command. Prints one JSON document; exit 0 = pass.

"No GPU" is decided by the device node, never by an error message: without ``/dev/kfd`` the HSA runtime
cannot open the driver and says so (``HSA_STATUS_ERROR_OUT_OF_RESOURCES`` among others), which is the
clean answer. With ``/dev/kfd`` present the same errors — out of resources, permission denied — mean a
device that is there but not usable, and that fails: a GPU gate must never pass on a host whose GPU
cannot run a kernel.
"""

import ctypes
import glob
import importlib.util
import json
import os
import subprocess
import sys

NO_GPU = ("ROCk module is NOT loaded", "no GPU", "HSA_STATUS_ERROR_OUT_OF_RESOURCES")
KFD = "/dev/kfd"


def load_libraries(roots):
    results = {}
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "lib*.so*"))):
            real = os.path.realpath(path)
            if real in results or not os.path.isfile(real):
                continue
            try:
                ctypes.CDLL(real, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
                results[real] = "ok"
            except OSError as exc:
                results[real] = str(exc)
    return results


def rocminfo(kfd=None):
    """``ok``: rocminfo listed agents, or there is no device node and it said so cleanly."""
    kfd = kfd or KFD
    try:
        proc = subprocess.run(["rocminfo"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "detail": f"rocminfo did not run: {exc}"}
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode == 0 and "Agent " in text and "HSA_STATUS_ERROR" not in text:
        return {"ok": True, "gpu": True, "detail": "agents listed"}
    if os.path.exists(kfd):
        return {"ok": False, "gpu": True, "returncode": proc.returncode,
                "detail": f"device present but not usable ({kfd} exists, rocminfo failed): {text[-300:]}"}
    clean_no_gpu = proc.returncode in (0, 1) and any(marker in text for marker in NO_GPU)
    return {"ok": clean_no_gpu, "gpu": False, "returncode": proc.returncode, "detail": text[-300:]}


def sdk_library_dirs():
    """The installed SDK wheels' library directories (rocm_sdk), then Cairn's wheels' (cairn_smoke, llama_cpp);
    and what is wrong when the SDK itself is missing (the other directories are still checked)."""
    dirs, problem = [], ""
    try:
        import rocm_sdk
    except ImportError as exc:
        problem = f"rocm_sdk is not importable ({exc}): the image has no rocm-sdk-core wheel"
    else:
        dirs += [str(d) for d in rocm_sdk.library_dirs()]
    try:
        import cairn_smoke
    except ImportError:
        cairn_smoke = None
    if cairn_smoke is not None:
        dirs.append(os.path.join(os.path.dirname(cairn_smoke.__file__), "lib"))
    # llama-cpp-python's libraries, located without importing it (its import needs NumPy, which images lack)
    llama = importlib.util.find_spec("llama_cpp")
    if llama is not None and llama.submodule_search_locations:
        dirs.append(os.path.join(next(iter(llama.submodule_search_locations)), "lib"))
    return [d for d in dirs if os.path.isdir(d)], problem


def main():
    roots, problem = sdk_library_dirs()
    libs = load_libraries(roots)
    report = {"library_dirs": roots, "libraries": libs, "rocminfo": rocminfo()}
    failures = [problem] if problem else []
    failures += [f"{path}: {err}" for path, err in libs.items() if err != "ok"]
    if not libs and not problem:
        failures.append(f"no shared libraries found under {', '.join(roots) or 'the SDK wheels'}")
    if not report["rocminfo"]["ok"]:
        failures.append("rocminfo: " + report["rocminfo"]["detail"])
    report["failures"] = failures
    print(json.dumps(report, indent=1, sort_keys=True))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
