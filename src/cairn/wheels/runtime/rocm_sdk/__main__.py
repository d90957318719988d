"""``python -m rocm_sdk {test,path,version,targets}``.

``test`` loads every library with the dynamic loader (no LD_LIBRARY_PATH), checks each one resolved from
site-packages, then asks HIP for devices. No GPU is reported plainly and is not a failure: the load checks
decide the exit code (0 all loaded, 1 otherwise).
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import rocm_sdk

_NO_DEVICE = 100  # hipErrorNoDevice


def _mapped() -> set[str]:
    with open("/proc/self/maps") as handle:
        return {line.split()[-1] for line in handle if "/" in line}


def test() -> int:
    site = str(rocm_sdk.path().parent)
    failures = 0
    libs = rocm_sdk.libraries()
    print(f"rocm-sdk {rocm_sdk.version()} family={rocm_sdk.family() or 'none'} targets={','.join(rocm_sdk.targets()) or 'none'}")
    for lib in libs:
        try:
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            print(f"  ok    {lib.name}")
        except OSError as exc:
            failures += 1
            hint = rocm_sdk.info().get("system_libraries", [])
            print(f"  FAIL  {lib.name}: {exc}" + (f" (system libraries the SDK needs: {', '.join(hint)})" if hint else ""))
    mapped = _mapped()
    names = {lib.name for lib in libs}
    foreign = sorted(p for p in mapped if Path(p).name in names and not p.startswith(site))
    for path in foreign:
        failures += 1
        print(f"  FAIL  {Path(path).name} was loaded from {path}, not from {site}")
    print(f"libraries: {len(libs) - failures} of {len(libs)} loaded from {site}")
    print(f"device: {_device()}")
    return 0 if failures == 0 else 1


def _device() -> str:
    core_lib = rocm_sdk.path() / "lib"
    hips = sorted(core_lib.glob("libamdhip64.so*"))
    if not hips:
        return "unknown (no HIP runtime in rocm-sdk-core)"
    try:
        hip = ctypes.CDLL(str(hips[0]))
    except OSError as exc:
        return f"unknown (HIP runtime did not load: {exc})"
    count = ctypes.c_int(0)
    status = hip.hipGetDeviceCount(ctypes.byref(count))
    if status == _NO_DEVICE or (status == 0 and count.value == 0):
        return "none — no GPU visible to HIP (hipErrorNoDevice); load checks only"
    if status != 0:
        hip.hipGetErrorName.restype = ctypes.c_char_p
        return f"none — hipGetDeviceCount failed: {hip.hipGetErrorName(status).decode()}"
    name = ctypes.create_string_buffer(256)
    hip.hipDeviceGetName(name, 256, 0)
    return f"{count.value} visible; would use device 0: {name.value.decode(errors='replace')}"


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "test"
    if command == "test":
        return test()
    if command == "path":
        print(rocm_sdk.path(argv[1] if len(argv) > 1 else "core"))
    elif command == "version":
        print(rocm_sdk.version())
    elif command == "targets":
        print(json.dumps({"family": rocm_sdk.family(), "targets": list(rocm_sdk.targets())}))
    else:
        print("usage: python -m rocm_sdk {test,path [core|devel|libraries],version,targets}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
