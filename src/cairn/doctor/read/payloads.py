"""The installed wheels that carry device code for some GPU targets only, and which targets those are.

Names as the wheels are published: ``rocm-sdk-libraries-<family>`` (Cairn's per-family SDK libraries; its
``_rocm_sdk_libraries/share/cairn/libraries.json`` lists the targets it was built and audited for),
``rocm-sdk-device-<gfx>`` and ``amd-torch-device-<gfx>`` (one target's code objects each), and ``rocm-sdk-device``
(the PEP 825 variant of a device wheel: its target is read from the same JSON file). Nothing is
opened besides that one JSON file; which code the libraries really hold is the device-code audit's job.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from pathlib import Path

from cairn.doctor.snapshot import DevicePayload, Distribution

PAYLOAD_PREFIXES = ("rocm-sdk-libraries-", "rocm-sdk-device-", "amd-torch-device-")
VARIANT = "rocm-sdk-device"  # the device wheels as PEP 825 variants: one name, the target in libraries.json
LIBRARIES_INFO = "_rocm_sdk_libraries/share/cairn/libraries.json"


def read_payloads(dists: Iterable[Distribution]) -> tuple[DevicePayload, ...]:
    out = []
    for dist in dists:
        if dist.name == VARIANT:  # PEP 825: which target's variant was installed is in the wheel's own record
            info = _libraries_info(dist)
            target = str(info.get("target", ""))
            out.append(DevicePayload(dist.name, dist.version, target, (target,) if target else (), dist.site))
            continue
        prefix = next((p for p in PAYLOAD_PREFIXES if dist.name.startswith(p)), None)
        if prefix is None:
            continue
        family = dist.name[len(prefix):]
        targets: tuple[str, ...] = ()
        if prefix == "rocm-sdk-libraries-":
            info = _libraries_info(dist)
            # two family wheels would share this one file: only the wheel it names may use its targets
            if isinstance(info, dict) and str(info.get("family", "")).lower() == family:
                family = str(info["family"])  # the registry's spelling (gfx110X-dgpu); the name is lower-cased
                targets = tuple(str(t) for t in info.get("targets", ()) if isinstance(t, str))
        out.append(DevicePayload(dist.name, dist.version, family, targets, dist.site))
    return tuple(out)


def _libraries_info(dist: Distribution) -> dict:
    info: object = {}
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((Path(dist.site) / LIBRARIES_INFO).read_text())
    return info if isinstance(info, dict) else {}
