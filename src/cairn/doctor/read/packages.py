"""The installed Python distributions that might carry or need ROCm, and the Python they belong to.

On a live host the site-packages directories are the interpreter's own; in a captured tree they are
``usr/lib/python3*/``, ``usr/local/lib/python3*/``, ``opt/*/lib/python3*/``, ``home/*/.local/lib/python3*/``
and ``root/.local/lib/python3*/``. Each ``*.dist-info`` gives its METADATA headers and the shared objects
its RECORD lists (the device-code audit reads those), and its WHEEL file the wheel's tags (the glibc check).
"""

from __future__ import annotations

import re
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from cairn.doctor.read.files import Root, text_of
from cairn.doctor.snapshot import Distribution

# frameworks whose ROCm builds the doctor checks (names only; their ROCm version comes from their metadata)
FRAMEWORKS = ("torch", "torchvision", "torchaudio", "pytorch-triton-rocm", "triton", "jax", "jaxlib", "vllm",
              "sglang", "sgl-kernel", "onnxruntime-rocm", "cairn-smoke", "aiter", "llama-cpp-python")


def site_dirs(r: Root, live: bool) -> list[Path]:
    if live:
        candidates = [Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        candidates += [Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")]
    else:
        candidates = []
        for pattern in ("usr/lib/python3*/*-packages", "usr/local/lib/python3*/*-packages",
                        "opt/*/lib/python3*/site-packages", "home/*/.local/lib/python3*/site-packages",
                        "root/.local/lib/python3*/site-packages"):
            candidates += sorted(r.base.glob(pattern))
    out: list[Path] = []
    for path in candidates:
        if path.is_dir() and path not in out:
            out.append(path)
    return out


def read_dists(sites: Iterable[Path]) -> tuple[Distribution, ...]:
    out: dict[str, Distribution] = {}
    for site in sites:
        for dist_info in sorted(site.glob("*.dist-info")):
            name, version, requires = _metadata(dist_info)
            if not name or not rocm_relevant(name, version, requires):
                continue
            canonical = _canonical(name)
            if canonical in out:
                continue  # the first site on the path wins, like the import system
            shared = []
            for line in text_of(dist_info / "RECORD").splitlines():
                rel = line.split(",", 1)[0]
                if re.search(r"\.so(\.\d+)*$", rel):
                    path = (site / rel).resolve()
                    if path.is_file():
                        shared.append(str(path))
            out[canonical] = Distribution(canonical, version, str(site), requires, tuple(sorted(shared)),
                                          wheel_tags(dist_info))
    return tuple(sorted(out.values(), key=lambda d: d.name))


def wheel_tags(dist_info: Path) -> tuple[str, ...]:
    """The ``Tag:`` lines of the wheel it was installed from (``py3-none-manylinux_2_39_x86_64``), in order."""
    tags = []
    for line in text_of(dist_info / "WHEEL").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Tag" and value.strip():
            tags.append(value.strip())
    return tuple(tags)


def rocm_relevant(name: str, version: str, requires: Iterable[str]) -> bool:
    """A distribution worth a look: it names ROCm, or is a framework with ROCm builds."""
    canonical = _canonical(name)
    if "rocm" in canonical or "rocm" in version.lower() or any("rocm" in req.lower() for req in requires):
        return True
    return canonical in FRAMEWORKS or canonical.startswith(("amd-torch-device-", "rocm-sdk"))


def python_version(sites: list[Path], live: bool) -> str:
    """The Python version (3.11): this interpreter's on a live host, else the first site-packages path naming one."""
    if live:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    for site in sites:
        match = re.search(r"python(3\.\d+)", str(site))
        if match:
            return match[1]
    return ""


def _metadata(dist_info: Path) -> tuple[str, str, tuple[str, ...]]:
    name = version = ""
    requires = []
    for line in text_of(dist_info / "METADATA").splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    return name, version, tuple(requires)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
