"""Store interface: what the action cache remembers about an action, and what every store offers.

Outputs are named by their tree digest (``cairn.digest.tree_digest``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class ActionRecord:
    """What the action cache remembers about one finished action."""

    key: str
    action: str
    output: str  # tree digest
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)


class Store(Protocol):
    """What the executor needs from a store; a local directory or a remote cache can provide it."""

    def lookup(self, key: str) -> ActionRecord | None: ...

    def record(self, record: ActionRecord) -> None: ...

    def has_tree(self, digest: str) -> bool: ...

    def tree(self, digest: str) -> Path: ...

    def workdir(self, action_id: str) -> Path: ...

    def commit(self, workdir: Path) -> str: ...

    def log_path(self, key: str) -> Path: ...
