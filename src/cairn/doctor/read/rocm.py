"""Where ROCm user space is installed: ``/opt/rocm*`` trees, Debian packages and ``rocm``/``rocm-sdk*`` wheels.

Paths read, relative to the root: ``opt/rocm*/share/cairn/manifest.json`` (a cairn SDK),
``opt/rocm*/.info/version`` (an AMD install) and ``var/lib/dpkg/status``; the wheels are among the
distributions already read from site-packages.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable

from cairn.doctor.read.files import Root, text_of
from cairn.doctor.snapshot import Distribution, RocmInstall, release_of

# Debian and AMD packages whose version is the ROCm version they ship
DPKG_ROCM_PACKAGES = ("rocm-core", "hip-runtime-amd", "libamdhip64-5", "libamdhip64-6", "libhsa-runtime64-1")


def read_rocm(r: Root, dists: Iterable[Distribution]) -> tuple[RocmInstall, ...]:
    """Every install found, in this order: ``/opt`` trees, the first Debian package, the first wheel."""
    return (*_opt_installs(r), *_dpkg_install(r), *_wheel_install(dists))


def _opt_installs(r: Root) -> list[RocmInstall]:
    """Each ``/opt/rocm*`` tree once (``/opt/rocm`` is usually a link to a versioned one)."""
    found: list[RocmInstall] = []
    seen_opt: set[str] = set()
    for opt in sorted(r("opt").glob("rocm*")) if r("opt").is_dir() else []:
        real = os.path.realpath(opt)
        if real in seen_opt:
            continue
        seen_opt.add(real)
        shown = "/" + str(opt.relative_to(r.base))
        manifest = opt / "share" / "cairn" / "manifest.json"
        if manifest.is_file():
            with contextlib.suppress(OSError, ValueError):
                doc = json.loads(manifest.read_text())
                version = str(doc.get("release", {}).get("version", "") or doc.get("version", ""))
                found.append(RocmInstall("cairn-sdk", release_of(version), shown, version))
                continue
        raw = text_of(opt / ".info" / "version").strip()
        if raw:
            found.append(RocmInstall("opt", release_of(raw), shown, raw))
    return found


def _dpkg_install(r: Root) -> list[RocmInstall]:
    status = text_of(r("var/lib/dpkg/status"))
    for block in status.split("\n\n"):
        fields = dict(
            (line.split(":", 1)[0], line.split(":", 1)[1].strip()) for line in block.splitlines() if ":" in line and not line.startswith(" ")
        )
        if fields.get("Package") in DPKG_ROCM_PACKAGES and "installed" in fields.get("Status", ""):
            raw = fields.get("Version", "")
            upstream = raw.split(":", 1)[-1]
            return [RocmInstall("dpkg", release_of(upstream), fields["Package"], raw)]
    return []


def _wheel_install(dists: Iterable[Distribution]) -> list[RocmInstall]:
    for dist in dists:
        if dist.name in ("rocm-sdk-core", "rocm-sdk", "rocm"):
            return [RocmInstall("wheel", release_of(dist.version), f"{dist.name} in {dist.site}", dist.version)]
    return []
