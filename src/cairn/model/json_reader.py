"""The strict reader for the JSON files cairn writes and reads back (matrix, release bundle, gate results).

The TOML inputs go through ``cairn.model.reader``; the JSON documents one stage writes and another reads —
``matrix.json`` (read by ``cairn doctor``, ``matrix``, ``diff``), ``bundle.json`` and its ``gates/*.json``
(``cairn publish``), a gate's ``gate.json`` (``cairn gate``, the bundle stage) — go through this one. Each
file kind declares its objects with the same ``Table`` and ``Field`` the TOML reader uses, and this module
checks a parsed document against them: an unknown key (with the closest known one as "did you mean"), a
missing key, a value of the wrong JSON type, a value outside its ``enum``, not matching its ``pattern``
(``doc`` says what the pattern means in words) or below its ``minimum``.

Every mistake is one ``InputError`` line: the file, the key path (``'cells[0].wheels[1].sha256'``), what is
wrong and the file kind's fix — text that is not JSON at all is located at the ``file:line:col`` the parser
stopped at. Nobody writes these files by hand, so the fix is the way to write the file again.

Imports only the standard library and ``cairn.errors``/``cairn.model.reader``: ``cairn publish`` reads its
bundle before its heavy imports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.errors import InputError, Location, closest, did_you_mean
from cairn.model.reader import Checked, Field, Table

_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "boolean": (bool,), "strings": (list,),
                                       "table": (dict,), "tables": (list,)}
_EXPECTED = {"string": "a string", "integer": "an integer", "boolean": "true or false", "strings": "a list of strings",
             "table": "an object", "tables": "a list of objects"}


def kind_of(value: Any) -> str:
    """A JSON value's type in words, for "is a string, not an integer"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def parse(text: str | bytes, where: Path | str, what: str, fix: str) -> Any:
    """``text`` as JSON; text that is not JSON is one line at the ``file:line:col`` the parser stopped at."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(Location(where, exc.lineno, exc.colno), f"cannot read the {what}: not JSON ({exc.msg})", fix) from None
    except UnicodeDecodeError as exc:
        raise InputError(where, f"cannot read the {what}: not UTF-8 text ({exc.reason} at byte {exc.start})", fix) from None


def load(path: Path, what: str, fix: str) -> Any:
    """The JSON document in the file ``path``; unreadable or not JSON is one line naming it."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read the {what} ({exc.strerror or exc})", fix) from None
    return parse(text, path, what, fix)


def load_object(path: Path, what: str, fix: str) -> dict[str, Any]:
    """The JSON object in ``path`` (a blocked image's ``blocked.json``): one line when it is anything else."""
    data = load(path, what, fix)
    if not isinstance(data, dict):
        raise InputError(path, f"the {what} is {kind_of(data)}, not an object", fix)
    return data


def read_file(path: Path, spec: Table, what: str, fix: str) -> JsonSection:
    """The file ``path`` parsed and checked against ``spec``: the top object of a file kind's document."""
    return JsonReader(load(path, what, fix), path, fix, what).root(spec)


class JsonReader:
    """One parsed JSON document, where its errors are reported and the fix every one of them names."""

    def __init__(self, data: Any, where: Path | str, fix: str, what: str = "document") -> None:
        self.data = data
        self.where = where
        self.fix = fix
        self.what = what  # the file kind, for "the gate result is a list, not an object"

    def fail(self, what: str, fix: str = "") -> InputError:
        return InputError(self.where, what, fix or self.fix)

    def root(self, spec: Table) -> JsonSection:
        return self.table(self.data, spec, "")

    def table(self, value: Any, spec: Table, label: str) -> JsonSection:
        """``value`` checked to be an object holding only the keys ``spec`` declares."""
        if not isinstance(value, dict):
            raise self.fail(f"'{label}' is {kind_of(value)}, not an object" if label else f"the {self.what} is {kind_of(value)}, not an object")
        key = spec.unknown(value)
        if key is not None:
            raise self.fail(f"unknown key '{key}'" + (f" in '{label}'" if label else ""), did_you_mean(key, spec.allowed(value), "keys"))
        return JsonSection(self, value, spec, label)


@dataclass
class JsonSection(Checked):
    """A checked object: its declared keys read with their JSON types, errors naming the key path."""

    reader: JsonReader
    data: dict[str, Any]
    spec: Table
    label: str

    def at(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.label}[{key}]"
        return f"{self.label}.{key}" if self.label else key

    def fail(self, key: str, what: str, fix: str = "") -> InputError:
        """An error about ``key`` of this object: ``what`` follows its quoted key path."""
        return self.reader.fail(f"'{self.at(key)}' {what}", fix)

    def _field(self, key: str, kind: str) -> Field:
        spec = self.spec.values if self.spec.values is not None else self.spec.fields.get(key)
        if spec is None or spec.type != kind:
            raise TypeError(f"{key!r} is not declared as a {kind} of {self.spec.what or self.label}")  # a loader bug
        return spec

    def _value(self, key: str, kind: str, absent: Any) -> Any:
        """The value of ``key`` checked against its declaration; ``absent`` (or its default) when not written."""
        spec = self._field(key, kind)
        if key not in self.data:
            if spec.required:
                raise self.fail(key, "is missing")
            return absent if spec.default is None else spec.default
        value = self.data[key]
        if kind != "any" and (not isinstance(value, _TYPES[kind]) or (kind == "integer" and isinstance(value, bool))):
            raise self.fail(key, f"is {kind_of(value)}, not {_EXPECTED[kind]}")
        if kind == "string":
            if spec.nonempty and not value.strip():
                raise self.fail(key, "is empty")
            if spec.enum and value not in spec.enum:
                hint = closest(value, spec.enum)
                raise self.fail(key, f"is {value!r}, not one of {', '.join(spec.enum)}", f"did you mean '{hint}'?" if hint else "")
            if spec.pattern and not re.fullmatch(spec.pattern, value):
                raise self.fail(key, f"is {value!r}, not {spec.doc or spec.pattern}")
        if kind == "integer" and spec.minimum is not None and value < spec.minimum:
            raise self.fail(key, f"is {value}, not an integer ≥ {spec.minimum}")
        return value

    def string(self, key: str) -> str:
        return str(self._value(key, "string", ""))

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._value(key, "strings", [])
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.reader.fail(f"'{self.at(key)}[{index}]' is {kind_of(item)}, not a string")
        return tuple(value)

    def integer(self, key: str) -> int:
        return int(self._value(key, "integer", 0))

    def boolean(self, key: str) -> bool:
        return bool(self._value(key, "boolean", False))

    def any(self, key: str, absent: Any = None) -> Any:
        """A value the file kind leaves free (a gate's ``evidence``), ``absent`` when not written."""
        return self._value(key, "any", absent)

    def table(self, key: str) -> JsonSection:
        spec = self._field(key, "table")
        assert spec.table is not None
        return self.reader.table(self._value(key, "table", {}), spec.table, self.at(key))

    def tables(self, key: str) -> Iterator[JsonSection]:
        """Each element of a list of objects, checked against its declaration."""
        spec = self._field(key, "tables")
        assert spec.table is not None
        for index, item in enumerate(self._value(key, "tables", [])):
            yield self.reader.table(item, spec.table, f"{self.at(key)}[{index}]")
