"""The release bundle: everything the publisher needs, as one directory other stages write into.

Layout::

    bundle.json          release, build facts, cells and the artifacts (below) — schema cairn.bundle/v1
    files/...            the artifacts themselves (wheels, PEP 658 sidecars, rendered Dockerfiles, …)
    gates/*.json         gate results as the gates stage writes them:
                         {"image_digest", "gate", "status": passed|failed|not-run, "reason", "evidence",
                          optional "gfx_target" and "framework"} — matched to cells by image digest, or by
                         gfx target (and framework, when given)

Each artifact in ``bundle.json``: ``path`` (under files/), ``kind`` (wheel | metadata | dockerfile | other),
``sha256`` (checked before anything is uploaded), ``content_type``, ``cells`` (gfx targets it belongs
to, empty = every cell) and ``framework`` (only that framework's cells; empty = all, e.g. SDK wheels). Images are references + digests in the cells; their bytes stay in the registry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import CheckFailed, InputError
from cairn.matrix.model import CHANNELS, GATE_STATUSES, GateResult, ImageRef, Requirements, VersionRange
from cairn.sign.provenance import BuildFacts

SCHEMA = "cairn.bundle/v1"
KINDS = ("wheel", "metadata", "dockerfile", "other")
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
    root = Path(root)
    where = root / "bundle.json"
    try:
        data = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(where, f"cannot read the release bundle ({exc})", "point at a directory made by cairn bundle or write_bundle()") from None
    if data.get("schema") != SCHEMA:
        raise InputError(where, f"schema is {data.get('schema')!r}, not {SCHEMA}", "regenerate the bundle")
    rel = data["release"]
    if rel["channel"] not in CHANNELS:
        raise InputError(where, f"unknown channel {rel['channel']!r}", f"use one of {', '.join(CHANNELS)}")
    facts = BuildFacts(
        release=rel["name"], version=rel["version"], manifest_sha256=rel.get("manifest_sha256", ""),
        source_date_epoch=int(rel["source_date_epoch"]), builder_id=data.get("builder", {}).get("id", BuildFacts.builder_id),
        pins=tuple(sorted(data.get("pins", {}).items())), git_commit=data.get("builder", {}).get("git_commit", ""),
        invocation=data.get("builder", {}).get("invocation", ""),
    )
    artifacts = []
    for raw in data.get("artifacts", []):
        if raw.get("kind") not in KINDS:
            raise InputError(where, f"artifact {raw.get('path')}: kind {raw.get('kind')!r}", f"use one of {', '.join(KINDS)}")
        artifacts.append(Artifact(raw["path"], raw["kind"], raw["sha256"], raw.get("content_type", "application/octet-stream"),
                                  tuple(raw.get("cells", ())), raw.get("family", ""), raw.get("recipe", ""), raw.get("framework", "")))
    cells = []
    for raw in data.get("cells", []):
        req = raw.get("requirements", {})
        cells.append(BundleCell(
            raw["gfx_target"], raw.get("family", raw["gfx_target"]), raw["os"], raw["python"], raw["framework"], raw["framework_version"],
            tuple(ImageRef(i["reference"], i["digest"]) for i in raw.get("images", [])),
            Requirements(VersionRange(**req.get("driver", {})), VersionRange(**req.get("kernel", {})), req.get("driver_name", "amdgpu")),
        ))
    gates = []
    for path in sorted((root / "gates").glob("*.json")):
        g = json.loads(path.read_text())
        if g.get("status") not in GATE_STATUSES:
            raise InputError(path, f"gate status {g.get('status')!r}", f"use one of {', '.join(GATE_STATUSES)}")
        gates.append(GateRecord(GateResult(g["gate"], g["status"], g.get("reason", "")), g.get("image_digest", ""),
                                g.get("gfx_target", ""), json.dumps(g.get("evidence", ""), sort_keys=True), g.get("framework", "")))
    required = tuple((ch, tuple(v)) for ch, v in sorted(rel.get("required_gates", {}).items()))
    return Bundle(root, rel["name"], rel["version"], rel["channel"], int(rel["source_date_epoch"]), rel.get("manifest_sha256", ""),
                  required, facts, tuple(artifacts), tuple(cells), tuple(gates))


def write_bundle_json(root: Path, data: dict[str, Any]) -> None:
    """Write ``bundle.json`` (callers copy artifacts into ``files/`` first); computes missing sha256s."""
    for artifact in data.get("artifacts", []):
        if not artifact.get("sha256"):
            artifact["sha256"] = hashlib.sha256((root / "files" / artifact["path"]).read_bytes()).hexdigest()
    data = {"schema": SCHEMA, **data}
    (root / "bundle.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
