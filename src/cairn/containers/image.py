"""Build one image through the Docker Engine API, then normalize what the engine made into OCI.

The engine does the work a user would (``FROM`` the parent by digest, ``COPY`` a prepared context); the
new layers are read back (from the engine's own store, ``engine_store.py``, or else by ``docker save``) and
normalized (oci.py) so their digests depend only on content. Parent layers keep their DiffIDs in the engine
(tar-split), so they are recognised by DiffID and their blobs are reused from the parent's layout instead of
being read and compressed again.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from cairn.containers import engine_store
from cairn.digest import tree_entries
from cairn.errors import ActionFailed, InputError
from cairn.formats.oci import Layer, Layout, image_config
from cairn.model.records import ImageLayer, ImageRecord
from cairn.names import inside, safe_relpath
from cairn.services import docker_client, registry_address
from cairn.services.registry_push import ensure_in_registry


def stage_tree(src: Path, dest: Path, epoch: int) -> None:
    """Copy ``src`` into the build context at ``dest`` with every mtime at the epoch.

    A copy, not a link: store files are shared between trees and must keep their own times.
    """
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)


def pin_times(root: Path, epoch: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (epoch, epoch), follow_symlinks=False)
    os.utime(root, (epoch, epoch))


def pull(client: Any, reference: str, log: IO[str]) -> None:
    """Make ``registry/repo@sha256:…`` present in the engine (a no-op when it already is)."""
    # lazy: charset_normalizer, docker, requests, 96 ms at start-up (python -X importtime)
    import docker.errors

    try:
        client.images.get(reference)
        return
    except docker.errors.ImageNotFound:
        pass
    log.write(f"+ docker pull {reference}\n")
    repo, digest = reference.split("@", 1)
    client.api.pull(repo, tag=digest)


def engine_build(client: Any, context: Path, tag: str, buildargs: Mapping[str, str], log: IO[str]) -> list[str]:
    """``docker build --network host --no-cache`` with the legacy builder; the build log goes to ``log``.

    Returns the ids of every image the build created (each step's result, in order, ``FROM`` parents
    excluded): a multi-stage build leaves its earlier stages behind as untagged images, and with the vfs
    driver each is a full copy of its root filesystem, so the caller removes them (``remove_created``).
    """
    log.write(f"+ docker build --network host --no-cache -t {tag} {context}\n")
    error = ""
    created: list[str] = []
    after_from = False
    for chunk in client.api.build(path=str(context), dockerfile="Dockerfile", tag=tag, buildargs=dict(buildargs),
                                  network_mode="host", nocache=True, pull=False, rm=True, forcerm=True, decode=True):
        if "stream" in chunk:
            log.write(chunk["stream"])
            for line in chunk["stream"].splitlines():
                if line.startswith("Step ") and " : FROM " in line:
                    after_from = True
                elif line.startswith(" ---> ") and not line.startswith(" ---> Running in"):
                    if not after_from:
                        created.append(line.removeprefix(" ---> ").strip())
                    after_from = False
        if "error" in chunk:
            error = chunk["error"].strip()
    log.flush()
    if error:
        remove_created(client, created, log)
        raise ActionFailed(f"docker build of {tag} failed: {error}")
    return created


def remove_created(client: Any, image_ids: list[str], log: IO[str]) -> None:
    """Remove the images a build created, newest first, never their parents (``noprune``)."""
    # lazy: charset_normalizer, docker, requests, 96 ms at start-up (python -X importtime)
    import docker.errors

    for image_id in reversed(image_ids):
        try:
            client.api.remove_image(image_id, force=True, noprune=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # still in use by another image: leave it, say so
            log.write(f"note: could not remove build image {image_id}: {exc.explanation}\n")


def save(client: Any, tag: str, dest: Path) -> tuple[dict[str, Any], list[Path]]:
    """``docker save`` into ``dest``: the engine's config and the layer tars, oldest first."""
    archive = dest / "image.tar"
    with open(archive, "wb") as handle:
        for chunk in client.images.get(tag).save(named=False):
            handle.write(chunk)
    with tarfile.open(archive) as tar:
        tar.extractall(dest / "saved", filter="tar")
    archive.unlink()
    return read_saved(dest / "saved")


def read_saved(saved: Path) -> tuple[dict[str, Any], list[Path]]:
    """The config and layer tars a ``docker save`` tree's ``manifest.json`` names — names that must stay inside it."""
    where = saved / "manifest.json"
    try:
        entry = json.loads(where.read_text())[0]
        config_name, layer_names = entry["Config"], entry["Layers"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise InputError(where, f"not a docker save manifest ({type(exc).__name__}: {exc})", "save the image again") from None
    if not isinstance(layer_names, list):
        raise InputError(where, "'Layers' is not a list", "save the image again")
    names = [safe_relpath(name, where, "file name") for name in (config_name, *layer_names)]
    for name in names:
        if not inside(saved, saved / name):
            raise InputError(where, f"file name {name!r} resolves outside the saved image", "save the image again")
    config = json.loads((saved / names[0]).read_text())
    return config, [saved / layer for layer in names[1:]]


def normalize_saved(config: Mapping[str, Any], layer_tars: Sequence[Path | None], layout: Layout, epoch: int,
                    scratch: Path, parent_blobs: Mapping[str, tuple[Layer, Path]], labels: Mapping[str, str],
                    layer_cache: Path | None = None) -> tuple[list[Layer], dict[str, Any]]:
    """Layers and OCI config of a built image: a layer whose DiffID (from the engine's config) is the parent's
    is linked from the parent's layout, its tar never read or hashed (``engine_store`` does not even write it:
    ``None``); every other layer is normalized from its tar."""
    diff_ids = list(config.get("rootfs", {}).get("diff_ids") or [])
    if len(diff_ids) != len(layer_tars):
        raise ActionFailed(f"the engine's config names {len(diff_ids)} layers, but {len(layer_tars)} were read")
    layers = []
    for index, (diff_id, tar) in enumerate(zip(diff_ids, layer_tars, strict=True)):
        known = parent_blobs.get(diff_id)
        if known:
            layout.link_layer(known[0], known[1])
            layers.append(known[0])
        elif tar is None:
            raise ActionFailed(f"layer {index} of the built image was left unread, but the parent has no such layer")
        else:
            layers.append(layout.add_layer_tar(tar, epoch, scratch, layer_cache))
    return layers, image_config(config.get("config") or {}, layers, config.get("history") or [], epoch, labels)


def parent_layers(parent_tree: Path) -> dict[str, tuple[Layer, Path]]:
    """DiffID → (layer, blob path) for every layer of the parent image's layout in the store."""
    record = ImageRecord.read(parent_tree)
    found = {}
    for item in record.layers:
        layer = Layer(item.digest, item.diff_id, item.size, item.uncompressed_size)
        found[layer.diff_id] = (layer, parent_tree / "oci" / "blobs" / "sha256" / layer.digest.split(":", 1)[1])
    return found


def build_image(*, out: Path, context: Path, dockerfile: str, parent_tree: Path, parent_ref: str, epoch: int,
                labels: Mapping[str, str], tags: list[str], record: Mapping[str, Any], log: IO[str],
                layer_cache: Path | None = None) -> ImageRecord:
    """Build ``context`` with ``dockerfile`` FROM ``parent_ref``; write ``out/oci`` + ``out/image.json``.

    ``record``: what the plan knows of the image before it is built — ``name``, ``repo``, ``target``, ``family``,
    and for a release image ``rocm``, ``kind`` and its pinned ``wheels`` (``ImageRecord`` keys)."""
    client = docker_client()
    registry, _ = registry_address()
    ensure_in_registry(parent_tree, registry, log)  # a cached push may name a registry that no longer holds it
    pull(client, f"{registry}/{parent_ref}", log)
    (context / "Dockerfile").write_text(dockerfile)
    (out / "Dockerfile").write_text(dockerfile)
    (out / "context.json").write_text(json.dumps(
        [{"path": p, "kind": k, "digest": d} for p, k, d in tree_entries(context) if p != "Dockerfile"], indent=1) + "\n")
    pin_times(context, epoch)
    # unique per build: two builds sharing an engine must never save or remove each other's image
    local_tag = f"cairn-build/{record['name']}:{record.get('target') or 'any'}-{uuid.uuid4().hex[:12]}"
    created = engine_build(client, context, local_tag, {"REGISTRY": registry}, log)
    try:
        with tempfile.TemporaryDirectory(prefix="cairn-save-", dir=out.parent) as scratch_dir:
            scratch = Path(scratch_dir)
            parent = parent_layers(parent_tree)
            read = engine_store.read_new_layers(client, local_tag, scratch, set(parent), log)
            config, tars = read if read is not None else save(client, local_tag, scratch)
            layout = Layout(out / "oci")
            layers, oci_config = normalize_saved(config, tars, layout, epoch, scratch, parent, labels, layer_cache)
    finally:  # vfs keeps a full copy per layer: free the image and every stage image now
        client.api.remove_image(local_tag, force=True, noprune=True)
        remove_created(client, created, log)
    manifest_digest, config_digest, _ = layout.write_image(oci_config, layers, labels, tags)
    wheels = record.get("wheels")
    built = ImageRecord(name=record["name"], repo=record.get("repo", ""), tags=tuple(tags), target=record.get("target", ""),
                        family=record.get("family", ""), digest=manifest_digest, config_digest=config_digest,
                        layers=tuple(ImageLayer(**x.to_json()) for x in layers), labels=dict(labels), parent=parent_ref,
                        rocm=record.get("rocm"), kind=record.get("kind"), wheels=None if wheels is None else tuple(wheels))
    built.write(out)
    return built
