"""Runners for action kinds that later stages add (package, image, gate, sign, publish, …).

A stage registers its runner when its plan module is imported (the planner imports every stage module
before the executor runs), so the core runner table never has to know the later stages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_REGISTRY: dict[str, Callable[[Any], None]] = {}


def register(kind: str, runner: Callable[[Any], None]) -> None:
    _REGISTRY[kind] = runner


def lookup(action: Any) -> Callable[[Any], None] | None:
    return _REGISTRY.get(action.kind)
