"""The build image a release compiles in: planned before any compile action, because they depend on it.

A release that names ``toolchain = "<rootfs recipe>"`` gets ``image:toolchain`` (mmdebstrap of the recipe's
locked package set, normalized to a one-layer OCI image) and ``push:toolchain`` (into the local registry the
Docker Engine pulls from). Every compile action depends on both, so the toolchain image's digest is part of
its key: a new compiler, device library or CMake changes every key that compiled with it, and nothing else.
Pure: what the host has (engine, registry, mmdebstrap) comes from the host snapshot.
"""

from __future__ import annotations

from cairn.formats.oci import LAYOUT_VERSION, ZLIB_VERSION, rfc3339
from cairn.model.image_recipes import load_base
from cairn.model.manifest import Manifest
from cairn.plan.graph import Action
from cairn.plan.probe import Host

IMAGE_ID, PUSH_ID = "image:toolchain", "push:toolchain"
START_HINT = "run: cairn services start"
# The build image is pulled by build jobs, never by users: its GB of LLVM is deflated for speed (level 1 takes
# about a third of the time of the level 6 that images users pull get, for a bigger layer: bench/results/deflate.json).
BUILD_IMAGE_GZIP_LEVEL = 1
# where the toolchain recipe's device libraries live inside the image (Debian's clang-22 resource dir)
DEVICE_LIBS_IN_IMAGE = "/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode"


def toolchain_actions(manifest: Manifest, host: Host) -> list[Action]:
    """``image:toolchain`` and ``push:toolchain`` for ``manifest`` (none when it builds on the host)."""
    name = manifest.release.toolchain
    if not name:
        return []
    recipe = load_base(name=name)
    epoch = manifest.release.source_date_epoch
    tag = f"{recipe.name}-{epoch}"
    blocked = ""
    if "mmdebstrap" not in host.tools:
        blocked = "needs mmdebstrap (apt-get install mmdebstrap)"
    elif not recipe.lock:
        blocked = f"recipes/containers/{name}.toml has no lock — run: cairn pins lock recipes/containers/{name}.toml"
    elif not host.docker_host:
        blocked = f"needs a Docker Engine to compile in the build image — {START_HINT}"
    labels = {
        "org.opencontainers.image.title": f"{recipe.repo}:{tag}",
        "org.opencontainers.image.created": rfc3339(epoch),
        "org.opencontainers.image.version": recipe.name,
        "dev.cairn.role": "toolchain",
    }
    image = Action(
        id=IMAGE_ID, kind="image-base", blocked=blocked,
        inputs={"layout": LAYOUT_VERSION, "zlib": ZLIB_VERSION, "gzip_level": BUILD_IMAGE_GZIP_LEVEL,
                "recipe": recipe.to_json(), "recipe_file": name, "epoch": epoch,
                "tag": tag, "labels": labels, "tool": host.mmdebstrap_version})
    push_blocked = "" if host.registry else f"needs an OCI registry to hand the build image to the engine — {START_HINT}"
    push = Action(id=PUSH_ID, kind="image-push", deps=(IMAGE_ID,), blocked=push_blocked,
                  inputs={"layout": LAYOUT_VERSION, "registry_id": host.registry_id})
    return [image, push]
