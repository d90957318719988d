"""Rewrite a manifest's stale deb pins in place: only the ``version`` and ``sha256`` strings change.

The manifest is edited as text (comments, order and layout stay as the author wrote them); each pin is
located by its component's ``source.deb`` table, and the result is parsed again before it replaces the file,
so a refresh can never leave a manifest that does not load.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from cairn.errors import CairnError
from cairn.io import atomic_write
from cairn.pins.model import PinStatus


def refreshed_text(text: str, stale: list[PinStatus]) -> str:
    """``text`` with each stale pin's version and sha256 replaced by what its suite offers now."""
    for pin in stale:
        pattern = re.compile(
            r'(package\s*=\s*"' + re.escape(pin.package) + r'"[^}\n]*?version\s*=\s*")' + re.escape(pin.pinned)
            + r'("[^}\n]*?sha256\s*=\s*")' + re.escape(pin.sha256) + '"')

        def offered(m: re.Match[str], p: PinStatus = pin) -> str:
            return f'{m[1]}{p.offered}{m[2]}{p.offered_sha256}"'

        text, count = pattern.subn(offered, text)
        if count != 1:
            raise CairnError(f"cannot find the source.deb pin of {pin.component} ({pin.package}={pin.pinned}) as one "
                             "inline table with package, version and sha256 in that order — edit it by hand")
    return text


def refresh_manifest(path: Path, stale: list[PinStatus], reload: object) -> str:
    """Apply the refresh to ``path`` (after ``reload(new_text)`` accepts it); returns the unified diff."""
    old = path.read_text()
    new = refreshed_text(old, stale)
    reload(new)  # type: ignore[operator]
    diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path.name}", f"b/{path.name}"))
    if new != old:
        atomic_write(path, new)
    return diff
