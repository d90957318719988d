"""The coverage check every compile of device code ends with: a library carries code for exactly the targets it
was built for. It is the audit's judgement, so it lives with the audit; the HIP compile, the CMake builds and the
wheels all call it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cairn.audit import audit_file, audit_paths
from cairn.audit.model import FATBIN
from cairn.errors import CheckFailed


def check_coverage(lib: Path, targets: Iterable[str]) -> None:
    """Gate: ``lib`` must carry code for exactly ``targets`` in every bundle — no target missing, none extra.

    Raises CheckFailed (exit 1) with the audit's own words; returns None when the library passes.
    """
    wanted = tuple(sorted(set(targets)))
    audit = audit_file(lib)
    if audit.kind != FATBIN or not audit.bundles:
        raise CheckFailed(f"{lib}: no HIP device code (.hip_fatbin) — expected {', '.join(wanted)}")
    if audit.mismatches:
        raise CheckFailed(f"{lib}: {audit.mismatches[0]}")
    report = audit_paths([lib])
    problems = [c.message() for c in (report.coverage(t) for t in wanted) if not c.covered]
    extra = sorted(set(audit.targets) - set(wanted))
    if extra:
        problems.append(f"{lib} carries targets outside the requested set: {', '.join(extra)}")
    if problems:
        raise CheckFailed("; ".join(problems))
