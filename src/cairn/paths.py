"""Where Cairn finds its own data: the repository root holding ``manifests/`` and ``recipes/``, and the store.

Order: ``$CAIRN_ROOT``, then the nearest parent of the working directory that holds
``manifests/targets.toml``, then the checkout this package was imported from. Nothing else reads paths.

The store a command uses when given no ``--store`` is found the way git finds ``.git`` (:func:`find_store`):
run from ``docs/`` of a checkout, ``cairn build`` must see the store a build at the top left, not start a cold
one in ``docs/.cairn``.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from cairn.errors import CairnError

_MARKER = Path("manifests") / "targets.toml"
STORE_NAME = ".cairn"


@cache
def repo_root() -> Path:
    env = os.environ.get("CAIRN_ROOT")
    if env:
        root = Path(env).resolve()
        if not (root / _MARKER).is_file():
            raise CairnError(f"CAIRN_ROOT={env} has no {_MARKER} — point it at a Cairn checkout")
        return root
    for start in (Path.cwd().resolve(), Path(__file__).resolve().parent):
        for candidate in (start, *start.parents):
            if (candidate / _MARKER).is_file():
                return candidate
    raise CairnError(f"no {_MARKER} found above {Path.cwd()} — run cairn inside a Cairn checkout or set CAIRN_ROOT")


def manifests_dir() -> Path:
    return repo_root() / "manifests"


def releases_dir() -> Path:
    return manifests_dir() / "releases"


def recipes_dir() -> Path:
    return repo_root() / "recipes"


def default_manifest() -> Path:
    """The release ``nox -s build`` and ``cairn build`` use when given none."""
    return releases_dir() / "default.toml"


def is_store(path: Path) -> bool:
    """A directory a ``cairn build`` made: it holds the action cache (``ac/``) or a build record."""
    return (path / "ac").is_dir() or (path / "last-build.json").is_file()


def find_store(start: Path | None = None) -> Path:
    """The project's store, found from ``start`` (the working directory) upward, as git finds ``.git``.

    At each directory from ``start`` up to ``/``: its ``.cairn/`` when that is a store (:func:`is_store`); else,
    when the directory is a Cairn project (holds ``manifests/targets.toml``), its ``.cairn/`` — new or not, the
    walk stops at the project. Nothing found: ``.cairn/`` in ``start``, as before. Only the working directory
    counts, never the checkout the package was imported from: a build elsewhere never writes into it.
    """
    here = (start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        if is_store(directory / STORE_NAME) or (directory / _MARKER).is_file():
            return directory / STORE_NAME
    return here / STORE_NAME


def describe_store(store: Path) -> str:
    """One line saying which store a command uses, and — when it is not the project's and holds no build yet
    (a relative ``--store`` given from a subdirectory) — where the project's store is."""
    root = Path(store).absolute()
    found = find_store()
    if root == found or is_store(root):
        return f"store {root}" + ("" if is_store(root) else " (new)")
    if is_store(found):
        return f"store {root} (new — this project's store is {found}; drop --store to use it)"
    return f"store {root} (new)"
