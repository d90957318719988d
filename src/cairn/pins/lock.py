"""``cairn pins lock RECIPE``: resolve a rootfs recipe once and record every package it installs.

mmdebstrap resolves the recipe's ``include`` list (and the suite's essential set) against the archive; the
resulting dpkg status is the lock: ``name=version`` for every package, essential ones included. Builds then
install exactly the lock and fail when the rootfs differs, so two machines with one action key get one rootfs.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import IO

from cairn import proc
from cairn.containers.base import installed_packages, mmdebstrap_command
from cairn.io import atomic_write
from cairn.model.image_recipes import BaseRecipe, lock_path

HEADER = ("# Every package of the {name} rootfs, as resolved by `cairn pins lock {recipe}` (do not edit by hand:\n"
          "# re-lock, then review the diff). Builds install exactly these versions and fail if the rootfs differs.\n")


def resolve(recipe: BaseRecipe, log: IO[str], epoch: int = 1700000000) -> list[str]:
    """Build the recipe's rootfs without its lock and return its packages as ``name=version``."""
    unlocked = dataclasses.replace(recipe, lock=())
    with tempfile.TemporaryDirectory(prefix="cairn-lock-") as scratch:
        rootfs = Path(scratch) / "rootfs.tar"
        proc.run(mmdebstrap_command(unlocked, rootfs), env={"SOURCE_DATE_EPOCH": str(epoch), "LC_ALL": "C.UTF-8"},
                 log=log, timeout=1800)
        return installed_packages(rootfs)


def write_lock(recipe_file: Path, packages: list[str]) -> tuple[Path, list[str], list[str]]:
    """Write the lock next to the recipe; returns its path and the added and removed entries."""
    path = lock_path(recipe_file)
    old = set()
    if path.is_file():
        old = {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}
    text = HEADER.format(name=recipe_file.stem, recipe=f"recipes/containers/{recipe_file.name}") + "".join(
        f"{entry}\n" for entry in sorted(packages))
    atomic_write(path, text)
    new = set(packages)
    return path, sorted(new - old), sorted(old - new)
