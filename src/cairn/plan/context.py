"""What the SDK planner and every later stage share: the stage context and the ids of the SDK's actions.

Its own module so that stage planners (``cairn.wheels.plan`` …) import it without importing the planner,
which imports them through ``cairn.stages``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlparse

from cairn.model.manifest import Component, Manifest, Source
from cairn.model.targets import Registry
from cairn.plan.graph import Action
from cairn.plan.probe import Host

# Bumped whenever the code that performs an action kind changes what it writes: part of every key.
LAYOUT_VERSIONS = {"fetch": 1, "deb-unpack": 1, "copy": 1, "hip": 1, "cmake": 2, "wheel-unpack": 1, "assemble": 1,
                   "split": 1}



@dataclass
class StageContext:
    """What a stage planner sees and extends: add actions to ``actions`` (id → Action), notes to ``notes``."""

    manifest: Manifest
    registry: Registry
    host: Host
    families: tuple[str, ...]
    actions: dict[str, Action]
    notes: list[str]


def fetch_id(source: Source) -> str:
    f = dict(source.fields)
    if source.kind == "git":
        repo = PurePosixPath(urlparse(f["url"]).path).name.removesuffix(".git")
        return f"fetch:{repo}@{str(f.get('commit', 'unpinned'))[:12]}"
    if source.kind == "archive":
        return f"fetch:{PurePosixPath(urlparse(f['url']).path).name}"
    if source.kind == "deb":
        return f"fetch:deb:{f['package']}"
    if source.kind == "pypi":
        return f"fetch:pypi:{f['filename']}"
    return f"fetch:path:{f['dir']}"


def build_id(component: Component, family: str = "") -> str:
    return f"build:{component.name}" + (f"@{family}" if family else "")
