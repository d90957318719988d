"""What staging a bundle uploads: every blob with its attestation, the image records, the gates and the staging record.

The blobs come read and checked (``cairn.publish.blobs``: every artifact against the sha256 ``bundle.json`` claims,
before anything is uploaded, so a modified bundle is refused with nothing written) and usually already on their
way up (``cairn.publish.blob_sender``). Attestations are signed by the run's ``SigningSession``.
"""

from __future__ import annotations

from typing import Any

from cairn.errors import CairnError
from cairn.matrix.build import cell_id
from cairn.matrix.bundle import Bundle
from cairn.publish.blobs import Blob
from cairn.publish.objects import JSON, JSONL, Obj, json_bytes
from cairn.sign.session import SigningSession


def stage_objects(bundle: Bundle, signing: SigningSession, blobs: list[Blob]) -> list[Obj]:
    """Every blob of the bundle (``read_blobs``: read and checked) plus its attestation, then the gates and (last)
    the staging record."""
    objs: list[Obj] = [Obj(key, data, content_type, False) for key, data, content_type in signing.key_files()]
    files: dict[str, dict[str, Any]] = {}
    wheel_keys: dict[str, str] = {}
    registry = _registry()  # the GPU product names of the cells

    def attest(key: str, name: str, sha: str, recipe: str = "") -> None:
        objs.append(Obj(f"{key}.intoto.jsonl", signing.attest(name, sha, bundle.facts, recipe), JSONL, True))

    for blob in blobs:
        artifact, obj = blob.artifact, blob.obj
        objs.append(obj)
        files[obj.key] = {"sha256": artifact.sha256, "size": obj.size}
        if blob.sidecar is not None:  # a wheel
            objs.append(blob.sidecar)
            files[obj.key].update(metadata_sha256=blob.sidecar.sha256, requires_python=_requires_python(blob.sidecar.data))
            if blob.variant is not None:  # PEP 825: the pages merge the variants' properties into variants.json
                distribution, version = artifact.name.split("-")[:2]
                files[obj.key].update(variant=blob.variant, distribution=distribution, version=version)
            if artifact.index:  # the pages list it on its family's index or on its target's alone
                files[obj.key]["index"] = artifact.index
            wheel_keys[artifact.path] = obj.key
        attest(obj.key, artifact.name, artifact.sha256, artifact.recipe)

    cells = []
    gates: dict[str, dict[str, dict[str, str]]] = {}
    # one record per distinct image of a target, numbered in the order the cells name them: cells of a target share
    # its runtime image, and each framework or engine cell (smoke, llama.cpp) adds its own
    image_keys: dict[tuple[str, str, str], str] = {}
    for cell in bundle.cells:
        images = []
        for image in cell.images:
            key = image_keys.get((cell.gfx_target, image.reference, image.digest), "")
            if not key:
                n = sum(1 for target, _, _ in image_keys if target == cell.gfx_target)
                key = image_keys[(cell.gfx_target, image.reference, image.digest)] = f"images/{bundle.version}/{cell.gfx_target}-{n}.json"
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
                    "required_gates": {ch: list(g) for ch, g in bundle.required_gates},
                    "pins": dict(bundle.facts.pins)},  # what `cairn diff` compares between published releases
        "cells": cells, "files": files,
    }
    objs.append(Obj(f"staging/{bundle.version}/release.json", json_bytes(record), JSON, True))
    return objs


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
        # lazy: cairn.model, 5 ms at start-up (python -X importtime)
        from cairn.model.targets import load_registry

        return load_registry()
    except CairnError:
        return None
