"""The base image: mmdebstrap of pinned Debian packages, normalized into a one-layer OCI image.

No image can be pulled on a build host like ours, and a pulled base would be an input nobody can
rebuild. mmdebstrap honours ``SOURCE_DATE_EPOCH``; our normalization then fixes order, owners and the
volatile files it leaves, so two runs against the same archive state give the same DiffID.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from cairn import proc
from cairn.errors import CairnError
from cairn.formats.oci import GZIP_LEVEL, Layout, image_config
from cairn.model.image_recipes import BaseRecipe
from cairn.model.records import ImageLayer, ImageRecord
from cairn.sources.debian import resolve_mirror


def mmdebstrap_command(recipe: BaseRecipe, out: Path, mirror: str | None = None) -> list[str]:
    """The mmdebstrap call for ``recipe``: with a lock, every package of the rootfs at its locked version."""
    argv = [proc.require_tool("mmdebstrap", "mmdebstrap"), f"--variant={recipe.variant}", "--mode=root",
            "--format=tar", "--customize-hook=rm -f \"$1/etc/hostname\" \"$1/etc/resolv.conf\""]
    if not recipe.check_valid_until:
        argv.append("--aptopt=Acquire::Check-Valid-Until \"false\"")
    include = recipe.lock or recipe.include
    if include:
        argv.append("--include=" + ",".join(include))
    argv += [f"--dpkgopt=path-exclude={p}" for p in recipe.path_exclude]
    argv += [f"--dpkgopt=path-include={p}" for p in recipe.path_include]
    archive = mirror if mirror is not None else resolve_mirror(recipe.mirror)
    options = "" if recipe.check_valid_until else "[check-valid-until=no] "
    sources = [f"deb {options}{archive} {suite} main" for suite in (recipe.suite, *recipe.suites)]
    return [*argv, recipe.suite, str(out), *sources]


def check_lock(recipe: BaseRecipe, installed: list[str], recipe_name: str) -> None:
    """The rootfs must hold exactly the locked packages: anything else means the archive moved under us."""
    if not recipe.lock:
        return
    locked, have = set(recipe.lock), set(installed)
    extra, missing = sorted(have - locked), sorted(locked - have)
    if extra or missing:
        shown = ", ".join([*(f"+{p}" for p in extra[:5]), *(f"-{p}" for p in missing[:5])])
        raise CairnError(f"rootfs {recipe_name} differs from its lock ({len(extra)} extra, {len(missing)} missing: {shown}) — "
                         f"review and re-lock: cairn pins lock recipes/containers/{recipe_name}.toml")


def installed_packages(rootfs_tar: Path) -> list[str]:
    """``name=version`` of every installed package, from the rootfs's dpkg status file."""
    with tarfile.open(rootfs_tar) as tar:
        member = next((m for m in tar.getmembers() if m.name.lstrip("./") == "var/lib/dpkg/status"), None)
        if member is None:
            return []
        text = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    packages = []
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^(Package|Version|Status): (.*)$", stanza, re.MULTILINE))
        if fields.get("Status", "").endswith("installed") and "Package" in fields:
            packages.append(f"{fields['Package']}={fields['Version']}")
    return sorted(packages)


def build_base(recipe: BaseRecipe, out: Path, epoch: int, labels: dict[str, str], tag: str, log: IO[str],
               recipe_name: str = "base", gzip_level: int = GZIP_LEVEL) -> ImageRecord:
    """Write the base image's OCI layout into ``out/oci`` and return its record (also ``out/image.json``)."""
    with tempfile.TemporaryDirectory(prefix="cairn-base-", dir=out.parent) as scratch_dir:
        scratch = Path(scratch_dir)
        rootfs = scratch / "rootfs.tar"
        proc.run(mmdebstrap_command(recipe, rootfs), env={"SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8"},
                 log=log, timeout=1800)
        packages = installed_packages(rootfs)
        check_lock(recipe, packages, recipe_name)
        layout = Layout(out / "oci")
        layer = layout.add_layer_tar(rootfs, epoch, scratch, gzip_level=gzip_level)
        rootfs.unlink()
    runtime = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", *recipe.env],
               "Cmd": ["/bin/bash"]}
    history = [{"created_by": "mmdebstrap " + " ".join(mmdebstrap_command(recipe, Path("rootfs.tar"), recipe.mirror)[1:])}]
    config = image_config(runtime, [layer], history, epoch, labels)
    manifest_digest, config_digest, _ = layout.write_image(config, [layer], labels, [tag])
    (out / "packages.txt").write_text("\n".join(packages) + "\n")
    record = ImageRecord(name="base", repo=recipe.repo, tags=(tag,), target="", family="", digest=manifest_digest,
                         config_digest=config_digest, layers=(ImageLayer(**layer.to_json()),), labels=labels,
                         packages=len(packages))
    record.write(out)
    shutil.rmtree(out / "tmp", ignore_errors=True)
    return record
