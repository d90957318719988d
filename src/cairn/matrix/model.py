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

from cairn.errors import InputError, UrlError
from cairn.model import json_reader
from cairn.model.reader import Field, Table
from cairn.remote.url import read_url

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
    requires_python: str = ""  # the wheel's METADATA Requires-Python ("" when it states none)


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
class Previous:
    """The release a channel served before this one, and the repository key of ``cairn diff`` between the two."""

    version: str
    diff: str  # staging/<version>/diff-from-<previous>.json (``diff_key``)


def diff_key(version: str, previous: str) -> str:
    """Where the diff from ``previous`` to ``version`` is published, relative to the repository root."""
    return f"staging/{version}/diff-from-{previous}.json"


@dataclass(frozen=True)
class Release:
    name: str
    version: str
    channel: str
    source_date_epoch: int
    manifest_sha256: str = ""
    required_gates: tuple[tuple[str, tuple[str, ...]], ...] = ()  # channel -> gates that must pass
    previous: Previous | None = None  # a channel's matrix, once the channel served an earlier release
    # where users fetch from, as the publish named it (``cairn publish --public-url/--registry``): the repository
    # root pip reads (the cells' index URLs hang off it) and the registry the images were pushed to; "" = unnamed
    base_url: str = ""
    registry: str = ""


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
        release: dict[str, Any] = {
            "name": self.release.name, "version": self.release.version, "channel": self.release.channel,
            "source_date_epoch": self.release.source_date_epoch, "manifest_sha256": self.release.manifest_sha256,
            "required_gates": {ch: list(g) for ch, g in self.release.required_gates},
        }
        if self.release.previous is not None:
            release["previous"] = {"version": self.release.previous.version, "diff": self.release.previous.diff}
        for key in ("base_url", "registry"):  # written only when named, so a matrix without them is unchanged
            if getattr(self.release, key):
                release[key] = getattr(self.release, key)
        return {"schema": self.schema, "release": release, "cells": [_cell_dict(c) for c in sorted(self.cells, key=lambda c: c.id)]}

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
        "wheels": [{"filename": w.filename, "url": w.url, "sha256": w.sha256, "size": w.size,
                    **({"requires_python": w.requires_python} if w.requires_python else {})} for w in c.wheels],
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
    return parse_matrix(_read(where), where)


def _read(where: str) -> str:
    try:
        return read_url(where, timeout=30).decode()
    except UrlError as exc:
        raise InputError(where, f"cannot read the matrix ({exc.detail})", "check the path or URL") from None


FIX = "fetch the matrix again; it must be the file cairn publish wrote"
_RANGE = Table({"minimum": Field("string"), "below": Field("string"), "note": Field("string")}, what="version range")
REQUIREMENTS = Field("table", table=Table({"driver_name": Field("string", default="amdgpu"),  # a cell's, also in the bundle
                                           "driver": Field("table", table=_RANGE), "kernel": Field("table", table=_RANGE)}))
_TEXT = Field("string", required=True, nonempty=True)
_STATUS = Field("string", required=True, enum=GATE_STATUSES)
_CHANNEL = Field("string", required=True, enum=CHANNELS)
CELL = Table({
    "id": Field("string", doc="release/gfx_target/os/pyX.Y/framework-version, checked against the fields"),
    "release": _TEXT, "channel": _CHANNEL, "gfx_target": _TEXT, "family": _TEXT, "products": Field("strings"),
    "os": _TEXT, "python": _TEXT,
    "framework": Field("table", required=True, table=Table({"name": _TEXT, "version": _TEXT})),
    "index_url": Field("string"),
    "wheels": Field("tables", table=Table({
        "filename": _TEXT, "url": _TEXT, "size": Field("integer"), "requires_python": Field("string"),
        "sha256": Field("string", required=True, pattern=_HEX64.pattern, doc="64 lower-case hex digits")})),
    "images": Field("tables", table=Table({
        "reference": _TEXT, "digest": Field("string", required=True, pattern=_DIGEST.pattern, doc="sha256:<64 hex>")})),
    "gates": Field("tables", table=Table({"gate": _TEXT, "status": _STATUS, "reason": Field("string")})),
    "requirements": REQUIREMENTS, "partial": Field("strings"),
}, what="cell")
MATRIX = Table({
    "schema": Field("string", doc=SCHEMA_ID),
    "release": Field("table", required=True, table=Table({
        "name": _TEXT, "version": _TEXT, "channel": _CHANNEL, "source_date_epoch": Field("integer", required=True),
        "manifest_sha256": Field("string"),
        "required_gates": Field("table", table=Table({ch: Field("strings") for ch in CHANNELS})),
        "previous": Field("table", table=Table({"version": _TEXT, "diff": _TEXT}, what="release.previous"),
                          doc="the release this channel served before, and where the diff from it is published"),
        "base_url": Field("string", doc="the repository root users fetch from (http(s)://…/), as cairn publish named it"),
        "registry": Field("string", doc="the registry the release's images were pushed to, as cairn publish named it"),
    })),
    "cells": Field("tables", table=CELL),
}, what="matrix")


def parse_matrix(text: str | bytes, where: str, fix: str = FIX) -> Matrix:
    """The matrix in ``text`` (read from ``where``): not JSON, or not a matrix, is one InputError naming ``where``."""
    return from_dict(json_reader.parse(text, where, "matrix", fix), where, fix)


def from_dict(data: Any, where: str = "<matrix>", fix: str = FIX) -> Matrix:
    """A parsed matrix document checked against ``MATRIX`` (keys, JSON types, choices, digests, versions)."""
    top = json_reader.JsonReader(data, where, fix).root(MATRIX)
    if top.get("schema") != SCHEMA_ID:
        raise InputError(where, f"schema is {top.get('schema')!r}, not {SCHEMA_ID!r}", "use a cairn that reads this matrix version")
    rel = top.table("release")
    gates = rel.table("required_gates")
    release = Release(
        name=rel.string("name"), version=_version(rel, "version"), channel=rel.string("channel"),
        source_date_epoch=rel.integer("source_date_epoch"), manifest_sha256=rel.string("manifest_sha256"),
        required_gates=tuple((ch, gates.strings(ch)) for ch in sorted(gates)),
        previous=_previous(rel), base_url=_base_url(rel), registry=rel.string("registry"),
    )
    return Matrix(release, tuple(_cell(c) for c in top.tables("cells")))


def _base_url(rel: json_reader.JsonSection) -> str:
    """``release.base_url``: an http(s) URL ending in ``/`` — a ``file://`` URL names one machine's disk, never
    a place users can fetch from."""
    value = rel.string("base_url")
    if value and not (value.startswith(("https://", "http://")) and value.endswith("/")):
        raise rel.fail("base_url", f"is {value!r}, not an http(s):// URL ending in /", "publish again with --public-url https://…")
    return value


def _previous(rel: json_reader.JsonSection) -> Previous | None:
    """``release.previous``: its diff must be the one key ``diff_key`` gives (a link on the matrix page, fetched
    by ``cairn matrix``), never a path of the document's choosing."""
    if "previous" not in rel:
        return None
    prev = rel.table("previous")
    previous = Previous(_version(prev, "version"), prev.string("diff"))
    expected = diff_key(rel.string("version"), previous.version)
    if previous.diff != expected:
        raise prev.fail("diff", f"is {previous.diff!r}, not {expected!r}", "regenerate the matrix")
    return previous


def _cell(c: json_reader.JsonSection) -> Cell:
    fw = c.table("framework")
    req = c.table("requirements")

    def rng(key: str) -> VersionRange:
        t = req.table(key)
        for end in ("minimum", "below"):
            if t.string(end):
                _version(t, end, release_only=True)
        return VersionRange(t.string("minimum"), t.string("below"), t.string("note"))

    cell = Cell(
        release=_version(c, "release"), channel=c.string("channel"), gfx_target=c.string("gfx_target"), family=c.string("family"),
        products=c.strings("products"), os=c.string("os"), python=c.string("python"),
        framework=Framework(fw.string("name"), fw.string("version")), index_url=c.string("index_url"),
        wheels=tuple(WheelFile(w.string("filename"), w.string("url"), w.string("sha256"), w.integer("size"), w.string("requires_python"))
                     for w in c.tables("wheels")),
        images=tuple(ImageRef(i.string("reference"), i.string("digest")) for i in c.tables("images")),
        gates=tuple(GateResult(g.string("gate"), g.string("status"), g.string("reason")) for g in c.tables("gates")),
        requirements=Requirements(rng("driver"), rng("kernel"), req.string("driver_name")),
        partial=c.strings("partial"),
    )
    if "id" in c and c.string("id") != cell.id:
        raise InputError(c.reader.where, f"{c.label}.id is {c.get('id')!r} but its fields say {cell.id!r}", "regenerate the matrix")
    return cell


def _version(t: json_reader.JsonSection, key: str, release_only: bool = False) -> str:
    value = t.string(key)
    try:
        Version(value) if not release_only else _release_part(value)
    except (InvalidVersion, ValueError):
        raise t.fail(key, f"is {value!r}, not a version", "write e.g. 5.2.3") from None
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
