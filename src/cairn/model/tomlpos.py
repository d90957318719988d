"""Read TOML with the line and column of every key, so errors can point at ``file:line:col``.

``tomllib`` gives values but no positions. This module walks the same text once more with a small
scanner that only records where each key path is defined (``("core", "components", 2, "source")``)
and skips over values. Key paths of arrays of tables carry the element index, matching the parsed data.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import InputError, Location

KeyPath = tuple[str | int, ...]

_BARE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass
class Document:
    """Parsed TOML plus a map from key path to the position where that key is written."""

    path: Path
    data: dict[str, Any]
    positions: dict[KeyPath, tuple[int, int]] = field(default_factory=dict)

    def where(self, keypath: KeyPath) -> Location:
        """Location of ``keypath``, falling back to the nearest written ancestor."""
        probe = tuple(keypath)
        while probe:
            if probe in self.positions:
                line, col = self.positions[probe]
                return Location(self.path, line, col)
            probe = probe[:-1]
        return Location(self.path, 1, 1)


def load(path: Path, text: str | None = None) -> Document:
    """Parse ``path``; a syntax error becomes an InputError with tomllib's line and column."""
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(path, "file not found", "check the path") from None
        except IsADirectoryError:
            raise InputError(path, "is a directory, not a TOML file", "give the file's path") from None
        except UnicodeDecodeError as exc:
            raise InputError(path, f"not UTF-8 text ({exc.reason})", "save the file as UTF-8") from None
        except OSError as exc:
            raise InputError(path, f"cannot read ({exc.strerror or exc})", "check the path and its permissions") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, col, what = _split_toml_error(str(exc), text)
        raise InputError(Location(path, line, col), f"invalid TOML: {what}", "fix the syntax") from None
    positions = _Scanner(text).scan()
    return Document(path, data, positions)


def _split_toml_error(message: str, text: str = "") -> tuple[int, int, str]:
    """tomllib says ``Invalid value (at line 3, column 7)``: pull out the numbers. At the end of the document
    it gives none, so point just after the last character the file holds (where the fix goes)."""
    marker = " (at line "
    if marker in message:
        what, _, rest = message.partition(marker)
        line_text, _, col_text = rest.rstrip(")").partition(", column ")
        try:
            return int(line_text), int(col_text), what
        except ValueError:
            pass
    if message.endswith("(at end of document)"):
        lines = text.rstrip().split("\n") if text.strip() else [""]
        return len(lines), len(lines[-1]) + 1, message.replace(" (at end of document)", " at end of document")
    return 0, 0, message


class _Scanner:
    """Walks valid TOML (tomllib already accepted it) recording key positions only."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.line = 1
        self.col = 1
        self.positions: dict[KeyPath, tuple[int, int]] = {}
        self.aot_counts: dict[tuple[str, ...], int] = {}

    # -- character helpers -------------------------------------------------
    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.text[j] if j < len(self.text) else ""

    def advance(self, n: int = 1) -> None:
        for _ in range(n):
            if self.i >= len(self.text):
                return
            if self.text[self.i] == "\n":
                self.line += 1
                self.col = 1
            else:
                self.col += 1
            self.i += 1

    def skip_ws(self, newlines: bool = False) -> None:
        while True:
            ch = self.peek()
            if not ch:  # end of text ("" is "in" every string)
                return
            if ch in " \t\r" or (newlines and ch == "\n"):
                self.advance()
            elif ch == "#":
                while self.peek() not in ("\n", ""):
                    self.advance()
            else:
                return

    # -- grammar -------------------------------------------------------------
    def scan(self) -> dict[KeyPath, tuple[int, int]]:
        table: KeyPath = ()
        while self.i < len(self.text):
            self.skip_ws(newlines=True)
            if not self.peek():
                break
            if self.peek() == "[":
                table = self.header()
            else:
                self.keyval(table)
            self.skip_ws()
            if self.peek() == "\n":
                self.advance()
        return self.positions

    def header(self) -> KeyPath:
        is_array = self.peek(1) == "["
        self.advance(2 if is_array else 1)
        self.skip_ws()
        start = (self.line, self.col)
        keys = self.dotted_key()
        self.advance(2 if is_array else 1)
        resolved: list[str | int] = []
        for n, key in enumerate(keys):
            resolved.append(key)
            prefix = tuple(keys[: n + 1])
            if is_array and n == len(keys) - 1:
                index = self.aot_counts.get(prefix, -1) + 1
                self.aot_counts[prefix] = index
                # forget nested array counters of the previous element
                for other in [p for p in self.aot_counts if len(p) > len(prefix) and p[: len(prefix)] == prefix]:
                    del self.aot_counts[other]
                self.positions.setdefault(tuple(resolved), start)
                resolved.append(index)
            elif prefix in self.aot_counts:
                resolved.append(self.aot_counts[prefix])
            self.positions.setdefault(tuple(resolved), start)
        return tuple(resolved)

    def dotted_key(self) -> list[str]:
        keys = [self.simple_key()]
        self.skip_ws()
        while self.peek() == ".":
            self.advance()
            self.skip_ws()
            keys.append(self.simple_key())
            self.skip_ws()
        return keys

    def simple_key(self) -> str:
        ch = self.peek()
        if ch in ('"', "'"):
            return self.string()
        start = self.i
        while self.peek() and self.peek() in _BARE:
            self.advance()
        return self.text[start : self.i]

    def keyval(self, table: KeyPath) -> None:
        start = (self.line, self.col)
        keys = self.dotted_key()
        path = table + tuple(keys)
        for n in range(len(keys)):
            self.positions.setdefault(table + tuple(keys[: n + 1]), start)
        self.skip_ws()
        if self.peek() == "=":
            self.advance()
        self.skip_ws()
        self.value(path)

    def value(self, path: KeyPath) -> None:
        ch = self.peek()
        if ch in ('"', "'"):
            self.string()
        elif ch == "{":
            self.inline_table(path)
        elif ch == "[":
            self.array(path)
        else:
            while self.peek() not in (",", "]", "}", "\n", "#", ""):  # tuple membership: "" only at the end
                self.advance()

    def string(self) -> str:
        quote = self.peek()
        if self.text.startswith(quote * 3, self.i):
            self.advance(3)
            start = self.i
            while not self.text.startswith(quote * 3, self.i) and self.peek():
                if quote == '"' and self.peek() == "\\":
                    self.advance()
                self.advance()
            end = self.i
            self.advance(3)
            while self.peek() == quote:  # up to two quotes may close the string content
                self.advance()
            return self.text[start:end]
        self.advance()
        chars: list[str] = []
        while self.peek() not in (quote, "\n", ""):
            if quote == '"' and self.peek() == "\\":
                self.advance()
            chars.append(self.peek())
            self.advance()
        self.advance()
        return "".join(chars)

    def inline_table(self, path: KeyPath) -> None:
        self.advance()
        while True:
            self.skip_ws(newlines=True)
            if self.peek() in ("}", ""):
                self.advance()
                return
            if self.peek() == ",":
                self.advance()
                continue
            self.keyval(path)

    def array(self, path: KeyPath) -> None:
        self.advance()
        index = 0
        while True:
            self.skip_ws(newlines=True)
            if self.peek() in ("]", ""):
                self.advance()
                return
            if self.peek() == ",":
                self.advance()
                index += 1
                continue
            self.positions.setdefault((*path, index), (self.line, self.col))
            self.value((*path, index))
