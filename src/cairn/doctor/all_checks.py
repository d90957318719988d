"""Every check the doctor runs — the GPU stack's (``checks``) and the host's own (``checks_host``) — in one list.

Apart from both so neither imports the other: ``checks_host`` builds on ``checks``' ``Check`` and ``Facts``."""

from __future__ import annotations

from cairn.doctor.checks import CHECKS, STATUS_ORDER, Check, Facts
from cairn.doctor.checks_host import HOST_CHECKS
from cairn.doctor.snapshot import HostSnapshot


def run_checks(snap: HostSnapshot, facts: Facts) -> list[Check]:
    """Every check, worst first (stable within a status)."""
    results = [check(snap, facts) for check in (*CHECKS, *HOST_CHECKS)]
    return sorted(results, key=lambda c: STATUS_ORDER[c.status])
