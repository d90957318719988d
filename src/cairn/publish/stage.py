"""What staging a bundle uploads: every blob with its attestation, the image records, the gates and the staging record.

Every artifact is read once and checked against the sha256 ``bundle.json`` claims before anything is uploaded,
so a modified bundle is refused with nothing written. Attestations are signed by the run's ``SigningSession``.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cairn.errors import CairnError, CheckFailed, InputError
from cairn.matrix.build import cell_id
from cairn.publish.backend import sha256_hex
from cairn.publish.bundle import Bundle
from cairn.publish.objects import CORE_METADATA, JSON, JSONL, WHEEL, Obj, json_bytes
from cairn.sign.session import SigningSession
from cairn.wheels.variants import label_of
from cairn.wheels.wheelfile import read_metadata_bytes, read_variant


def stage_objects(bundle: Bundle, signing: SigningSession) -> list[Obj]:
    """Every blob of the bundle plus its attestation, then the gates and (last) the staging record."""
    objs: list[Obj] = [Obj(key, data, content_type, False) for key, data, content_type in signing.key_files()]
    files: dict[str, dict[str, Any]] = {}
    wheel_keys: dict[str, str] = {}

    def attest(key: str, name: str, sha: str, recipe: str = "") -> None:
        objs.append(Obj(f"{key}.intoto.jsonl", signing.attest(name, sha, bundle.facts, recipe), JSONL, True))

    # every artifact read and checked before anything is uploaded, two at a time (hashlib and file reads release
    # the GIL: ≈0.3 s instead of ≈0.6 s for the default release's 1 GB)
    wanted = [a for a in bundle.artifacts if a.kind != "metadata"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        registered = pool.submit(_registry)  # the GPU product names of the cells, parsed while files are read
        contents = dict(zip((a.path for a in wanted), pool.map(lambda a: _read_checked(bundle, a), wanted), strict=True))
        registry = registered.result()
    for artifact in bundle.artifacts:
        if artifact.kind == "metadata":
            continue  # PEP 658 sidecars are derived from the wheel itself, so they always match it
        data = contents[artifact.path]
        if artifact.kind == "wheel":
            key = f"packages/{artifact.family or 'any'}/{artifact.name}"
            metadata = _wheel_metadata(data, artifact.name)
            objs.append(Obj(key, data, WHEEL, True, digest=artifact.sha256))
            objs.append(Obj(f"{key}.metadata", metadata, CORE_METADATA, True))
            attest(key, artifact.name, artifact.sha256, artifact.recipe)
            files[key] = {"sha256": artifact.sha256, "size": len(data), "metadata_sha256": sha256_hex(metadata),
                          "requires_python": _requires_python(metadata)}
            if label_of(artifact.name):  # PEP 825: the pages merge the variants' properties into variants.json
                distribution, version = artifact.name.split("-")[:2]
                files[key].update(variant=_wheel_variant(data, artifact.name), distribution=distribution, version=version)
            wheel_keys[artifact.path] = key
        else:
            top = "dockerfiles" if artifact.kind == "dockerfile" else "files"
            # a source is content-addressed and shared by every release: sources/sha256/<digest>, a mirror base
            key = artifact.path if artifact.kind == "source" else f"{top}/{bundle.version}/{artifact.path}"
            objs.append(Obj(key, data, artifact.content_type, True, digest=artifact.sha256))
            attest(key, artifact.name, artifact.sha256, artifact.recipe)
            files[key] = {"sha256": artifact.sha256, "size": len(data)}

    cells = []
    gates: dict[str, dict[str, dict[str, str]]] = {}
    for cell in bundle.cells:
        images = []
        for n, image in enumerate(cell.images):
            key = f"images/{bundle.version}/{cell.gfx_target}-{n}.json"
            body = json_bytes({"reference": image.reference, "digest": image.digest})
            objs.append(Obj(key, body, JSON, True, custom={"image": {"reference": image.reference, "digest": image.digest}}))
            attest(key, image.reference, image.digest.removeprefix("sha256:"))
            images.append({"reference": image.reference, "digest": image.digest, "key": key})
        products = list(registry.targets[cell.gfx_target].products) if registry and cell.gfx_target in registry.targets else []
        cells.append({
            "release": bundle.version, "gfx_target": cell.gfx_target, "family": cell.family, "products": products,
            "os": cell.os, "python": cell.python, "framework": {"name": cell.framework, "version": cell.framework_version},
            "images": images,
            "wheels": sorted(wheel_keys[a.path] for a in bundle.artifacts_for(cell) if a.kind == "wheel"),
            "partial": list(cell.partial),
            "requirements": {"driver_name": cell.requirements.driver_name,
                             "driver": _range(cell.requirements.driver), "kernel": _range(cell.requirements.kernel)},
        })
        gates[cell_id(cells[-1])] = {g.gate: {"status": g.status, "reason": g.reason} for g in bundle.gates_for(cell)}
    objs.append(Obj(f"staging/{bundle.version}/gates.json", json_bytes(gates), JSON, False))
    record = {
        "schema": "cairn.staged/v1",
        "release": {"name": bundle.release, "version": bundle.version, "channel": bundle.channel,
                    "source_date_epoch": bundle.source_date_epoch, "manifest_sha256": bundle.manifest_sha256,
                    "required_gates": {ch: list(g) for ch, g in bundle.required_gates}},
        "cells": cells, "files": files,
    }
    objs.append(Obj(f"staging/{bundle.version}/release.json", json_bytes(record), JSON, True))
    return objs


def _read_checked(bundle: Bundle, artifact: Any) -> bytes:
    """An artifact's bytes, read once and checked against the sha256 ``bundle.json`` claims."""
    path = bundle.file(artifact)
    try:
        data = path.read_bytes()
    except OSError:
        raise InputError(bundle.root / "bundle.json", f"artifact {artifact.path} is missing from files/", "rebuild the bundle") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.sha256:
        raise CheckFailed(f"{path}: sha256 is {digest}, bundle.json says {artifact.sha256} — the bundle was modified; rebuild it")
    return data


def _wheel_metadata(data: bytes, name: str) -> bytes:
    """The wheel's own ``*.dist-info/METADATA`` — the PEP 658 sidecar must be exactly these bytes."""
    try:
        return read_metadata_bytes(data, name)
    except CairnError as exc:
        raise CheckFailed(f"{exc} (the bundle is broken)") from None


def _wheel_variant(data: bytes, name: str) -> dict[str, Any]:
    """A variant wheel's ``*.dist-info/variant.json``, which the pages merge into ``variants.json``."""
    try:
        return read_variant(data, name)
    except CairnError as exc:
        raise CheckFailed(f"{exc} (the bundle is broken)") from None


def _requires_python(metadata: bytes) -> str:
    for line in metadata.decode(errors="replace").splitlines():
        if line.lower().startswith("requires-python:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return ""


def _range(r: Any) -> dict[str, str]:
    return {"minimum": r.minimum, "below": r.below, "note": r.note}


def _registry() -> Any:
    try:
        from cairn.model.targets import load_registry

        return load_registry()
    except CairnError:
        return None
