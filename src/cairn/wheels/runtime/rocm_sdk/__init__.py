"""The ROCm SDK installed from Cairn wheels: where it is, which version, which gfx targets.

    >>> import rocm_sdk
    >>> rocm_sdk.path()            # site-packages/_rocm_sdk_core
    >>> rocm_sdk.path("devel")     # headers, hipcc, CMake files (rocm-sdk[devel])
    >>> rocm_sdk.version(), rocm_sdk.targets()

``python -m rocm_sdk test`` loads every library of the installed SDK wheels and reports the device HIP
would use.
"""

from __future__ import annotations

import json
from pathlib import Path

_SITE = Path(__file__).resolve().parent.parent
_PARTS = ("core", "devel", "libraries")


def path(part: str = "core") -> Path:
    """Root of one installed SDK wheel: ``core``, ``devel`` or ``libraries``."""
    if part not in _PARTS:
        raise ValueError(f"unknown SDK part {part!r}; use one of {', '.join(_PARTS)}")
    return _SITE / f"_rocm_sdk_{part}"


def info() -> dict:
    """What the core wheel recorded when it was built (release, version, system libraries it needs)."""
    return json.loads((Path(__file__).parent / "_dist_info.json").read_text())


def version() -> str:
    return str(info()["version"])


def _libraries_info() -> dict:
    found = path("libraries") / "share" / "cairn" / "libraries.json"
    return json.loads(found.read_text()) if found.is_file() else {}


def family() -> str | None:
    """The gfx family of the installed ``rocm-sdk-libraries-<family>`` wheel (None without one)."""
    return _libraries_info().get("family")


def targets() -> tuple[str, ...]:
    """gfx targets the installed per-family libraries were built and audited for."""
    return tuple(_libraries_info().get("targets", ()))


def library_dirs() -> list[Path]:
    return [p / "lib" for p in (path("core"), path("libraries")) if (p / "lib").is_dir()]


def libraries() -> list[Path]:
    """Every shared library of the installed SDK wheels, in load order (core first)."""
    return [lib for d in library_dirs() for lib in sorted(d.glob("*.so*")) if lib.is_file()]
