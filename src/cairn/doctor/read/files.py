"""Lenient reading of files below a root directory: what every host reader is made of.

A host's files are evidence, not input: a missing or unreadable file reads as empty and a malformed number
as a default, so a half-configured host gives a diagnosis instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path


class Root:
    """The directory a host is read from (``/`` or a captured tree): ``r("/dev/kfd")`` is that path below it."""

    def __init__(self, root: Path) -> None:
        self.base = root

    def __call__(self, path: str) -> Path:
        return self.base / path.lstrip("/")


def text_of(path: Path) -> str:
    """The file's text, or "" when it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def int_of(text: str, default: int = 0) -> int:
    """A decimal, ``0x`` hex or ``0o`` octal number as sysfs writes them; ``default`` when it is none."""
    text = text.strip()
    try:
        return int(text, 0)
    except ValueError:
        return default


def properties(path: Path) -> dict[str, str]:
    """A sysfs ``properties`` file: one ``key value`` pair per line."""
    out: dict[str, str] = {}
    for line in text_of(path).splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out[key] = value.strip()
    return out


def numbered(parent: Path, prefix: str = "") -> list[Path]:
    """Entries named ``<prefix><number>`` in ``parent`` (``card0``, ``renderD128``, ``3``), in numeric order."""
    try:
        entries = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()]
    except OSError:
        return []
    return sorted(entries, key=lambda p: int(p.name[len(prefix):]))
