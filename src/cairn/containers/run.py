"""The images stage's runners: build the base image, build each runtime, smoke, engine or framework image, push.

What each action does is decided by ``cairn.containers.plan``; these functions do it, reading only the
action's inputs and its dependencies' output trees. An image blocked when it runs (its linkage check
failed) is not built: its output records why, and its push passes that on to the gates and the bundle.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from cairn.containers import base as base_image
from cairn.containers import image as engine_image
from cairn.containers import wheels as index_wheels
from cairn.containers.linkage import blocked_by as linkage_blocked
from cairn.containers.linkage import image_blocked, run_linkage, write_blocked
from cairn.containers.plan import SCRIPTS, SCRIPTS_DIR
from cairn.containers.render import render_dockerfile
from cairn.errors import CairnError
from cairn.execute.runners import ActionContext
from cairn.formats.oci import GZIP_LEVEL
from cairn.model.image_recipes import BaseRecipe
from cairn.model.records import PushRecord
from cairn.services import registry_address
from cairn.services import registry_push as publish
from cairn.services.engine import START_HINT
from cairn.store.local import normalize_modes


def run_base(ctx: ActionContext) -> None:
    inputs = ctx.action.inputs
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in inputs["recipe"].items()}
    recipe = BaseRecipe(**fields)
    base_image.build_base(recipe, ctx.out, inputs["epoch"], inputs["labels"], inputs["tag"], ctx.log,
                          inputs.get("recipe_file", "base"), inputs.get("gzip_level", GZIP_LEVEL))


def run_push(ctx: ActionContext) -> None:
    (image,) = ctx.action.deps  # a push depends on the one image it pushes
    blocked = image_blocked(ctx.deps[image])
    if blocked:  # nothing was built: the push records why, and the gates and the bundle pass it on
        PushRecord.of_blocked(image, blocked).write(ctx.out)
        return
    registry, _ = registry_address()
    if not registry:
        raise CairnError(f"no registry to push to — {START_HINT}")
    publish.push(ctx.deps[image], registry, ctx.log).write(ctx.out)


def run_image(ctx: ActionContext) -> None:
    inputs = ctx.action.inputs
    blocked = linkage_blocked(ctx.deps[inputs["linkage"]]) if inputs.get("linkage") else ""
    if blocked:
        reason = f"{inputs['recipe']['name']} {inputs['version']}: {blocked}"
        ctx.log.write(f"not built: {reason}\n")
        write_blocked(ctx.out, {"reason": reason, "target": inputs["target"], "family": inputs["family"]})
        return
    parent_push = PushRecord.read(ctx.deps[inputs["parent"]], f"rebuild it: cairn build --only {inputs['parent']}")
    context_dir = Path(str(ctx.out) + ".context")
    try:
        rootfs = context_dir / "rootfs"
        rootfs.mkdir(parents=True)
        for part in inputs["parts"]:
            src = ctx.deps[part["dep"]] / part.get("src", "")
            dest = rootfs / part["dest"]
            if src.is_dir():
                engine_image.stage_tree(src, dest, inputs["epoch"])
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
        for dest in inputs["script_files"]:
            target = rootfs / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SCRIPTS_DIR / f"{SCRIPTS[dest]}.py", target)
            target.chmod(0o755)
        for dest, points_to in inputs.get("links", {}).items():
            (rootfs / dest).parent.mkdir(parents=True, exist_ok=True)
            (rootfs / dest).symlink_to(points_to)
        # files staged here were created under the builder's umask: the image gets 0644/0755 whatever it was
        normalize_modes(rootfs)
        pinned = []
        if inputs["wheels"]:
            pinned = index_wheels.stage(ctx.deps[inputs["index"]], inputs["family"], inputs["wheels"], context_dir / "wheels",
                                        inputs.get("python", ""))
            ctx.log.write("wheels: " + ", ".join(f"{w.filename} sha256:{w.sha256}" for w in pinned) + "\n")
        recipe = inputs["recipe"]
        labels = dict(inputs["labels"])
        if inputs.get("base_labels"):  # the OCI annotation keys for the image this one is FROM, by digest
            labels |= {"org.opencontainers.image.base.name": parent_push.repo,
                       "org.opencontainers.image.base.digest": parent_push.digest}
        dockerfile = render_dockerfile(inputs, parent_push.repo, parent_push.digest, [w.to_json() for w in pinned])
        engine_image.build_image(
            out=ctx.out, context=context_dir, dockerfile=dockerfile, parent_tree=ctx.deps[inputs["parent_image"]],
            parent_ref=parent_push.reference, epoch=inputs["epoch"], labels=labels, tags=inputs["tags"],
            record={"name": recipe["name"], "repo": recipe["repo"], "target": inputs["target"],
                    "family": inputs["family"], "rocm": inputs["rocm"], "kind": recipe["kind"],
                    "wheels": [w.to_json() for w in pinned]},
            log=ctx.log, layer_cache=ctx.mirror / "layers" if ctx.mirror else None)
    finally:
        shutil.rmtree(context_dir, ignore_errors=True)


# the action kinds this stage adds, and what runs each (declared in cairn.stages)
RUNNERS = {
    "image-base": run_base,
    "image-push": run_push,
    "image-build": run_image,
    "linkage": run_linkage,
}
