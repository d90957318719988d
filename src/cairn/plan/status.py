"""Each action's status against a store without running anything: cached, to run, or blocked."""

from __future__ import annotations

from dataclasses import dataclass

from cairn.plan.graph import Plan
from cairn.store.base import Store


@dataclass(frozen=True)
class ActionStatus:
    action: str
    status: str  # cached | to run | blocked
    key: str = ""  # known once every dependency is cached
    reason: str = ""


def statuses(plan: Plan, store: Store | None) -> list[ActionStatus]:
    outputs: dict[str, str] = {}
    result: list[ActionStatus] = []
    for action in plan.actions:
        if action.blocked:
            result.append(ActionStatus(action.id, "blocked", reason=action.blocked))
            continue
        if all(d in outputs for d in action.deps):
            key = action.key({d: outputs[d] for d in action.deps})
            record = store.lookup(key) if store else None
            if record:
                outputs[action.id] = record.output
                result.append(ActionStatus(action.id, "cached", key))
                continue
            result.append(ActionStatus(action.id, "to run", key))
        else:
            result.append(ActionStatus(action.id, "to run", reason="after its dependencies"))
    return result
