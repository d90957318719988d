"""Reading ``<store>/last-build.json``, the record ``cairn build`` leaves for gate, image and publish.

Three commands read it, so it is read here once, checked for its shape (``{"actions": {id: {"status",
"output", "detail"}}}``) and for the one name in it that becomes a path: an action's ``output`` is the
digest of a tree under ``<store>/trees/``, never a path that leaves it. A store that was never built, a
truncated or hand-edited record: one line naming the file and what to run.

Imports only the standard library: ``cairn publish`` reads this before its heavy imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.errors import InputError
from cairn.names import name_problem
from cairn.paths import find_store, is_store

FILENAME = "last-build.json"


@dataclass(frozen=True)
class ActionInfo:
    status: str
    output: str | None  # tree digest under <store>/trees/, or None when the action produced nothing
    detail: str


def read_actions(store: Path, *, missing_ok: bool = False) -> dict[str, ActionInfo]:
    """Every action of the store's last build by id; ``missing_ok`` turns "never built" into no actions."""
    path = Path(store) / FILENAME
    rebuild = f"run cairn build --store {store} again"
    if not path.is_file():
        if missing_ok and not path.exists():
            return {}
        what = "no such store" if not Path(store).exists() else "no build report (the store was never built)"
        raise InputError(path, what, f"run cairn build --store {store} first, or {_built_store_hint(Path(store))}")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(path, f"cannot read the build report ({exc})", rebuild) from None
    actions = data.get("actions") if isinstance(data, dict) else None
    if not isinstance(actions, dict):
        raise InputError(path, "not a build report: no 'actions' object", rebuild)
    return {str(action_id): _info(path, str(action_id), raw, rebuild) for action_id, raw in actions.items()}


def _info(path: Path, action_id: str, raw: Any, rebuild: str) -> ActionInfo:
    if not isinstance(raw, dict) or not isinstance(raw.get("status"), str):
        raise InputError(path, f"action {action_id!r} has no status", rebuild)
    output, detail = raw.get("output"), raw.get("detail")
    if output is not None and (not isinstance(output, str) or name_problem(output)):
        raise InputError(path, f"action {action_id!r}: output {output!r} is not a tree digest of the store", rebuild)
    if detail is not None and not isinstance(detail, str):
        raise InputError(path, f"action {action_id!r}: detail is {type(detail).__name__}, not a string", rebuild)
    return ActionInfo(raw["status"], output or None, detail or "")


def _built_store_hint(store: Path) -> str:
    """Where a built store is: this project's, when ``store`` is not it (a relative ``--store`` given from a
    subdirectory), else "pass --store of a built store"."""
    found = find_store()
    if is_store(found) and found != store.absolute():
        return f"drop --store to use this project's store {found}"
    return "pass --store of a built store"
