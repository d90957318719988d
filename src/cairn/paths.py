"""Where Cairn finds its own data: the repository root holding ``manifests/`` and ``recipes/``.

Order: ``$CAIRN_ROOT``, then the nearest parent of the working directory that holds
``manifests/targets.toml``, then the checkout this package was imported from. Nothing else reads paths.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from cairn.errors import CairnError

_MARKER = Path("manifests") / "targets.toml"


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
