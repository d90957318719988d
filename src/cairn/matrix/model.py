"""The compatibility matrix model: what a release ships for which GPU, OS, Python and framework.

One JSON document per release replaces the hand-edited tables: every *cell* is one combination of
release × gfx target × OS × Python × framework, and says where its wheels and images are (with digests),
which gates ran on it and how they ended, and which amdgpu driver and Linux kernel it needs. The publisher
writes it (a signed TUF target), ``cairn doctor`` and ``cairn verify`` read it, and the HTML and Markdown
pages are rendered from it. ``schema.json`` next to this module is the JSON Schema of the document; the
loader here is strict in the same way (unknown keys and bad values are errors, never ignored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from cairn import io
from cairn.errors import InputError, UrlError

SCHEMA_ID = "cairn.matrix/v1"
GATE_STATUSES = ("passed", "failed", "not-run")
CHANNELS = ("dev", "nightly", "prerelease", "stable")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def schema_path() -> Path:
    """The JSON Schema of the matrix document (shipped inside the package)."""
    return Path(__file__).with_name("schema.json")


@dataclass(frozen=True)
class VersionRange:
    """``minimum <= version < below`` (either end open when empty), e.g. amdgpu 6.0 ≤ v < 6.5."""

    minimum: str = ""
    below: str = ""
    note: str = ""

    def contains(self, version: str) -> bool:
        """Whether ``version`` (e.g. a kernel's ``6.1.0-18-amd64``) lies in the range; release part only."""
        probe = _release_part(version)
        if self.minimum and probe < _release_part(self.minimum):
            return False
        return not (self.below and probe >= _release_part(self.below))

    def __str__(self) -> str:
        parts = [f">={self.minimum}"] if self.minimum else []
        parts += [f"<{self.below}"] if self.below else []
        return ",".join(parts) or "any"


@dataclass(frozen=True)
class Requirements:
    """Host requirements of a cell: the amdgpu kernel driver (KFD) and the Linux kernel."""

    driver: VersionRange = VersionRange()  # amdgpu driver (e.g. amdgpu-dkms / upstream KFD) version range
    kernel: VersionRange = VersionRange()  # Linux kernel release range (uname -r)
    driver_name: str = "amdgpu"


@dataclass(frozen=True)
class Framework:
    name: str
    version: str


@dataclass(frozen=True)
class WheelFile:
    """One published wheel: ``url`` is relative to the repository root or absolute."""

    filename: str
    url: str
    sha256: str
    size: int = 0


@dataclass(frozen=True)
class ImageRef:
    """A container image by reference (``registry/repo:tag``) and manifest digest (``sha256:…``)."""

    reference: str
    digest: str

    @property
    def pinned(self) -> str:
        """``repo@sha256:…`` — the only form a user should pull."""
        return f"{self.reference.rsplit(':', 1)[0] if _has_tag(self.reference) else self.reference}@{self.digest}"


@dataclass(frozen=True)
class GateResult:
    gate: str
    status: str  # passed | failed | not-run
    reason: str = ""


@dataclass(frozen=True)
class Cell:
    """One shippable combination and everything known about it."""

    release: str
    channel: str
    gfx_target: str
    family: str
    products: tuple[str, ...]
    os: str
    python: str
    framework: Framework
    index_url: str = ""
    wheels: tuple[WheelFile, ...] = ()
    images: tuple[ImageRef, ...] = ()
    gates: tuple[GateResult, ...] = ()
    requirements: Requirements = Requirements()
    partial: tuple[str, ...] = ()  # libraries the audit shows were built without this target's code

    @property
    def complete(self) -> bool:
        """False for a *partial* cell: some shipped library has no code for its target (named in ``partial``)."""
        return not self.partial

    @property
    def id(self) -> str:
        """Stable cell name, e.g. ``5.2.3/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0``."""
        return f"{self.release}/{self.gfx_target}/{self.os}/py{self.python}/{self.framework.name}-{self.framework.version}"

    def gate(self, name: str) -> GateResult:
        """The result of gate ``name``; a gate that never reported counts as not run."""
        return next((g for g in self.gates if g.gate == name), GateResult(name, "not-run", "no result recorded"))

    def passed(self, required: Iterable[str]) -> bool:
        return all(self.gate(name).status == "passed" for name in required)

    def blocking(self, required: Iterable[str]) -> list[GateResult]:
        """The required gates that did not pass, in order — why this cell may not be promoted."""
        return [self.gate(name) for name in required if self.gate(name).status != "passed"]


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    channel: str
    source_date_epoch: int
    manifest_sha256: str = ""
    required_gates: tuple[tuple[str, tuple[str, ...]], ...] = ()  # channel -> gates that must pass


@dataclass(frozen=True)
class Matrix:
    release: Release
    cells: tuple[Cell, ...] = ()
    schema: str = SCHEMA_ID

    def required_gates(self, channel: str) -> tuple[str, ...]:
        return dict(self.release.required_gates).get(channel, ())

    def for_target(self, gfx_target: str) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.gfx_target == gfx_target)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "release": {
                "name": self.release.name, "version": self.release.version, "channel": self.release.channel,
                "source_date_epoch": self.release.source_date_epoch, "manifest_sha256": self.release.manifest_sha256,
                "required_gates": {ch: list(g) for ch, g in self.release.required_gates},
            },
            "cells": [_cell_dict(c) for c in sorted(self.cells, key=lambda c: c.id)],
        }

    def to_json(self) -> str:
        """Canonical bytes (sorted keys, fixed indent, trailing newline): a TUF target hashes these."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _cell_dict(c: Cell) -> dict[str, Any]:
    rng = lambda r: {"minimum": r.minimum, "below": r.below, "note": r.note}  # noqa: E731
    return {
        "id": c.id, "release": c.release, "channel": c.channel, "gfx_target": c.gfx_target, "family": c.family,
        "products": list(c.products), "os": c.os, "python": c.python,
        "framework": {"name": c.framework.name, "version": c.framework.version},
        "index_url": c.index_url,
        "wheels": [{"filename": w.filename, "url": w.url, "sha256": w.sha256, "size": w.size} for w in c.wheels],
        "images": [{"reference": i.reference, "digest": i.digest} for i in c.images],
        "gates": [{"gate": g.gate, "status": g.status, "reason": g.reason} for g in c.gates],
        "partial": list(c.partial),
        "requirements": {"driver_name": c.requirements.driver_name, "driver": rng(c.requirements.driver),
                         "kernel": rng(c.requirements.kernel)},
    }


# -- loading -------------------------------------------------------------------------------------------------
def load_matrix(path_or_url: str | Path) -> Matrix:
    """Read a matrix from a file path, ``file://``, ``http(s)://`` or ``s3://`` URL (``cairn.io``); every problem
    is an InputError.

    This checks structure only. Whether the bytes are the signed ones is ``cairn verify``'s job
    (``cairn.sign.verify``), which a caller that fetched the matrix from a server should use instead.
    """
    where = str(path_or_url)
    text = _read(where)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(where, f"not JSON ({exc})", "fetch the matrix again; it must be the file cairn publish wrote") from None
    return from_dict(data, where)


def _read(where: str) -> str:
    try:
        return io.read_url(where, timeout=30).decode()
    except UrlError as exc:
        raise InputError(where, f"cannot read the matrix ({exc.detail})", "check the path or URL") from None


def from_dict(data: Any, where: str = "<matrix>") -> Matrix:
    r = _Reader(where)
    top = r.table(data, "", {"schema", "release", "cells"})
    if top.get("schema") != SCHEMA_ID:
        raise InputError(where, f"schema is {top.get('schema')!r}, not {SCHEMA_ID!r}", "use a cairn that reads this matrix version")
    rel = r.table(top.get("release"), "release", {"name", "version", "channel", "source_date_epoch", "manifest_sha256", "required_gates"})
    gates = r.table(rel.get("required_gates", {}), "release.required_gates", set(CHANNELS))
    release = Release(
        name=r.text(rel, "name", "release"), version=r.version(rel, "version", "release"),
        channel=r.choice(rel, "channel", "release", CHANNELS), source_date_epoch=r.integer(rel, "source_date_epoch", "release"),
        manifest_sha256=str(rel.get("manifest_sha256", "")),
        required_gates=tuple((ch, tuple(r.strings(gates, ch, "release.required_gates"))) for ch in sorted(gates)),
    )
    cells = []
    raw_cells = top.get("cells", [])
    if not isinstance(raw_cells, list):
        raise InputError(where, "cells must be a list", "write \"cells\": [ … ]")
    for n, raw in enumerate(raw_cells):
        cells.append(_cell(r, raw, f"cells[{n}]"))
    return Matrix(release, tuple(cells))


_CELL_KEYS = {"id", "release", "channel", "gfx_target", "family", "products", "os", "python", "framework",
              "index_url", "wheels", "images", "gates", "requirements", "partial"}


def _cell(r: _Reader, raw: Any, at: str) -> Cell:
    c = r.table(raw, at, _CELL_KEYS)
    fw = r.table(c.get("framework"), f"{at}.framework", {"name", "version"})
    wheels = []
    for n, w in enumerate(r.list(c, "wheels", at)):
        w = r.table(w, f"{at}.wheels[{n}]", {"filename", "url", "sha256", "size"})
        wheels.append(WheelFile(r.text(w, "filename", f"{at}.wheels[{n}]"), r.text(w, "url", f"{at}.wheels[{n}]"),
                                r.pattern(w, "sha256", f"{at}.wheels[{n}]", _HEX64, "64 lower-case hex digits"),
                                r.integer(w, "size", f"{at}.wheels[{n}]") if "size" in w else 0))
    images = []
    for n, i in enumerate(r.list(c, "images", at)):
        i = r.table(i, f"{at}.images[{n}]", {"reference", "digest"})
        images.append(ImageRef(r.text(i, "reference", f"{at}.images[{n}]"),
                               r.pattern(i, "digest", f"{at}.images[{n}]", _DIGEST, "sha256:<64 hex>")))
    gates = []
    for n, g in enumerate(r.list(c, "gates", at)):
        g = r.table(g, f"{at}.gates[{n}]", {"gate", "status", "reason"})
        gates.append(GateResult(r.text(g, "gate", f"{at}.gates[{n}]"), r.choice(g, "status", f"{at}.gates[{n}]", GATE_STATUSES),
                                str(g.get("reason", ""))))
    req = r.table(c.get("requirements", {}), f"{at}.requirements", {"driver_name", "driver", "kernel"})

    def rng(key: str) -> VersionRange:
        t = r.table(req.get(key, {}), f"{at}.requirements.{key}", {"minimum", "below", "note"})
        for name in ("minimum", "below", "note"):
            if not isinstance(t.get(name, ""), str):
                raise r.fail(f"{at}.requirements.{key}.{name}", "must be a string", f"write \"{name}\": \"…\"")
        for end in ("minimum", "below"):
            if t.get(end):
                r.version(t, end, f"{at}.requirements.{key}", release_only=True)
        return VersionRange(t.get("minimum", ""), t.get("below", ""), t.get("note", ""))

    cell = Cell(
        release=r.version(c, "release", at), channel=r.choice(c, "channel", at, CHANNELS),
        gfx_target=r.text(c, "gfx_target", at), family=r.text(c, "family", at),
        products=tuple(r.strings(c, "products", at)), os=r.text(c, "os", at), python=r.text(c, "python", at),
        framework=Framework(r.text(fw, "name", f"{at}.framework"), r.text(fw, "version", f"{at}.framework")),
        index_url=str(c.get("index_url", "")), wheels=tuple(wheels), images=tuple(images), gates=tuple(gates),
        requirements=Requirements(rng("driver"), rng("kernel"), str(req.get("driver_name", "amdgpu"))),
        partial=tuple(r.strings(c, "partial", at)) if "partial" in c else (),
    )
    if "id" in c and c["id"] != cell.id:
        raise InputError(r.where, f"{at}.id is {c['id']!r} but its fields say {cell.id!r}", "regenerate the matrix")
    return cell


class _Reader:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, at: str, what: str, fix: str) -> InputError:
        return InputError(self.where, f"{at or 'top level'}: {what}", fix)

    def table(self, value: Any, at: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(at, "must be an object", "write { … }")
        unknown = sorted(set(value) - allowed)
        if unknown:
            from cairn.errors import did_you_mean

            raise self.fail(at, f"unknown key '{unknown[0]}'", did_you_mean(unknown[0], allowed, "keys"))
        return value

    def text(self, t: dict[str, Any], key: str, at: str) -> str:
        value = t.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{at}.{key}".lstrip("."), "must be a non-empty string", f"set \"{key}\"")
        return value

    def strings(self, t: dict[str, Any], key: str, at: str) -> list[str]:
        value = t.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{at}.{key}", "must be a list of strings", f"write \"{key}\": [\"…\"]")
        return value

    def list(self, t: dict[str, Any], key: str, at: str) -> list[Any]:
        value = t.get(key, [])
        if not isinstance(value, list):
            raise self.fail(f"{at}.{key}", "must be a list", f"write \"{key}\": [ … ]")
        return value

    def integer(self, t: dict[str, Any], key: str, at: str) -> int:
        value = t.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"{at}.{key}", "must be an integer", f"set \"{key}\" to a number")
        return value

    def choice(self, t: dict[str, Any], key: str, at: str, choices: tuple[str, ...]) -> str:
        value = t.get(key)
        if value not in choices:
            raise self.fail(f"{at}.{key}", f"{value!r} is not one of {', '.join(choices)}", f"use one of {', '.join(choices)}")
        return str(value)

    def pattern(self, t: dict[str, Any], key: str, at: str, rx: re.Pattern[str], what: str) -> str:
        value = t.get(key)
        if not isinstance(value, str) or not rx.match(value):
            raise self.fail(f"{at}.{key}", f"{value!r} is not {what}", f"write {key} as {what}")
        return value

    def version(self, t: dict[str, Any], key: str, at: str, release_only: bool = False) -> str:
        value = self.text(t, key, at)
        try:
            Version(value) if not release_only else _release_part(value)
        except (InvalidVersion, ValueError):
            raise self.fail(f"{at}.{key}", f"{value!r} is not a version", "write e.g. 5.2.3") from None
        return value


def _release_part(version: str) -> tuple[int, ...]:
    """Leading dotted numbers of a version (``6.1.0-18-amd64`` → (6, 1, 0)); ValueError if none."""
    match = re.match(r"^\s*v?([0-9]+(?:\.[0-9]+)*)", version)
    if not match:
        raise ValueError(f"'{version}' has no numeric version")
    parts = tuple(int(p) for p in match[1].split("."))
    while len(parts) > 1 and parts[-1] == 0:
        parts = parts[:-1]
    return parts


def _has_tag(reference: str) -> bool:
    return ":" in reference.rsplit("/", 1)[-1]
