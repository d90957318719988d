"""What ``cairn plan`` and ``cairn build`` say in a few lines instead of one per action: counts by status and by
stage, and the blocked actions grouped by the reason at the root of each.

A release of 300 actions printed 331 lines; a person reads the counts and the handful of reasons why something
cannot run here. Blocking propagates (``waits on image:runtime@gfx1100 (needs a ROCm ≥ 6 toolchain …)``), so
the dependents of one blocked action share its reason: a group is the reason once, the actions blocked for it
themselves, and how many wait on them. Reasons that differ only in a gfx name (the same sglang reason for each
target's index) are one group. Pure: no I/O, no rich.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_WAITS = "waits on "
_GFX = re.compile(r"\bgfx[0-9a-zA-Z]+(?:-[a-z]+)?")


@dataclass(frozen=True)
class BlockedGroup:
    reason: str  # the reason of the first action blocked for it (as written, gfx names and all)
    here: tuple[str, ...]  # actions blocked for this reason themselves
    waiting: tuple[str, ...]  # actions blocked because one of ``here`` (or a dependent of it) is

    @property
    def count(self) -> int:
        return len(self.here) + len(self.waiting)

    def to_json(self) -> dict[str, object]:
        return {"reason": self.reason, "actions": self.count, "blocked": list(self.here), "waiting": list(self.waiting)}


def root_reason(reason: str) -> str:
    """``waits on X (why)`` → ``why``; any other reason is its own root."""
    while reason.startswith(_WAITS) and "(" in reason:
        reason = reason.split("(", 1)[1]
        reason = reason[:-1] if reason.endswith(")") else reason
    return reason


def group_blocked(blocked: Iterable[tuple[str, str]]) -> list[BlockedGroup]:
    """(action id, reason) pairs grouped by root reason, the largest group first (then first seen)."""
    groups: dict[str, tuple[str, list[str], list[str]]] = {}
    for action_id, reason in blocked:
        root = root_reason(reason)
        _, here, waiting = groups.setdefault(_GFX.sub("gfx…", root), (root, [], []))
        (waiting if reason.startswith(_WAITS) else here).append(action_id)
    ordered = sorted(groups.values(), key=lambda g: -(len(g[1]) + len(g[2])))  # stable: first seen among equals
    return [BlockedGroup(shown, tuple(here), tuple(waiting)) for shown, here, waiting in ordered]


def by_stage(statuses: Iterable[tuple[str, str]], stage_of: Mapping[str, str], order: Iterable[str]) -> dict[str, Counter[str]]:
    """(action id, status) pairs counted per stage, stages in pipeline ``order`` (unknown ones last)."""
    counts: dict[str, Counter[str]] = {}
    for action_id, status in statuses:
        counts.setdefault(stage_of.get(action_id, "other"), Counter())[status] += 1
    rank = {name: n for n, name in enumerate(order)}
    return dict(sorted(counts.items(), key=lambda item: rank.get(item[0], len(rank))))


def count_line(counts: Mapping[str, int], order: Iterable[str]) -> str:
    """``122 to run, 3 blocked``: the statuses in ``order`` that occur, then any others."""
    order = tuple(order)
    names = [s for s in order if counts.get(s)] + sorted(s for s in counts if s not in set(order) and counts[s])
    return ", ".join(f"{counts[s]} {s}" for s in names) or "nothing"


def id_list(ids: tuple[str, ...], shown: int = 4) -> str:
    """The first ``shown`` ids, then how many more."""
    head = ", ".join(ids[:shown])
    return head + (f" and {len(ids) - shown} more" if len(ids) > shown else "")
