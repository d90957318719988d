"""A small YAML writer for generated workflows: block style, every key and string double-quoted as JSON.

Cairn has no YAML dependency, and a workflow is plain data: dicts, lists, strings, numbers and booleans.
JSON's quoting is valid YAML, so no key or value is ever read as something else (``on`` as a boolean in
YAML 1.1, ``3.10`` as a float, a ``#`` as a comment). A multi-line string (a ``run:`` script) is written as a
literal block so the workflow stays readable. Comments are whole lines, attached to a mapping key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

Comments = Mapping[str, Sequence[str]]


def dump(value: Mapping[str, Any], comments: Mapping[str, Comments] | None = None, header: Sequence[str] = ()) -> str:
    """``value`` as YAML; ``comments`` maps a dotted key path (``jobs.sdk``) to the lines written above that key."""
    lines = [f"# {line}".rstrip() for line in header]
    _mapping(value, 0, "", comments or {}, lines)
    return "\n".join(lines) + "\n"


def _mapping(value: Mapping[str, Any], indent: int, path: str, comments: Mapping[str, Any], lines: list[str]) -> None:
    pad = " " * indent
    for key, item in value.items():
        here = f"{path}.{key}" if path else str(key)
        lines.extend(f"{pad}# {line}".rstrip() for line in comments.get(here, ()))
        head = f"{pad}{_scalar(str(key))}:"
        if isinstance(item, Mapping) and item:
            lines.append(head)
            _mapping(item, indent + 2, here, comments, lines)
        elif isinstance(item, list | tuple) and item:
            lines.append(head)
            _sequence(item, indent + 2, here, comments, lines)
        else:
            lines.append(f"{head} {_inline(item, indent + 2)}")


def _sequence(items: Sequence[Any], indent: int, path: str, comments: Mapping[str, Any], lines: list[str]) -> None:
    pad = " " * indent
    for n, item in enumerate(items):
        if isinstance(item, Mapping) and item:
            nested: list[str] = []
            _mapping(item, indent + 2, f"{path}[{n}]", comments, nested)
            lines.append(f"{pad}- {nested[0].lstrip()}")
            lines.extend(nested[1:])
        elif isinstance(item, list | tuple) and item:
            raise TypeError("a list directly inside a list is not written (workflows have none)")
        else:
            lines.append(f"{pad}- {_inline(item, indent + 2)}")


def _inline(value: Any, indent: int) -> str:
    if isinstance(value, Mapping | list | tuple):
        return "{}" if isinstance(value, Mapping) else "[]"  # only empty ones are written inline
    if isinstance(value, str) and "\n" in value.rstrip("\n") and _block_safe(value):
        pad = " " * indent
        return "|-\n" + "\n".join(f"{pad}{line}" if line else "" for line in value.rstrip("\n").split("\n"))
    return _scalar(value)


def _block_safe(text: str) -> bool:
    """A literal block keeps text as is, except that the first line sets the indentation and trailing spaces blur."""
    lines = text.rstrip("\n").split("\n")
    return not lines[0].startswith((" ", "\t")) and all(line == line.rstrip() for line in lines)


def _scalar(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float | str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")
