"""PEP 825 wheel variants of the device wheels: ``rocm-sdk-device`` labelled by the gfx target it carries.

An installer that knows variants asks AMD's provider (``rocm-bootstrap``, which reads the GPU from KFD sysfs)
for this host's ``amd :: gfx_arch`` values and takes the variant whose property matches — no extra to type,
no family to know. The variants of one distribution are alternatives, so they share one name,
``rocm-sdk-device``; each variant's bytes are those of ``rocm-sdk-device-<gfx>``, which the plain extras
(``rocm-sdk[device-<gfx>]``) install for installers without variant support.

The index links ``<name>-<version>-variants.json`` from the project page: every variant's properties, merged,
which is what the installer reads before it picks a wheel. Written here, read back by ``variantlib`` (the
reference implementation) in the tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

SCHEMA = "https://variants-schema.wheelnext.dev/v0.2.0.json"
NAMESPACE = "amd"
FEATURE = "gfx_arch"
PROVIDER = {"plugin-api": "rocm_bootstrap.variant_provider:AMDVariantPlugin", "requires": ["rocm-bootstrap==0.3.0"]}
DISTRIBUTION = "rocm-sdk-device"
CONTENT_TYPE = "application/json"
# name-version(-build)?-python-abi-platform-label.whl: a label is 1 to 16 of [0-9a-z._] (a build tag starts
# with a digit and comes before the python tag, so seven parts are a label, and so are six whose third is a tag)
_LABEL = re.compile(r"^[0-9a-z._]{1,16}$")


def label_of(filename: str) -> str:
    """The variant label of a wheel file name, "" for a plain wheel."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):
        return parts[-1] if _LABEL.match(parts[-1]) else ""
    return ""


def plain_filename(filename: str) -> str:
    """The file name without its variant label (what tools that know no variants parse)."""
    label = label_of(filename)
    return filename.removesuffix(f"-{label}.whl") + ".whl" if label else filename


def variant_label(target: str) -> str:
    """The label of a gfx target's variant: the target's name, which users recognise in a file listing."""
    label = target.lower().replace(":", ".").replace("+", "").replace("-", "")
    if not _LABEL.match(label):
        raise ValueError(f"gfx target {target!r} makes no variant label")
    return label


def variant_json(target: str) -> dict[str, Any]:
    """``*.dist-info/variant.json`` of ``target``'s variant."""
    return _document({variant_label(target): {NAMESPACE: {FEATURE: [target]}}})


def variants_json(documents: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``<name>-<version>-variants.json``: every variant of one release of a distribution, merged."""
    merged: dict[str, Any] = {}
    for document in documents:
        for label, properties in document.get("variants", {}).items():
            if merged.get(label, properties) != properties:
                raise ValueError(f"two variants labelled {label!r} with different properties")
            merged[label] = properties
    return _document(dict(sorted(merged.items())))


def dumps(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=4, sort_keys=True) + "\n").encode()


def variants_filename(name: str, version: str) -> str:
    """``rocm_sdk_device-7.2.4-variants.json``: the file name's distribution part, as in the wheels'."""
    return f"{name}-{version}-variants.json"


def _document(variants: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": SCHEMA, "default-priorities": {"namespace": [NAMESPACE]}, "providers": {NAMESPACE: PROVIDER},
            "variants": variants}
