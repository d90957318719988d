"""Push an image's OCI layout to the registry with its digest preserved, and prove it arrived.

``skopeo copy --preserve-digests`` uploads exactly our blobs, so the registry's manifest digest is the
one ``image.json`` records; ``skopeo inspect --raw`` then reads the manifest back by digest.

The store, not the registry, is where an image lives: a push action is cached like any other (locally, or
in a shared S3 cache that a job on another machine filled), while the registry an action talks to may be
a fresh runner's or one whose storage was reset. So every action that uses a pushed image first makes
sure this registry holds it (``ensure_in_registry``), pushing it again from the image's layout in the
store when it does not — the same bytes, so the same digest, and nothing downstream changes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import IO

from cairn import proc
from cairn.errors import ActionFailed
from cairn.model.records import ImageRecord, PushRecord
from cairn.services import docker_client


def ensure_in_registry(image_tree: Path, registry: str, log: IO[str]) -> None:
    """Make the image of ``image_tree`` (an ``image-build``/``image-base`` output) usable by digest from
    ``registry``: nothing to do when the Docker Engine already holds it (a build ``FROM`` it, a container or a
    ``docker run`` uses the engine's copy) or the registry does; else it is pushed again from the store."""
    record = ImageRecord.read(image_tree)
    reference = f"{registry}/{record.repo}@{record.digest}"
    if _engine_holds(reference):
        return
    skopeo = proc.require_tool("skopeo", "skopeo")
    if proc.run([skopeo, "inspect", "--raw", "--tls-verify=false", f"docker://{reference}"], log=log,
                check=False).returncode == 0:
        return
    log.write(f"{registry} does not hold {record.repo}@{record.digest}: pushing it again from the store\n")
    push(image_tree, registry, log)


def _engine_holds(reference: str) -> bool:
    # lazy: charset_normalizer, urllib3, docker, 58 ms at start-up (python -X importtime)
    import docker.errors

    try:
        docker_client().images.get(reference)
        return True
    except docker.errors.ImageNotFound:
        return False


def push(image_tree: Path, registry: str, log: IO[str]) -> PushRecord:
    """Push the image of ``image_tree`` to ``registry`` by digest; its ``push.json`` record (not yet written)."""
    record = ImageRecord.read(image_tree)
    skopeo = proc.require_tool("skopeo", "skopeo")
    repo, digest = record.repo, record.digest
    for tag in record.tags:
        proc.run([skopeo, "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                  f"oci:{image_tree / 'oci'}:{tag}", f"docker://{registry}/{repo}:{tag}"], log=log, timeout=1800)
    raw = proc.run([skopeo, "inspect", "--raw", "--tls-verify=false", f"docker://{registry}/{repo}@{digest}"], log=log)
    got = "sha256:" + hashlib.sha256(raw.stdout.encode()).hexdigest()
    if got != digest:
        raise ActionFailed(f"registry {registry} holds {repo}@{got}, not the built {digest} — the registry rewrote the manifest")
    return PushRecord(image=record.name, registry=registry, repo=repo, tags=record.tags, digest=digest,
                      reference=f"{repo}@{digest}", target=record.target)
