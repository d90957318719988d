"""The stock hosts the ``user-install`` gate installs on: plain Debian roots made with mmdebstrap, no Cairn code inside.

Every other gate runs in Cairn's own sid images, whose system libraries hide whatever a wheel forgot to carry; a
user's host has only what its distribution installs by default. So each host is the distribution's ``minbase``
with Python and venv (``mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates <suite>``),
nothing more. A host root is an action (``host:<name>``, kind ``host-rootfs``): its tree (``rootfs.tar``, its
``packages.txt`` and ``host.json``) is content-addressed in the store, so a second build reuses it, and its key
holds the mmdebstrap command, so another suite or include list is another root. It is imported into the private
engine as ``cairn-host/<name>:<tree digest>`` when the gate needs it (``ensure_image``).

The glibc of each host decides which wheels it admits (PEP 600: ``manylinux_2_N`` needs glibc ≥ 2.N); it is read
from the root's own ``libc6`` package, never assumed.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cairn import proc
from cairn.containers.base import installed_packages
from cairn.errors import CairnError
from cairn.execute.runners import ActionContext
from cairn.services import docker_client
from cairn.sources.debian import resolve_mirror

LAYOUT = 1
INCLUDE = ("python3", "python3-venv", "ca-certificates")
IMAGE_REPO = "cairn-host"


@dataclass(frozen=True)
class Host:
    name: str  # debian-12
    suite: str  # bookworm
    glibc: str  # what the suite shipped when this table was written; the built root's libc6 is what counts


HOSTS = {h.name: h for h in (
    Host("debian-12", "bookworm", "2.36"),
    Host("debian-13", "trixie", "2.41"),
    Host("debian-sid", "sid", "2.43"),
)}


def host_id(name: str) -> str:
    return f"host:{name}"


def mmdebstrap_command(host: Host, out: Path, mirror: str) -> list[str]:
    """The mmdebstrap call for a stock ``host`` root: minbase plus Python and venv, as a user's fresh install has."""
    return [proc.require_tool("mmdebstrap", "mmdebstrap"), "--variant=minbase", "--mode=root", "--format=tar",
            "--include=" + ",".join(INCLUDE), "--customize-hook=rm -f \"$1/etc/hostname\" \"$1/etc/resolv.conf\"",
            # a snapshot archive's Release files expire while it is still the archive this host uses
            "--aptopt=Acquire::Check-Valid-Until \"false\"",
            host.suite, str(out), f"deb [check-valid-until=no] {mirror} {host.suite} main"]


def glibc_of(packages: list[str]) -> str:
    """``2.41`` from ``libc6=2.41-12`` in a root's package list; "" when there is no libc6."""
    for entry in packages:
        name, _, version = entry.partition("=")
        if name == "libc6":
            match = re.match(r"(?:\d+:)?(\d+\.\d+)", version)
            return match.group(1) if match else ""
    return ""


def python_of(packages: list[str]) -> str:
    """``3.13`` from ``python3=3.13.5-1``: the Python a user of this host gets from ``python3``."""
    for entry in packages:
        name, _, version = entry.partition("=")
        if name == "python3":
            match = re.match(r"(?:\d+:)?(\d+\.\d+)", version)
            return match.group(1) if match else ""
    return ""


def run_host_rootfs(ctx: ActionContext) -> None:
    """Build one stock host root into ``ctx.out`` (the runner of ``host:<name>``)."""
    inputs = ctx.action.inputs
    host = HOSTS[inputs["host"]]
    rootfs = ctx.out / "rootfs.tar"
    started = time.monotonic()
    proc.run(mmdebstrap_command(host, rootfs, resolve_mirror(inputs["mirror"])),
             env={"SOURCE_DATE_EPOCH": str(inputs["epoch"]), "LC_ALL": "C.UTF-8"}, log=ctx.log, timeout=1800)
    seconds = round(time.monotonic() - started, 1)
    packages = installed_packages(rootfs)
    glibc = glibc_of(packages)
    if not glibc:
        raise CairnError(f"{host_id(host.name)}: the {host.suite} root has no libc6 — mmdebstrap made no usable host")
    (ctx.out / "packages.txt").write_text("\n".join(packages) + "\n")
    record = {"host": host.name, "suite": host.suite, "glibc": glibc, "python": python_of(packages), "packages": len(packages),
              "include": list(INCLUDE)}
    (ctx.out / "host.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    ctx.log.write(f"{host.name}: {host.suite} minbase, glibc {glibc}, Python {record['python']}, {len(packages)} packages, "
                  f"mmdebstrap {seconds}s\n")


def read_host(tree: Path) -> dict[str, Any]:
    return json.loads((tree / "host.json").read_text())


def ensure_image(tree: Path, digest: str, log: IO[str]) -> str:
    """``cairn-host/<name>:<digest12>`` in the private engine, imported from the tree's root when missing."""
    # lazy: docker, 18 ms at start-up (python -X importtime)
    import docker.errors

    name = read_host(tree)["host"]
    reference = f"{IMAGE_REPO}/{name}:{digest.removeprefix('sha256:')[:12]}"
    client = docker_client()
    try:
        client.images.get(reference)
        return reference
    except docker.errors.ImageNotFound:
        pass
    started = time.monotonic()
    repo, tag = reference.rsplit(":", 1)
    client.api.import_image_from_file(str(tree / "rootfs.tar"), repository=repo, tag=tag)
    log.write(f"imported {reference} from {tree / 'rootfs.tar'} in {time.monotonic() - started:.1f}s\n")
    return reference
