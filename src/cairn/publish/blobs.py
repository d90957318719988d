"""The bundle's blobs: its wheels with their PEP 658 sidecars, Dockerfiles, files and mirrored sources.

Each is read once and checked against the sha256 ``bundle.json`` claims, and a wheel's METADATA and variant.json
read, all of them before anything is written,
and keyed as the repository lays it out (``publish/layout.md``). A blob is its file, not its bytes: the check
streams the file through sha256, and the writer sends it from disk, so a publish's memory does not grow with
the release (what ``prefetch`` read ahead, at most ``prefetch.BUDGET`` bytes of small files, spares the check
its read, and is dropped once checked). Nothing here needs a signing library:
``cairn.publish.blob_sender`` sends these while tuf, securesystemslib and cryptography load, and ``stage`` attests
them afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.digest import file_sha256
from cairn.errors import CairnError, CheckFailed, InputError
from cairn.publish.objects import CORE_METADATA, WHEEL, Obj
from cairn.wheels.variants import label_of
from cairn.wheels.wheelfile import read_metadata_bytes, read_variant

if TYPE_CHECKING:
    from cairn.matrix.bundle import Artifact, Bundle
    from cairn.publish.prefetch import Prefetch


@dataclass(frozen=True)
class Blob:
    """One artifact as the repository stores it: its bytes under its key, and a wheel's ``.metadata`` sidecar."""

    artifact: Artifact
    obj: Obj
    sidecar: Obj | None = None
    variant: dict[str, Any] | None = None  # a PEP 825 variant wheel's variant.json (the pages merge them)


def read_blobs(bundle: Bundle, prefetch: Prefetch | None = None, checked: Callable[[int], None] = lambda _: None) -> list[Blob]:
    """Every artifact but the sidecars (derived from their wheels, so they always match), in ``bundle.json``'s
    order; a file that is missing or differs from its digest is refused before anything is written. What
    ``prefetch`` read ahead is checked the same way, not read again. ``checked(n)``: after each file, its size
    (the progress display)."""
    wanted = [a for a in bundle.artifacts if a.kind != "metadata"]

    def one(artifact: Artifact) -> Blob:
        path, data = _read_checked(bundle, artifact, prefetch.take(artifact.path) if prefetch else None)
        blob = _blob(bundle, artifact, path, data)
        checked(blob.obj.size)
        return blob

    with ThreadPoolExecutor(max_workers=2) as pool:  # hashlib and file reads release the GIL: two at a time
        return list(pool.map(one, wanted))


def _blob(bundle: Bundle, artifact: Artifact, path: Path, data: bytes | None) -> Blob:
    """The blob of the checked file ``path`` (``data``: its bytes when they were read ahead, only to read a
    wheel's METADATA from; the writer streams the file, or links it into a directory repository)."""
    if artifact.kind == "wheel":
        key = f"packages/{artifact.family or 'any'}/{artifact.name}"
        wheel = path if data is None else data
        try:  # from the file, a wheel's zip directory and two members are read, not the wheel
            metadata = read_metadata_bytes(wheel, artifact.name)
            variant = read_variant(wheel, artifact.name) if label_of(artifact.name) else None
        except CairnError as exc:
            raise CheckFailed(f"{exc} (the bundle is broken)") from None
        return Blob(artifact, Obj(key, b"", WHEEL, True, digest=artifact.sha256, path=path),
                    Obj(f"{key}.metadata", metadata, CORE_METADATA, True), variant)
    top = "dockerfiles" if artifact.kind == "dockerfile" else "files"
    # a source is content-addressed and shared by every release: sources/sha256/<digest>, a mirror base
    key = artifact.path if artifact.kind == "source" else f"{top}/{bundle.version}/{artifact.path}"
    return Blob(artifact, Obj(key, b"", artifact.content_type, True, digest=artifact.sha256, path=path))


def _read_checked(bundle: Bundle, artifact: Artifact, read: tuple[bytes, str] | None = None) -> tuple[Path, bytes | None]:
    """An artifact's file, checked against the sha256 ``bundle.json`` claims, and its bytes when ``read`` (bytes
    and sha256 read ahead) has them; otherwise the file is streamed through sha256, never whole in memory."""
    path = bundle.file(artifact)
    if read is None:
        try:
            digest = file_sha256(path)
        except OSError:
            raise InputError(bundle.root / "bundle.json", f"artifact {artifact.path} is missing from files/", "rebuild the bundle") from None
        data = None
    else:
        data, digest = read
    if digest != artifact.sha256:
        raise CheckFailed(f"{path}: sha256 is {digest}, bundle.json says {artifact.sha256} — the bundle was modified; rebuild it")
    return path, data
