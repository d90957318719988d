"""The release bundle: everything the publisher needs, as one directory other stages write into.

Layout::

    bundle.json          release, build facts, cells and the artifacts (below) — schema cairn.bundle/v1
    files/...            the artifacts themselves (wheels, PEP 658 sidecars, rendered Dockerfiles, …)
    gates/*.json         gate results as the gates stage writes them:
                         {"image_digest", "gate", "status": passed|failed|not-run, "reason", "evidence",
                          optional "gfx_target" and "framework"} — matched to cells by image digest, or by
                         gfx target (and framework, when given)

Each artifact in ``bundle.json``: ``path`` (under files/), ``kind`` (wheel | metadata | dockerfile | source | other;
a *source* is a pinned input kept by sha256 at ``sources/sha256/<digest>``, published unversioned as a mirror),
``sha256`` (checked before anything is uploaded), ``content_type``, ``cells`` (gfx targets it belongs
to, empty = every cell) and ``framework`` (only that framework's cells; empty = all, e.g. SDK wheels). Images are references + digests in the cells; their bytes stay in the registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import CheckFailed, InputError
from cairn.matrix.model import (
    CHANNELS,
    GATE_STATUSES,
    REQUIREMENTS,
    GateResult,
    ImageRef,
    Requirements,
    VersionRange,
)
from cairn.model import json_reader
from cairn.model.build_facts import BuildFacts
from cairn.model.reader import Field, Table
from cairn.names import inside, safe_name, safe_relpath

SCHEMA = "cairn.bundle/v1"
KINDS = ("wheel", "metadata", "dockerfile", "source", "other")
INDEXES = ("family", "target")  # or none: every index of its cells
_RANK = {"passed": 0, "not-run": 1, "failed": 2}


@dataclass(frozen=True)
class Artifact:
    path: str
    kind: str
    sha256: str
    content_type: str = "application/octet-stream"
    cells: tuple[str, ...] = ()  # gfx targets; empty = all
    family: str = ""
    recipe: str = ""
    framework: str = ""  # only the cells of this framework ("" = every cell of its targets, e.g. SDK wheels)
    # which pip indexes list it: "" every index of its cells, "family" the family's alone (a target's own index
    # serves it in another form), "target" its target's own index alone (cairn.publish.indexes)
    index: str = ""

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class BundleCell:
    gfx_target: str
    family: str
    os: str
    python: str
    framework: str
    framework_version: str
    images: tuple[ImageRef, ...] = ()
    requirements: Requirements = field(default_factory=Requirements)
    partial: tuple[str, ...] = ()  # libraries shipped without this target's code (the audit says so)


@dataclass(frozen=True)
class GateRecord:
    result: GateResult
    image_digest: str = ""
    gfx_target: str = ""
    evidence: str = ""
    framework: str = ""  # with gfx_target: only that framework's cells ("" = every cell of the target)


@dataclass(frozen=True)
class Bundle:
    root: Path
    release: str
    version: str
    channel: str
    source_date_epoch: int
    manifest_sha256: str
    required_gates: tuple[tuple[str, tuple[str, ...]], ...]
    facts: BuildFacts
    artifacts: tuple[Artifact, ...]
    cells: tuple[BundleCell, ...]
    gates: tuple[GateRecord, ...] = field(default=())

    def file(self, artifact: Artifact) -> Path:
        return self.root / "files" / artifact.path

    def gates_for(self, cell: BundleCell) -> tuple[GateResult, ...]:
        digests = {i.digest for i in cell.images}
        found: dict[str, GateResult] = {}
        for record in self.gates:
            by_target = record.gfx_target == cell.gfx_target and record.framework in ("", cell.framework)
            if (record.image_digest and record.image_digest in digests) or by_target:
                prior = found.get(record.result.gate)
                # a gate passes for a cell only if it passed on every image of the cell: failed > not-run > passed
                if prior is None or _RANK[record.result.status] > _RANK[prior.status]:
                    found[record.result.gate] = record.result
        return tuple(found[name] for name in sorted(found))

    def artifacts_for(self, cell: BundleCell) -> tuple[Artifact, ...]:
        return tuple(a for a in self.artifacts if (not a.cells or cell.gfx_target in a.cells)
                     and a.framework in ("", cell.framework))

    def check_files(self) -> None:
        """Every artifact exists and has the sha256 the bundle claims — before a single byte is uploaded."""
        for artifact in self.artifacts:
            path = self.file(artifact)
            if not path.is_file():
                raise InputError(self.root / "bundle.json", f"artifact {artifact.path} is missing from files/", "rebuild the bundle")
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != artifact.sha256:
                raise CheckFailed(f"{path}: sha256 is {digest}, bundle.json says {artifact.sha256} — the bundle was modified; rebuild it")


FIX = "regenerate the bundle (cairn build writes it)"
GATE_FIX = "rerun the gate or delete the file"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
# PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl, and PEP 825's -{variant label}
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?-[^-]+(?:-[0-9][^-]*)?-[^-]+-[^-]+-[^-]+"
                         r"(?:-[0-9a-z._]{1,16})?\.whl$")
_REQUIRED = Field("string", required=True)
ARTIFACT = Table({
    "path": _REQUIRED, "kind": Field("string", required=True, enum=KINDS),
    "sha256": Field("string", required=True, pattern=_HEX64.pattern, doc="64 lower-case hex digits"),
    "content_type": Field("string", default="application/octet-stream"), "cells": Field("strings"),
    "family": Field("string"), "recipe": Field("string"), "framework": Field("string"),
    "index": Field("string", enum=INDEXES),
}, what="artifact")
CELL = Table({
    "gfx_target": _REQUIRED, "family": Field("string"), "os": _REQUIRED, "python": _REQUIRED,
    "framework": _REQUIRED, "framework_version": _REQUIRED,
    "images": Field("tables", table=Table({"reference": _REQUIRED, "digest": _REQUIRED})),
    "requirements": REQUIREMENTS, "partial": Field("strings"),
}, what="cell")
BUNDLE = Table({
    "schema": Field("string", doc=SCHEMA),
    "release": Field("table", required=True, table=Table({
        "name": _REQUIRED, "version": _REQUIRED, "channel": Field("string", required=True, enum=CHANNELS),
        "source_date_epoch": Field("integer", required=True), "manifest_sha256": Field("string"),
        "required_gates": Field("table", table=Table(values=Field("strings"))),
    })),
    "builder": Field("table", table=Table({"id": Field("string", default=BuildFacts.builder_id),
                                           "git_commit": Field("string"), "invocation": Field("string")})),
    "pins": Field("table", table=Table(values=Field("string"))),
    "not_built": Field("table", table=Table(values=Field("any"))),  # action -> why it was not built (informational)
    "artifacts": Field("tables", table=ARTIFACT),
    "cells": Field("tables", table=CELL),
}, what="bundle")
GATE = Table({
    "gate": _REQUIRED, "status": Field("string", required=True, enum=GATE_STATUSES), "reason": Field("string"),
    "image_digest": Field("string"), "gfx_target": Field("string"), "framework": Field("string"), "evidence": Field("any"),
}, what="gate result")


def load_bundle(root: Path) -> Bundle:
    """Read and check ``bundle.json`` and ``gates/`` against ``BUNDLE`` and ``GATE`` (``cairn.model.json_reader``:
    every key declared, every field present with its JSON type), and every name that becomes an object key or a
    file path (artifact path and family, version, gfx target, cell family) checked by ``cairn.names`` — a bad
    bundle is one InputError before anything is read from files/."""
    root = Path(root)
    where = root / "bundle.json"
    data = json_reader.load(where, "release bundle", "point at a directory made by cairn bundle or write_bundle()")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise InputError(where, f"schema is {schema!r}, not {SCHEMA}", "regenerate the bundle")
    top = json_reader.JsonReader(data, where, FIX).root(BUNDLE)
    rel = top.table("release")
    version = safe_name(rel.string("version"), where, "release version")
    builder, pins = top.table("builder"), top.table("pins")
    facts = BuildFacts(
        release=rel.string("name"), version=version, manifest_sha256=rel.string("manifest_sha256"),
        source_date_epoch=rel.integer("source_date_epoch"), builder_id=builder.string("id"),
        pins=tuple(sorted((str(k), pins.string(k)) for k in pins)), git_commit=builder.string("git_commit"),
        invocation=builder.string("invocation"),
    )
    artifacts = [_artifact(raw, root) for raw in top.tables("artifacts")]
    cells = [_cell(raw) for raw in top.tables("cells")]
    gates = [_gate(path) for path in sorted((root / "gates").glob("*.json"))]
    gate_lists = rel.table("required_gates")
    required = tuple((ch, gate_lists.strings(ch)) for ch in sorted(gate_lists))
    return Bundle(root, facts.release, version, rel.string("channel"), facts.source_date_epoch, facts.manifest_sha256,
                  required, facts, tuple(artifacts), tuple(cells), tuple(gates))


def _artifact(raw: json_reader.JsonSection, root: Path) -> Artifact:
    where, ctx = raw.reader.where, raw.label
    path = safe_relpath(raw.string("path"), where, f"{ctx} path")
    kind, sha = raw.string("kind"), raw.string("sha256")
    family = raw.string("family")
    if family:
        safe_name(family, where, f"artifact {path}: family")
    name = path.rsplit("/", 1)[-1]
    if kind == "source" and path != f"sources/sha256/{sha}":
        raise InputError(where, f"artifact {path}: a source is published at sources/sha256/<its sha256>, not here",
                         f"name it sources/sha256/{sha}")
    if kind == "wheel" and not _WHEEL_NAME.match(name):
        raise InputError(where, f"artifact {path}: {name!r} is not a wheel file name (name-version-python-abi-platform.whl)",
                         "put the wheel into files/ under the name it was built with")
    file = root / "files" / path
    if os.path.lexists(file) and not inside(root / "files", file):
        raise InputError(where, f"artifact {path} resolves outside the bundle's files/ (a symlink out)",
                         "copy the file into files/ instead of linking to it")
    index = raw.string("index")
    if index == "target" and (kind != "wheel" or len(raw.strings("cells")) != 1):
        raise InputError(where, f"artifact {path}: only a wheel of one target's cells can be on that target's index alone",
                         "give it the one gfx target in cells, or drop index")
    return Artifact(path, kind, sha, raw.string("content_type"), raw.strings("cells"), family, raw.string("recipe"),
                    raw.string("framework"), index)


def _cell(raw: json_reader.JsonSection) -> BundleCell:
    where, ctx = raw.reader.where, raw.label
    target = safe_name(raw.string("gfx_target"), where, f"{ctx} gfx_target")
    family = safe_name(raw.string("family") if "family" in raw else target, where, f"{ctx} family")
    images = tuple(ImageRef(i.string("reference"), i.string("digest")) for i in raw.tables("images"))
    req = raw.table("requirements")

    def version_range(key: str) -> VersionRange:
        table = req.table(key)
        return VersionRange(table.string("minimum"), table.string("below"), table.string("note"))

    return BundleCell(target, family, raw.string("os"), raw.string("python"), raw.string("framework"),
                      raw.string("framework_version"), images,
                      Requirements(version_range("driver"), version_range("kernel"), req.string("driver_name")),
                      tuple(safe_name(n, where, f"{ctx} partial library") for n in raw.strings("partial")))


def _gate(path: Path) -> GateRecord:
    g = json_reader.read_file(path, GATE, "gate result", GATE_FIX)
    return GateRecord(GateResult(g.string("gate"), g.string("status"), g.string("reason")),
                      g.string("image_digest"), g.string("gfx_target"),
                      json.dumps(g.any("evidence", ""), sort_keys=True), g.string("framework"))


def write_bundle_json(root: Path, data: dict[str, Any]) -> None:
    """Write ``bundle.json`` (callers copy artifacts into ``files/`` first); computes missing sha256s."""
    for artifact in data.get("artifacts", []):
        if not artifact.get("sha256"):
            artifact["sha256"] = hashlib.sha256((root / "files" / artifact["path"]).read_bytes()).hexdigest()
    data = {"schema": SCHEMA, **data}
    (root / "bundle.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
