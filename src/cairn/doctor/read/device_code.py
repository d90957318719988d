"""The device-code audit of what is installed: which GPU targets each package's and SDK's code was built for.

Every shared object an installed distribution's RECORD lists, and each ROCm SDK tree's ``lib/``, goes
through ``cairn.audit``. The audit is heavy and most checks do not need it, so it is imported only here and
only when it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cairn.doctor.read.files import Root
from cairn.doctor.snapshot import CodeAudit, Distribution, RocmInstall
from cairn.errors import CairnError


def audit_installed(dists: Iterable[Distribution], rocm: Iterable[RocmInstall], r: Root) -> tuple[CodeAudit, ...]:
    """Audit every installed package's shared objects and each SDK tree's lib/ (cairn.audit, lazily)."""
    # lazy: elftools, cairn.audit, pprint, 67 ms at start-up (python -X importtime)
    from cairn.audit import audit_paths  # the audit is heavy and optional for most checks

    out = []
    subjects: list[tuple[str, str, list[Path]]] = [(d.name, d.version, [Path(p) for p in d.shared_objects])
                                                   for d in dists if d.shared_objects]
    for install in rocm:
        if install.source in ("opt", "cairn-sdk"):
            lib = r(install.where) / "lib"
            if lib.is_dir():
                subjects.append((f"ROCm SDK {install.where}", install.version, [lib]))
    for name, version, paths in subjects:
        try:
            out.append(CodeAudit(name, version, audit_paths(paths)))
        except CairnError as exc:
            out.append(CodeAudit(name, version, None, str(exc)))
    return tuple(out)
