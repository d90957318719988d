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
from cairn.matrix.model import CHANNELS, GATE_STATUSES, GateResult, ImageRef, Requirements, VersionRange
from cairn.names import inside, safe_name, safe_relpath
from cairn.sign.provenance import BuildFacts

SCHEMA = "cairn.bundle/v1"
KINDS = ("wheel", "metadata", "dockerfile", "source", "other")
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


def load_bundle(root: Path) -> Bundle:
    """Read and check ``bundle.json`` and ``gates/``: every field present with its type, and every name that
    becomes an object key or a file path (artifact path and family, version, gfx target, cell family)
    checked by ``cairn.names`` — a bad bundle is one InputError before anything is read from files/."""
    root = Path(root)
    where = root / "bundle.json"
    try:
        data = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(where, f"cannot read the release bundle ({exc})", "point at a directory made by cairn bundle or write_bundle()") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise InputError(where, f"schema is {schema!r}, not {SCHEMA}", "regenerate the bundle")
    read = _Fields(where)
    rel = read.table(data, "release")
    version = safe_name(read.text(rel, "version", "release"), where, "release version")
    channel = read.text(rel, "channel", "release")
    if channel not in CHANNELS:
        raise InputError(where, f"unknown channel {channel!r}", f"use one of {', '.join(CHANNELS)}")
    epoch = read.integer(rel, "source_date_epoch", "release")
    builder = read.table(data, "builder", default={})
    pins = read.table(data, "pins", default={})
    facts = BuildFacts(
        release=read.text(rel, "name", "release"), version=version, manifest_sha256=read.text(rel, "manifest_sha256", "release", ""),
        source_date_epoch=epoch, builder_id=read.text(builder, "id", "builder", BuildFacts.builder_id),
        pins=tuple(sorted((str(k), read.text(pins, k, "pins")) for k in pins)), git_commit=read.text(builder, "git_commit", "builder", ""),
        invocation=read.text(builder, "invocation", "builder", ""),
    )
    artifacts = [_artifact(read, raw, n, root) for n, raw in enumerate(read.items(data, "artifacts"))]
    cells = [_cell(read, raw, n) for n, raw in enumerate(read.items(data, "cells"))]
    gates = [_gate(path) for path in sorted((root / "gates").glob("*.json"))]
    gate_lists = read.table(rel, "required_gates", "release", {})
    required = tuple((ch, read.strings(gate_lists, ch, "release.required_gates")) for ch in sorted(gate_lists))
    return Bundle(root, facts.release, version, channel, epoch, facts.manifest_sha256,
                  required, facts, tuple(artifacts), tuple(cells), tuple(gates))


_REQUIRED: Any = object()
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
# PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?-[^-]+(?:-[0-9][^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


class _Fields:
    """Typed access to a JSON document: a missing or mistyped field is an InputError naming it."""

    def __init__(self, where: Path, fix: str = "regenerate the bundle (cairn build writes it)") -> None:
        self.where = where
        self.fix = fix

    def _get(self, obj: dict[str, Any], key: str, context: str, kinds: tuple[type, ...], default: Any, shown: str) -> Any:
        label = f"{context}.{key}" if context else key
        if key not in obj:
            if default is _REQUIRED:
                raise InputError(self.where, f"'{label}' is missing", self.fix)
            return default
        value = obj[key]
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise InputError(self.where, f"'{label}' is {type(value).__name__}, not {shown}", self.fix)
        return value

    def table(self, obj: dict[str, Any], key: str, context: str = "", default: Any = _REQUIRED) -> dict[str, Any]:
        return self._get(obj, key, context, (dict,), default, "an object")

    def text(self, obj: dict[str, Any], key: str, context: str, default: Any = _REQUIRED) -> str:
        return self._get(obj, key, context, (str,), default, "a string")

    def integer(self, obj: dict[str, Any], key: str, context: str) -> int:
        return self._get(obj, key, context, (int,), _REQUIRED, "an integer")

    def strings(self, obj: dict[str, Any], key: str, context: str) -> tuple[str, ...]:
        value = self._get(obj, key, context, (list,), [], "a list of strings")
        if not all(isinstance(v, str) for v in value):
            raise InputError(self.where, f"'{context}.{key}' must be a list of strings", self.fix)
        return tuple(value)

    def items(self, obj: dict[str, Any], key: str, context: str = "") -> list[dict[str, Any]]:
        value = self._get(obj, key, context, (list,), [], "a list")
        for n, item in enumerate(value):
            if not isinstance(item, dict):
                raise InputError(self.where, f"'{context + '.' if context else ''}{key}[{n}]' is {type(item).__name__}, not an object", self.fix)
        return value


def _artifact(read: _Fields, raw: dict[str, Any], n: int, root: Path) -> Artifact:
    where, ctx = read.where, f"artifacts[{n}]"
    path = safe_relpath(read.text(raw, "path", ctx), where, f"{ctx} path")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise InputError(where, f"artifact {path}: kind {kind!r}", f"use one of {', '.join(KINDS)}")
    sha = read.text(raw, "sha256", ctx)
    if not _HEX64.match(sha):
        raise InputError(where, f"artifact {path}: sha256 {sha!r} is not 64 lower-case hex digits", "regenerate the bundle")
    family = read.text(raw, "family", ctx, "")
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
    return Artifact(path, kind, sha, read.text(raw, "content_type", ctx, "application/octet-stream"),
                    read.strings(raw, "cells", ctx), family, read.text(raw, "recipe", ctx, ""), read.text(raw, "framework", ctx, ""))


def _cell(read: _Fields, raw: dict[str, Any], n: int) -> BundleCell:
    where, ctx = read.where, f"cells[{n}]"
    target = safe_name(read.text(raw, "gfx_target", ctx), where, f"{ctx} gfx_target")
    family = safe_name(read.text(raw, "family", ctx, target), where, f"{ctx} family")
    images = tuple(ImageRef(read.text(i, "reference", f"{ctx}.images"), read.text(i, "digest", f"{ctx}.images"))
                   for i in read.items(raw, "images", ctx))
    req = read.table(raw, "requirements", ctx, {})

    def version_range(key: str) -> VersionRange:
        table = read.table(req, key, f"{ctx}.requirements", {})
        rctx = f"{ctx}.requirements.{key}"
        unknown = sorted(set(table) - {"minimum", "below", "note"})
        if unknown:
            raise InputError(where, f"unknown key '{rctx}.{unknown[0]}'", "use minimum, below and note")
        return VersionRange(read.text(table, "minimum", rctx, ""), read.text(table, "below", rctx, ""), read.text(table, "note", rctx, ""))

    return BundleCell(target, family, read.text(raw, "os", ctx), read.text(raw, "python", ctx), read.text(raw, "framework", ctx),
                      read.text(raw, "framework_version", ctx), images,
                      Requirements(version_range("driver"), version_range("kernel"), read.text(req, "driver_name", f"{ctx}.requirements", "amdgpu")),
                      tuple(safe_name(n, where, f"{ctx} partial library") for n in read.strings(raw, "partial", ctx)))


def _gate(path: Path) -> GateRecord:
    try:
        g = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(path, f"cannot read the gate result ({exc})", "rerun the gate or delete the file") from None
    if not isinstance(g, dict):
        raise InputError(path, f"a gate result is an object, not {type(g).__name__}", "rerun the gate or delete the file")
    if g.get("status") not in GATE_STATUSES:
        raise InputError(path, f"gate status {g.get('status')!r}", f"use one of {', '.join(GATE_STATUSES)}")
    read = _Fields(path, "rerun the gate or delete the file")
    return GateRecord(GateResult(read.text(g, "gate", ""), g["status"], read.text(g, "reason", "", "")),
                      read.text(g, "image_digest", "", ""), read.text(g, "gfx_target", "", ""),
                      json.dumps(g.get("evidence", ""), sort_keys=True), read.text(g, "framework", "", ""))


def write_bundle_json(root: Path, data: dict[str, Any]) -> None:
    """Write ``bundle.json`` (callers copy artifacts into ``files/`` first); computes missing sha256s."""
    for artifact in data.get("artifacts", []):
        if not artifact.get("sha256"):
            artifact["sha256"] = hashlib.sha256((root / "files" / artifact["path"]).read_bytes()).hexdigest()
    data = {"schema": SCHEMA, **data}
    (root / "bundle.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
