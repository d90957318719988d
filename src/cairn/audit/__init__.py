"""Which gfx targets does a binary, wheel, tree or image carry device code for — in every bundle?

Library API for gates and ``cairn doctor``::

    report = audit_paths([Path("dist/foo.whl")])
    cov = report.coverage("gfx1151")        # Coverage(covered, via, gaps)
    one = audit_file(Path("libfoo.so"))     # BinaryAudit(kind, bundles, ...)

Bad input raises ``cairn.errors.InputError`` subclasses (exit 2); nothing here prints.
"""

from cairn.audit.binary import NotElf, audit_file
from cairn.audit.bundle import CorruptBundle
from cairn.audit.model import BinaryAudit, Bundle, BundleGap, CodeObject, Coverage, Entry, FileGap
from cairn.audit.report import AuditReport, audit_paths

__all__ = [
    "AuditReport",
    "BinaryAudit",
    "Bundle",
    "BundleGap",
    "CodeObject",
    "CorruptBundle",
    "Coverage",
    "Entry",
    "FileGap",
    "NotElf",
    "audit_file",
    "audit_paths",
]
