"""The options many subcommands share (``--store``, ``--json``), declared once.

Every subcommand that reads or writes a build store takes ``--store DIR`` (a ``Path``, ``args.store``; default
the project's ``.cairn/``, found from the working directory upward as git finds ``.git``: ``cairn.paths.find_store``;
a ``--store`` given is a path like any other, relative to the working directory); every subcommand with a machine-readable form takes ``--json`` (a flag, ``args.json``).
Declaring them here keeps the flag, its type, default and destination the same everywhere; ``help`` says
what the option means for that subcommand (its ``--help`` shows the same text it always did). ``parser``
is a subcommand's parser or one of its argument groups (``cairn ci github`` puts ``--store`` in a
mutually exclusive group with ``--image-digest``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cairn.errors import InputError, did_you_mean
from cairn.paths import find_store

FIND = Path("<found>")  # add_store's default: the project's store, looked up when the subcommand is configured


def add_store(parser: argparse._ActionsContainer, help: str | None = None, default: Path | None = FIND) -> None:
    """``--store DIR``: the content-addressed build store (default: the project's, ``find_store``; ``default=None``:
    only when given). Found when the chosen subcommand is configured, so ``--help`` shows the directory."""
    if default is FIND:
        default = find_store()
        shown = str(default).replace("%", "%%")  # argparse formats help with %
        help = f"{help or 'the build store'} (default: {shown}, the project's store found from here upward)"
    parser.add_argument("--store", type=Path, default=default, help=help)


def add_json(parser: argparse._ActionsContainer, help: str | None = None) -> None:
    """``--json``: print the machine-readable document instead of tables or text."""
    parser.add_argument("--json", action="store_true", help=help)


def positive_int(text: str) -> int:
    """An argparse ``type`` for counts that must be at least one (``--jobs 0`` ran nothing at once)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1 — give at least 1")
    return value


def label(text: str) -> str:
    """An argparse ``type`` for a name that may not be empty or hold spaces (a runner label, a registry)."""
    if not text.strip() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is empty or holds whitespace — give one label")
    return text


def check_choice(option: str, value: str, known: tuple[str, ...] | list[str], what: str) -> str:
    """``value`` when it is one of ``known``; otherwise one line naming the option and the closest known value
    (``--channel stabel`` reported 0/0 gates instead of saying it knows no such channel)."""
    if value not in known:
        raise InputError(option, f"unknown {what} '{value}'", did_you_mean(value, known, what + "s"))
    return value
