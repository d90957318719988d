"""The bundle's blobs: its wheels with their PEP 658 sidecars, Dockerfiles, files and mirrored sources.

Each is read once and checked against the sha256 ``bundle.json`` claims, and a wheel's METADATA and variant.json
read, all of them before anything is written,
and keyed as the repository lays it out (``publish/layout.md``). Nothing here needs a signing library:
``cairn.publish.early`` sends these while tuf, securesystemslib and cryptography load, and ``stage`` attests
them afterwards.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.errors import CairnError, CheckFailed, InputError
from cairn.publish.objects import CORE_METADATA, WHEEL, Obj
from cairn.wheels.variants import label_of
from cairn.wheels.wheelfile import read_metadata_bytes, read_variant

if TYPE_CHECKING:
    from cairn.publish.bundle import Artifact, Bundle
    from cairn.publish.prefetch import Prefetch


@dataclass(frozen=True)
class Blob:
    """One artifact as the repository stores it: its bytes under its key, and a wheel's ``.metadata`` sidecar."""

    artifact: Artifact
    obj: Obj
    sidecar: Obj | None = None
    variant: dict[str, Any] | None = None  # a PEP 825 variant wheel's variant.json (the pages merge them)


def read_blobs(bundle: Bundle, prefetch: Prefetch | None = None) -> list[Blob]:
    """Every artifact but the sidecars (derived from their wheels, so they always match), in ``bundle.json``'s
    order; a file that is missing or differs from its digest is refused before anything is written. What
    ``prefetch`` read ahead is checked the same way, not read again."""
    wanted = [a for a in bundle.artifacts if a.kind != "metadata"]
    with ThreadPoolExecutor(max_workers=2) as pool:  # hashlib and file reads release the GIL: two at a time
        contents = list(pool.map(lambda a: _read_checked(bundle, a, prefetch.take(a.path) if prefetch else None), wanted))
    return [_blob(bundle, artifact, data) for artifact, data in zip(wanted, contents, strict=True)]


def _blob(bundle: Bundle, artifact: Artifact, data: bytes) -> Blob:
    if artifact.kind == "wheel":
        key = f"packages/{artifact.family or 'any'}/{artifact.name}"
        try:
            metadata = read_metadata_bytes(data, artifact.name)
            variant = read_variant(data, artifact.name) if label_of(artifact.name) else None
        except CairnError as exc:
            raise CheckFailed(f"{exc} (the bundle is broken)") from None
        return Blob(artifact, Obj(key, data, WHEEL, True, digest=artifact.sha256),
                    Obj(f"{key}.metadata", metadata, CORE_METADATA, True), variant)
    top = "dockerfiles" if artifact.kind == "dockerfile" else "files"
    # a source is content-addressed and shared by every release: sources/sha256/<digest>, a mirror base
    key = artifact.path if artifact.kind == "source" else f"{top}/{bundle.version}/{artifact.path}"
    return Blob(artifact, Obj(key, data, artifact.content_type, True, digest=artifact.sha256))


def _read_checked(bundle: Bundle, artifact: Artifact, read: tuple[bytes, str] | None = None) -> bytes:
    """An artifact's bytes, read once (``read``: bytes and sha256 read ahead) and checked against the sha256
    ``bundle.json`` claims."""
    path = bundle.file(artifact)
    if read is None:
        try:
            data = path.read_bytes()
        except OSError:
            raise InputError(bundle.root / "bundle.json", f"artifact {artifact.path} is missing from files/", "rebuild the bundle") from None
        read = data, hashlib.sha256(data).hexdigest()
    data, digest = read
    if digest != artifact.sha256:
        raise CheckFailed(f"{path}: sha256 is {digest}, bundle.json says {artifact.sha256} — the bundle was modified; rebuild it")
    return data
