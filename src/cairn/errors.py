"""Every failure a user can see, as a typed error with one message and one exit code.

The CLI catches ``CairnError`` and prints ``str(error)`` on one line; nothing else reaches the user as a
traceback. Exit codes: 1 = a check said no (audit not covered, gate failed), 2 = bad input or a broken
environment the user must fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


class CairnError(Exception):
    """Base class: ``message`` is shown as is, ``exit_code`` is what the CLI returns."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Location:
    """A place in an input file, 1-based like every editor."""

    path: Path | str
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if self.line:
            return f"{self.path}:{self.line}:{self.col or 1}"
        return str(self.path)


class InputError(CairnError):
    """Malformed input: ``file:line:col: what is wrong — how to fix it``."""

    def __init__(self, where: Location | Path | str, what: str, fix: str = "") -> None:
        self.where = where if isinstance(where, Location) else Location(where)
        self.what = what
        self.fix = fix
        message = f"{self.where}: {what}"
        if fix:
            message += f" — {fix}"
        super().__init__(message)


class ManifestError(InputError):
    """A release manifest, recipe or target registry that cannot be used as written."""


class UrlError(CairnError):
    """A URL ``cairn.remote.url`` could not read. ``detail`` is what the transport said, for a caller that words its own
    line (the matrix readers do); ``status`` is the status that said no — an HTTP status, 404 also for a missing
    file or S3 key, 403 for a refused S3 read — or None when nothing answered."""

    def __init__(self, message: str, url: str, detail: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url, self.detail, self.status = url, detail, status


class PinMismatch(CairnError):
    """A fetched input does not match its pin: never build from it."""


class ToolMissing(CairnError):
    """A host tool the step needs is not installed."""


class ActionFailed(CairnError):
    """A build action's command failed; the message names the action and its log."""

    exit_code = 1


class CheckFailed(CairnError):
    """An audit or gate answered no."""

    exit_code = 1


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The most similar known name, for "did you mean" hints (None when nothing is close)."""
    matches = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, choices: Iterable[str], what: str = "") -> str:
    """A fix hint naming the closest valid choice, or listing them when none is close."""
    options = sorted(set(choices))
    hint = closest(word, options)
    if hint:
        return f"did you mean '{hint}'?"
    shown = ", ".join(options[:12]) + (", …" if len(options) > 12 else "")
    return f"use one of the known {what or 'values'}: {shown}"
