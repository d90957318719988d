"""One strict reader for every TOML input file: declared tables, typed values, one-line located errors.

Each input file kind (release manifest, targets registry, wheel recipe, container image and rootfs recipe)
declares its tables once as a ``Table`` of ``Field``s. The same declaration does two jobs:

- ``Reader.table`` checks a parsed table against it — not a table, or an unknown key (with the closest
  known one as "did you mean") — and the ``Section`` it returns reads each declared key with its type
  checked (``string``, ``strings``, ``integer``, ``boolean``, ``table``, ``tables``); every mistake is a
  ``ManifestError`` at the key's ``file:line:col`` (positions from ``cairn.model.tomlpos``);
- ``cairn.model.schema`` turns it into a JSON Schema an editor can validate the file with.

Checks that need more than a type (a pinned commit, a known gfx family, a PEP 440 version) stay in the
loader of each file kind, which reads its values through a ``Section`` and fails through the same reader.
``Style`` holds the few wordings in which the file kinds' messages have always differed, so porting a
loader here never changed what a user sees.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import Location, ManifestError, did_you_mean
from cairn.model import tomlpos
from cairn.model.tomlpos import KeyPath

TYPES = ("string", "integer", "boolean", "strings", "table", "tables", "any")


@dataclass(frozen=True)
class Field:
    """One key of a table: its type, whether it must be there, and what the schema says about it.

    ``table`` is the declaration of the value (``type="table"``) or of every element (``type="tables"``).
    ``error`` replaces the default ``(what, fix)`` of a value of the wrong type or out of range.
    ``enum``, ``pattern`` and ``one_of`` go into the schema only: the loader checks them itself, with a
    message that names the closest choice.
    """

    type: str
    doc: str = ""
    required: bool = False
    nonempty: bool = False  # a string that is blank (after stripping) is as wrong as a missing one
    default: Any = None
    minimum: int | None = None
    table: Table | None = None
    error: tuple[str, str] | None = None
    enum: tuple[str, ...] = ()
    pattern: str = ""
    json: Mapping[str, Any] | None = None  # the schema of an ``any`` value the loader checks in its own way

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"unknown field type {self.type!r}")


@dataclass(frozen=True)
class Table:
    """A TOML table: its declared keys, or (``values``) a table whose keys are names the user picks.

    ``what`` names the table in messages (``unknown key 'x' in [release]``); without it a message says
    ``unknown key 'x'``. ``one_of``: exactly one of the declared keys is written (``source.git`` or
    ``source.pypi``, never both). ``json``: what the schema adds about the table as a whole that its keys alone
    cannot say (which keys go together), checked by the loader in its own way.
    """

    fields: Mapping[str, Field] = field(default_factory=dict)
    what: str = ""
    doc: str = ""
    values: Field | None = None
    one_of: bool = False
    json: Mapping[str, Any] | None = None

    def allowed(self, value: Mapping[str, Any]) -> set[str]:
        return set(value) if self.values is not None else set(self.fields)

    def unknown(self, value: Mapping[str, Any]) -> str | None:
        """The first key of ``value`` this table does not declare (None when it declares them all)."""
        allowed = self.allowed(value)
        return next((key for key in value if key not in allowed), None)


@dataclass(frozen=True)
class Style:
    """The wordings in which the file kinds' messages have always differed (tests pin each of them).

    ``located``: errors at ``file:line:col``; False shows the file alone (container recipes).
    ``missing_reads_empty``: an absent string reads as "" and fails as "must be a non-empty string"
    instead of "missing 'key'". ``strings_said_nonempty``: a string of the wrong type is called "a
    non-empty string" even where "" is allowed.
    """

    located: bool = True
    missing_reads_empty: bool = False
    strings_said_nonempty: bool = False
    shown: Path | None = None  # the path errors name, when not the one the document was read from


class Reader:
    """One parsed TOML file and the way its errors are located and worded."""

    def __init__(self, doc: tomlpos.Document, style: Style = Style()) -> None:
        self.doc = doc
        self.style = style

    @classmethod
    def load(cls, path: Path, text: str | None = None, style: Style = Style()) -> Reader:
        return cls(tomlpos.load(Path(path), text), style)

    def where(self, keypath: KeyPath) -> Location:
        if not self.style.located:
            return Location(self.style.shown or self.doc.path)
        return self.doc.where(keypath)

    def fail(self, keypath: KeyPath, what: str, fix: str) -> ManifestError:
        return ManifestError(self.where(keypath), what, fix)

    def root(self, spec: Table) -> Section:
        return self.table(self.doc.data, spec, ())

    def table(self, value: Any, spec: Table, keypath: KeyPath, what: str | None = None) -> Section:
        """``value`` checked to be a table holding only the keys ``spec`` declares."""
        what = spec.what if what is None else what
        if not isinstance(value, dict):
            if what:
                raise self.fail(keypath, f"{what} must be a table", f"write it as [{'.'.join(map(str, keypath))}] or {{ … }}")
            raise self.fail(keypath, "expected a table", "write it as a TOML table")
        key = spec.unknown(value)
        if key is not None:
            raise self.fail((*keypath, key), f"unknown key '{key}'" + (f" in {what}" if what else ""),
                            did_you_mean(key, spec.allowed(value), "keys"))
        return Section(self, value, spec, keypath)


class Checked:
    """The raw keys and values of a checked table (``data``), for what a loader reads in its own way."""

    data: dict[str, Any]

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self.data.items())


@dataclass
class Section(Checked):
    """A checked table: its declared keys read with their types, errors located at each key."""

    reader: Reader
    data: dict[str, Any]
    spec: Table
    keypath: KeyPath

    def at(self, *keys: str | int) -> KeyPath:
        return (*self.keypath, *keys)

    def where(self, *keys: str | int) -> Location:
        return self.reader.where(self.at(*keys))

    def fail(self, keys: tuple[str | int, ...], what: str, fix: str) -> ManifestError:
        """An error at ``keys`` below this table (``()`` for the table itself)."""
        return self.reader.fail(self.at(*keys), what, fix)

    def field(self, key: str, kind: str) -> Field:
        spec = self.spec.values if self.spec.values is not None else self.spec.fields.get(key)
        if spec is None or spec.type != kind:
            raise TypeError(f"{key!r} is not declared as a {kind} of {self.spec.what or self.keypath}")  # a loader bug
        return spec

    def _wrong(self, spec: Field, key: str, what: str, fix: str) -> ManifestError:
        if spec.error:
            what, fix = spec.error
        return self.fail((key,), what, fix)

    # -- typed values -----------------------------------------------------------------------------------
    def string(self, key: str) -> str:
        spec = self.field(key, "string")
        value = self.data.get(key)
        if value is None:
            if not self.reader.style.missing_reads_empty:
                if spec.required:
                    raise self.fail((), f"missing '{key}'", f'add {key} = "…"')
                return "" if spec.default is None else str(spec.default)
            value = ""
        if not isinstance(value, str) or ((spec.nonempty or spec.required) and not value.strip()):
            said = spec.nonempty or spec.required or self.reader.style.strings_said_nonempty
            raise self._wrong(spec, key, f"'{key}' must be {'a non-empty string' if said else 'a string'}", f'write {key} = "…"')
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        spec = self.field(key, "strings")
        if key not in self.data and spec.required:
            raise self.fail((), f"missing '{key}'", f'add {key} = ["…"]')
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(spec, key, f"'{key}' must be a list of strings", f'write {key} = ["…"]')
        return tuple(value)

    def integer(self, key: str) -> int:
        spec = self.field(key, "integer")
        value = self.data.get(key)
        if value is None and not spec.required:
            return 0 if spec.default is None else int(spec.default)
        if value is None and spec.error is None:
            raise self.fail((), f"missing '{key}'", f"add {key} = …")
        if not isinstance(value, int) or isinstance(value, bool) or (spec.minimum is not None and value < spec.minimum):
            limit = f" ≥ {spec.minimum}" if spec.minimum is not None else ""
            raise self._wrong(spec, key, f"'{key}' must be an integer{limit}", f"write {key} = {spec.minimum or 1}")
        return value

    def boolean(self, key: str) -> bool:
        spec = self.field(key, "boolean")
        value = self.data.get(key, bool(spec.default))
        if not isinstance(value, bool):
            raise self._wrong(spec, key, f"'{key}' must be true or false", f"write {key} = true or {key} = false")
        return value

    def table(self, key: str, default: Any = None, what: str | None = None) -> Section:
        spec = self.field(key, "table")
        assert spec.table is not None
        value = self.data.get(key, {} if default is None else default)
        return self.reader.table(value, spec.table, self.at(key), what)

    def tables(self, key: str) -> Iterator[Section]:
        """Each element of an array of tables (``[[core.components]]``), checked against its declaration."""
        spec = self.field(key, "tables")
        assert spec.table is not None
        value = self.data.get(key, [])
        if not isinstance(value, list):
            raise self.fail((key,), f"{key} must be an array of tables", f"write [[{'.'.join(map(str, self.at(key)))}]]")
        for index, item in enumerate(value):
            yield self.reader.table(item, spec.table, self.at(key, index))
