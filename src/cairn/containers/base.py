"""The base image: mmdebstrap of pinned Debian packages, normalized into a one-layer OCI image.

No image can be pulled on a build host like ours, and a pulled base would be an input nobody can
rebuild. mmdebstrap honours ``SOURCE_DATE_EPOCH``; our normalization then fixes order, owners and the
volatile files it leaves, so two runs against the same archive state give the same DiffID.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import IO, Any

from cairn import proc
from cairn.containers.oci import Layout, image_config
from cairn.containers.recipes import BaseRecipe
from cairn.errors import CairnError


def mmdebstrap_command(recipe: BaseRecipe, out: Path) -> list[str]:
    argv = [proc.require_tool("mmdebstrap", "mmdebstrap"), f"--variant={recipe.variant}", "--mode=root",
            "--format=tar", "--customize-hook=rm -f \"$1/etc/hostname\" \"$1/etc/resolv.conf\""]
    if recipe.include:
        argv.append("--include=" + ",".join(recipe.include))
    argv += [f"--dpkgopt=path-exclude={p}" for p in recipe.path_exclude]
    argv += [f"--dpkgopt=path-include={p}" for p in recipe.path_include]
    return [*argv, recipe.suite, str(out), resolve_mirror(recipe.mirror)]


def resolve_mirror(mirror: str) -> str:
    """``host`` means the Debian archive this host's apt already uses (first ``deb`` URI of its sources).

    The recipe then names no archive of its own, and a host behind a local mirror or proxy keeps using it.
    """
    if mirror != "host":
        return mirror
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
               *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in sources:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            if line.startswith("URIs:") and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2:
                uri = next(w for w in words[1:] if not w.startswith("["))
                if "security" not in uri:
                    return uri
    raise CairnError("no Debian archive found in /etc/apt/sources.list(.d) — set mirror = \"<archive URL>\" in recipes/containers/base.toml")


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


def build_base(recipe: BaseRecipe, out: Path, epoch: int, labels: dict[str, str], tag: str, log: IO[str]) -> dict[str, Any]:
    """Write the base image's OCI layout into ``out/oci`` and return its record (also ``out/image.json``)."""
    with tempfile.TemporaryDirectory(prefix="cairn-base-", dir=out.parent) as scratch_dir:
        scratch = Path(scratch_dir)
        rootfs = scratch / "rootfs.tar"
        proc.run(mmdebstrap_command(recipe, rootfs), env={"SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8"},
                 log=log, timeout=1800)
        packages = installed_packages(rootfs)
        layout = Layout(out / "oci")
        layer = layout.add_layer_tar(rootfs, epoch, scratch)
        rootfs.unlink()
    runtime = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
               "Cmd": ["/bin/bash"]}
    history = [{"created_by": "mmdebstrap " + " ".join(mmdebstrap_command(recipe, Path("rootfs.tar"))[1:])}]
    config = image_config(runtime, [layer], history, epoch, labels)
    manifest_digest, config_digest, _ = layout.write_image(config, [layer], labels, [tag])
    (out / "packages.txt").write_text("\n".join(packages) + "\n")
    record = {
        "schema": "cairn.image/v1", "name": "base", "repo": recipe.repo, "tags": [tag], "target": "", "family": "",
        "digest": manifest_digest, "config_digest": config_digest, "layers": [layer.to_json()],
        "labels": labels, "packages": len(packages),
    }
    (out / "image.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(out / "tmp", ignore_errors=True)
    return record
