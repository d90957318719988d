"""Publish a release bundle: immutable blobs → staging → channel pages → matrix → TUF targets → snapshot → timestamp.

Repository layout (identical for ``file://`` and ``s3://``; ``publish/layout.md`` is the reference)::

    packages/<family>/<wheel>            immutable wheels, + .metadata (PEP 658) + .intoto.jsonl (DSSE)
    dockerfiles/<version>/<path>         rendered Dockerfiles, + .intoto.jsonl
    images/<version>/<gfx>-<n>.json      image reference + digest (TUF custom field), + .intoto.jsonl
    keys/provenance.json, keys/cosign.pub
    staging/<version>/release.json       immutable record of what was staged (cells, files, digests)
    staging/<version>/gates.json         gate results (updated as gates report)
    staging/<version>/matrix.json        every cell with its gate results
    staging/<version>/simple/<family>/   index of everything staged
    channels/<channel>/simple/<family>/  index of the cells that passed the channel's required gates
    channels/<channel>/matrix.json
    metadata/                            TUF (timestamp.json is written last: the commit point)

Every object except ``metadata/`` is a TUF target, also stored at ``dir/<sha256>.<name>``. A re-run skips
what is present with the right digest; a kill at any point leaves every page referencing only objects
that are already uploaded and signed by their DSSE attestation.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from io import BytesIO
from pathlib import Path
from typing import Any

# isort: off
import cairn.sign  # noqa: F401 - first, so that tuf's securesystemslib loads without boto3 (see cairn.sign)
from tuf.api.metadata import Metadata, Root, TargetFile
from tuf.api.serialization.json import JSONSerializer
# isort: on

from cairn.errors import CairnError, CheckFailed, InputError
from cairn.matrix.model import CHANNELS, Cell, Framework, GateResult, ImageRef, Matrix, Release, WheelFile
from cairn.publish import fastpath, pages
from cairn.publish.backend import COPY_MAX, Backend, Listed, sha256_hex
from cairn.publish.bundle import Bundle
from cairn.sign import provenance
from cairn.sign.keys import KeySet
from cairn.sign.tuf import RepoState, hashed_name, read_state, sign_state

WHEEL = "application/zip"  # a wheel is a zip archive; browsers and curl save it as one
CORE_METADATA = "text/plain; charset=utf-8"  # PEP 658: the wheel's METADATA file, email-header text in UTF-8
JSON = "application/json"
JSONL = "application/vnd.in-toto.bundle"
THREADS = 16
# From this size the content-addressed copy is a server-side copy of the plain name, not a second upload. Below
# it a CopyObject costs the server about as much as a small PUT (a request's fixed cost dominates) and would
# wait for the first upload to finish.
COPY_MIN = 4 << 20


@dataclass(frozen=True)
class Obj:
    key: str
    data: bytes
    content_type: str
    immutable: bool
    target: bool = True
    custom: dict[str, Any] | None = None
    alias: str = ""  # a second key with the same bytes (``simple/<family>/<project>/`` for pip)
    digest: str = ""  # the sha256 when already known (artifacts: checked once against bundle.json)

    @cached_property
    def sha256(self) -> str:
        """Hashed at most once per object: a 300 MB wheel costs ≈0.2 s per sha256."""
        return self.digest or sha256_hex(self.data)


@dataclass(frozen=True)
class _Write:
    obj: Obj
    key: str
    immutable: bool
    source: str = ""  # a key this run already wrote with the same bytes: the server copies it


@dataclass
class Report:
    url: str
    version: str
    channel: str
    promoted: list[str] = field(default_factory=list)
    held: dict[str, list[str]] = field(default_factory=dict)  # cell id -> reasons
    uploaded: int = 0
    skipped: int = 0
    signed: bool = False
    timestamp_version: int = 0
    images: dict[str, str] = field(default_factory=dict)  # pinned reference -> "signed <tag>" | "not signed: why"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def as_published(self) -> dict[str, Any]:
        """What the publish record keeps, for an unchanged re-publish to report without redoing anything."""
        return {"version": self.version, "channel": self.channel, "promoted": self.promoted, "held": self.held,
                "images": self.images}


Log = Callable[[str], None]


# -- the public entry points ---------------------------------------------------------------------------------
def publish(bundle: Bundle, backend: Backend, keys: KeySet, root: Metadata[Root], *, channel: str | None = None,
            stage_only: bool = False, public_read: bool = True, log: Log = lambda _: None) -> Report:
    """Stage ``bundle`` and (unless ``stage_only``) promote it to ``channel``; returns what happened.

    First the bucket policy (S3): anyone may read the repository (``public_read=False``: the bucket is left as
    it is, for an index served by something with its own access to it, e.g. a CDN). Then three upload phases
    and the commit: (1) every blob with its content-addressed copy, and the content-addressed copies of the
    staging record, gates, pages and matrices (nothing links those until the metadata is signed);
    (2) the plain names of the record, gates, project pages and matrices, which link the blobs of (1); (3) the
    family root pages, which link the project pages; then the signed metadata, timestamp last. Image signatures
    are pushed to their registry meanwhile.
    """
    channel = channel or bundle.channel
    if channel not in CHANNELS:
        raise CairnError(f"unknown channel '{channel}' — use one of {', '.join(CHANNELS)}")
    staged = _stage_objects(bundle, keys)  # reads and checks every artifact's sha256 before anything is uploaded
    run = _Run(backend, keys, root, log)
    if public_read:  # before anything is written or signed: a refused policy leaves nothing half-published
        run.grant_public_read()
    with ThreadPoolExecutor(max_workers=1) as registry:
        images = registry.submit(sign_images, bundle, keys, log)
        record = staged.pop()  # release.json names every blob: its plain name goes up after them
        stage = json.loads(record.data)
        gates = json.loads(next(o.data for o in staged if o.key.endswith("/gates.json")))
        report = Report(backend.url, bundle.version, channel)
        indexes = [record, *[o for o in staged if not o.immutable], *_pages(f"staging/{bundle.version}", stage, stage["cells"]),
                   _matrix_obj(f"staging/{bundle.version}/matrix.json", stage, stage["cells"], gates, channel)]
        if not stage_only:
            indexes += _promotion(stage, gates, channel, report)
        run.upload_in_order([o for o in staged if o.immutable], indexes)
        report.images = images.result()
    run.commit(report, publish_fingerprint(bundle, channel, stage_only, keys, root, public_read))
    return report


def publish_fingerprint(bundle: Bundle, channel: str, stage_only: bool, keys: KeySet, root: Metadata[Root],
                        public_read: bool = True) -> str:
    """The fingerprint ``cairn publish``'s fast path compares (``fastpath.fingerprint``); "" without public.json."""
    try:
        public = json.loads((keys.directory / "public.json").read_bytes())
    except (OSError, ValueError):
        return ""
    return fastpath.fingerprint(bundle.root, channel, stage_only, root.signed.to_dict(), public, public_read)


def sign_images(bundle: Bundle, keys: KeySet, log: Log = lambda _: None) -> dict[str, str]:
    """A cosign-format signature next to every image of the bundle, in its registry (``sha256-<hex>.sig``).

    An image whose registry cannot be reached, or that is not in it, is reported as not signed with the
    reason — ``cairn verify IMAGE`` then fails for it, so nothing is silently trusted.
    """
    from cairn.sign.cosign import sign_image

    results: dict[str, str] = {}
    for cell in bundle.cells:
        for image in cell.images:
            ref = image.pinned
            if ref in results:
                continue
            try:
                results[ref] = "signed " + sign_image(ref, keys.signer("image"), keys.image_public_pem())
            except CairnError as exc:
                results[ref] = f"not signed: {exc}"
    if results:
        signed = sum(1 for v in results.values() if v.startswith("signed"))
        log(f"image signatures: {signed} of {len(results)} signed")
    return results


def promote(backend: Backend, keys: KeySet, root: Metadata[Root], version: str, channel: str, *,
            as_version: str = "", gate_results: list[tuple[Path, dict[str, Any]]] | None = None,
            public_read: bool = True, log: Log = lambda _: None) -> Report:
    """Move ``channel`` to staged ``version`` (only cells whose required gates passed); re-signs, never rebuilds.

    ``gate_results`` are gate verdicts reported after staging — the GPU gate run on a GPU host — as
    (file, ``gate.json``) pairs; they are merged into ``staging/<version>/gates.json`` first (``record_gates``).
    ``as_version`` promotes a release candidate as the final version: its staging record is copied under
    the new version number and the same blobs are re-signed.
    """
    if channel not in CHANNELS:
        raise CairnError(f"unknown channel '{channel}' — use one of {', '.join(CHANNELS)}")
    run = _Run(backend, keys, root, log)
    if public_read:
        run.grant_public_read()
    raw = backend.get(f"staging/{version}/release.json")
    if raw is None:
        raise CairnError(f"{backend.url} has no staged release {version} — run cairn publish --stage-only first")
    stage = json.loads(raw)
    gates = json.loads(backend.get(f"staging/{version}/gates.json") or b"{}")
    indexes: list[Obj] = []
    if gate_results:  # recorded with the promotion's pages, before the metadata that makes them visible
        gates = record_gates(stage, gates, gate_results)
        indexes.append(Obj(f"staging/{version}/gates.json", _json(gates), JSON, False))
    if as_version and as_version != version:
        stage = {**stage, "release": {**stage["release"], "version": as_version, "promoted_from": version}}
        for cell in stage["cells"]:
            old_id = _cell_id(cell)
            cell["release"] = as_version
            if old_id in gates:
                gates[_cell_id(cell)] = gates.pop(old_id)
        indexes += [Obj(f"staging/{as_version}/release.json", _json(stage), JSON, True),
                    Obj(f"staging/{as_version}/gates.json", _json(gates), JSON, False)]
        version = as_version
    report = Report(backend.url, version, channel)
    indexes += _promotion(stage, gates, channel, report)
    run.upload_in_order([], indexes)
    run.commit(report)
    return report


_RANK = {"passed": 0, "not-run": 1, "failed": 2}
RECORDED = "recorded"  # gates.json key: image digest -> gate -> the verdict reported after staging


def record_gates(stage: dict[str, Any], gates: dict[str, Any], results: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """``gates`` with verdicts reported after staging (``gate.json`` of a gate run elsewhere) merged in.

    A verdict is for one image: it counts for every staged cell of its target whose images include that
    digest, and a gate passes for a cell only if it passed on every image of the cell (failed > not-run >
    passed; an image with no verdict yet is not-run). A verdict for an image this release did not stage is
    refused, naming its file: a gate run on other bytes proves nothing about these.
    """
    from cairn.gates.result import SCHEMA, STATUSES

    gates = json.loads(json.dumps(gates))
    recorded: dict[str, dict[str, dict[str, str]]] = gates.setdefault(RECORDED, {})
    touched: set[tuple[str, str]] = set()  # (cell id, gate)
    for path, result in results:
        fields = ("gate", "target", "digest", "status")
        if result.get("schema") != SCHEMA or not all(isinstance(result.get(k), str) and result[k] for k in fields):
            raise InputError(path, f"not a gate result ({SCHEMA} with {', '.join(fields)})",
                             "pass the gate.json a gate action wrote (cairn build on the host that ran the gate)")
        if result["status"] not in STATUSES:
            raise InputError(path, f"gate status {result['status']!r}", f"use one of {', '.join(STATUSES)}")
        cells = [c for c in stage["cells"] if c["gfx_target"] == result["target"]
                 and result["digest"] in {i["digest"] for i in c["images"]}]
        if not cells:
            raise InputError(path, f"{result['gate']} gate of {result['digest'][:19]}… ({result['target']}) is for an image "
                             f"release {stage['release']['version']} did not stage", "run the gate on the staged image's digest")
        recorded.setdefault(result["digest"], {})[result["gate"]] = {"status": result["status"], "reason": result.get("reason", "")}
        touched.update((_cell_id(c), result["gate"]) for c in cells)
    for cell in stage["cells"]:
        cid = _cell_id(cell)
        for gate in sorted(g for c, g in touched if c == cid):
            verdicts = [recorded.get(i["digest"], {}).get(gate) or
                        {"status": "not-run", "reason": f"no {gate} result recorded for {i['reference']}@{i['digest'][:19]}…"}
                        for i in cell["images"]]
            gates.setdefault(cid, {})[gate] = max(verdicts, key=lambda v: _RANK[v["status"]])
    return gates


# -- staging ---------------------------------------------------------------------------------------------------
def _stage_objects(bundle: Bundle, keys: KeySet) -> list[Obj]:
    """Every blob of the bundle plus its attestation, then the gates and (last) the staging record."""
    signer = keys.signer("provenance")
    objs: list[Obj] = [
        Obj("keys/provenance.json", _json(keys.public("provenance").to_dict() | {"keyid": keys.public("provenance").keyid}), JSON, False),
        Obj("keys/cosign.pub", keys.image_public_pem().encode(), "application/x-pem-file", False),
    ]
    files: dict[str, dict[str, Any]] = {}
    wheel_keys: dict[str, str] = {}

    def attest(key: str, name: str, sha: str, recipe: str = "") -> None:
        stmt = provenance.statement(name, sha, bundle.facts, recipe)
        objs.append(Obj(f"{key}.intoto.jsonl", provenance.sign_statement(stmt, signer), JSONL, True))

    # every artifact read and checked before anything is uploaded, two at a time (hashlib and file reads release
    # the GIL: ≈0.3 s instead of ≈0.6 s for the default release's 1 GB)
    wanted = [a for a in bundle.artifacts if a.kind != "metadata"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        contents = dict(zip((a.path for a in wanted), pool.map(lambda a: _read_checked(bundle, a), wanted), strict=True))
    for artifact in bundle.artifacts:
        if artifact.kind == "metadata":
            continue  # PEP 658 sidecars are derived from the wheel itself, so they always match it
        data = contents[artifact.path]
        if artifact.kind == "wheel":
            key = f"packages/{artifact.family or 'any'}/{artifact.name}"
            metadata = _wheel_metadata(data, artifact.name)
            objs.append(Obj(key, data, WHEEL, True, digest=artifact.sha256))
            objs.append(Obj(f"{key}.metadata", metadata, CORE_METADATA, True))
            attest(key, artifact.name, artifact.sha256, artifact.recipe)
            files[key] = {"sha256": artifact.sha256, "size": len(data), "metadata_sha256": sha256_hex(metadata),
                          "requires_python": _requires_python(metadata)}
            wheel_keys[artifact.path] = key
        else:
            top = "dockerfiles" if artifact.kind == "dockerfile" else "files"
            # a source is content-addressed and shared by every release: sources/sha256/<digest>, a mirror base
            key = artifact.path if artifact.kind == "source" else f"{top}/{bundle.version}/{artifact.path}"
            objs.append(Obj(key, data, artifact.content_type, True, digest=artifact.sha256))
            attest(key, artifact.name, artifact.sha256, artifact.recipe)
            files[key] = {"sha256": artifact.sha256, "size": len(data)}

    registry = _registry()
    cells = []
    gates: dict[str, dict[str, dict[str, str]]] = {}
    for cell in bundle.cells:
        images = []
        for n, image in enumerate(cell.images):
            key = f"images/{bundle.version}/{cell.gfx_target}-{n}.json"
            body = _json({"reference": image.reference, "digest": image.digest})
            objs.append(Obj(key, body, JSON, True, custom={"image": {"reference": image.reference, "digest": image.digest}}))
            attest(key, image.reference, image.digest.removeprefix("sha256:"))
            images.append({"reference": image.reference, "digest": image.digest, "key": key})
        products = list(registry.targets[cell.gfx_target].products) if registry and cell.gfx_target in registry.targets else []
        cells.append({
            "release": bundle.version, "gfx_target": cell.gfx_target, "family": cell.family, "products": products,
            "os": cell.os, "python": cell.python, "framework": {"name": cell.framework, "version": cell.framework_version},
            "images": images,
            "wheels": sorted(wheel_keys[a.path] for a in bundle.artifacts_for(cell) if a.kind == "wheel"),
            "partial": list(cell.partial),
            "requirements": {"driver_name": cell.requirements.driver_name,
                             "driver": _range(cell.requirements.driver), "kernel": _range(cell.requirements.kernel)},
        })
        gates[_cell_id(cells[-1])] = {g.gate: {"status": g.status, "reason": g.reason} for g in bundle.gates_for(cell)}
    objs.append(Obj(f"staging/{bundle.version}/gates.json", _json(gates), JSON, False))
    record = {
        "schema": "cairn.staged/v1",
        "release": {"name": bundle.release, "version": bundle.version, "channel": bundle.channel,
                    "source_date_epoch": bundle.source_date_epoch, "manifest_sha256": bundle.manifest_sha256,
                    "required_gates": {ch: list(g) for ch, g in bundle.required_gates}},
        "cells": cells, "files": files,
    }
    objs.append(Obj(f"staging/{bundle.version}/release.json", _json(record), JSON, True))
    return objs


# -- promotion -------------------------------------------------------------------------------------------------
def _promotion(stage: dict[str, Any], gates: dict[str, Any], channel: str, report: Report) -> list[Obj]:
    """The channel's pages and matrix: the cells whose required gates passed (``report`` says which were held)."""
    required = stage["release"]["required_gates"].get(channel, [])
    passing, failing = [], set()
    for cell in stage["cells"]:
        results = cell_gates(gates, cell)
        reasons = [f"{g}: {results.get(g, {}).get('status', 'not-run')}"
                   + (f" ({results[g]['reason']})" if results.get(g, {}).get("reason") else "")
                   for g in required if results.get(g, {}).get("status") != "passed"]
        cid = _cell_id(cell)
        if reasons:
            report.held[cid] = reasons
            if any(results.get(g, {}).get("status") == "failed" for g in required):
                failing.update(cell["wheels"])
        else:
            passing.append(cell)
            report.promoted.append(cid)
    # a wheel of a cell that *failed* a required gate is held everywhere: a channel never serves bytes a required
    # gate rejected; a wheel of a cell whose gate did not run is served only through the cells that passed
    shown = [{**c, "wheels": [w for w in c["wheels"] if w not in failing]} for c in passing]
    prefix = f"channels/{channel}"
    return [*_pages(prefix, stage, shown), _matrix_obj(f"{prefix}/matrix.json", stage, shown, gates, channel)]


def _pages(prefix: str, stage: dict[str, Any], cells: list[dict[str, Any]]) -> list[Obj]:
    """Project pages (HTML + JSON), then the family root pages that link to them."""
    by_family: dict[str, set[str]] = {}
    for cell in cells:
        by_family.setdefault(cell["family"], set()).update(cell["wheels"])
    objs: list[Obj] = []
    roots: list[Obj] = []
    for family, wheels in sorted(by_family.items()):
        projects: dict[str, list[pages.FileEntry]] = {}
        for key in sorted(wheels):
            info = stage["files"][key]
            name = posixpath.basename(key)
            depth = prefix.count("/") + 1 + 3  # <prefix>/simple/<family>/<project>/
            url = "../" * depth + key
            entry = pages.FileEntry(name, url, info["sha256"], info["size"], info.get("metadata_sha256", ""), info.get("requires_python", ""))
            projects.setdefault(entry.project, []).append(entry)
        base = f"{prefix}/simple/{family}"
        for project, entries in sorted(projects.items()):
            html = pages.project_html(project, entries).encode()
            objs.append(Obj(f"{base}/{project}/index.html", html, pages.HTML_TYPE, False, alias=f"{base}/{project}/"))
            objs.append(Obj(f"{base}/{project}/index.json", pages.project_json(project, entries).encode(), pages.JSON_TYPE, False))
        roots.append(Obj(f"{base}/index.html", pages.root_html(list(projects)).encode(), pages.HTML_TYPE, False, alias=f"{base}/"))
        roots.append(Obj(f"{base}/index.json", pages.root_json(list(projects)).encode(), pages.JSON_TYPE, False))
    return objs + roots


def _matrix_obj(key: str, stage: dict[str, Any], cells: list[dict[str, Any]], gates: dict[str, Any], channel: str) -> Obj:
    return Obj(key, build_matrix(stage, cells, gates, channel, index_prefix=key.rsplit("/", 1)[0]).to_json().encode(), JSON, False)


def build_matrix(stage: dict[str, Any], cells: list[dict[str, Any]], gates: dict[str, Any], channel: str,
                 index_prefix: str) -> Matrix:
    from cairn.matrix.model import Requirements, VersionRange

    rel = stage["release"]
    out = []
    for c in cells:
        req = c["requirements"]
        results = cell_gates(gates, c)
        required = {g for gs in rel["required_gates"].values() for g in gs}
        gate_list = [GateResult(g, results.get(g, {}).get("status", "not-run"), results.get(g, {}).get("reason", "")
                                or ("" if g in results else "no result recorded")) for g in sorted(required | set(results))]
        out.append(Cell(
            release=rel["version"], channel=channel, gfx_target=c["gfx_target"], family=c["family"], products=tuple(c["products"]),
            os=c["os"], python=c["python"], framework=Framework(c["framework"]["name"], c["framework"]["version"]),
            index_url=f"{index_prefix}/simple/{c['family']}/",
            wheels=tuple(WheelFile(posixpath.basename(k), k, stage["files"][k]["sha256"], stage["files"][k]["size"]) for k in c["wheels"]),
            images=tuple(ImageRef(i["reference"], i["digest"]) for i in c["images"]),
            gates=tuple(gate_list), partial=tuple(c.get("partial", ())),
            requirements=Requirements(VersionRange(**req["driver"]), VersionRange(**req["kernel"]), req["driver_name"]),
        ))
    release = Release(rel["name"], rel["version"], channel, rel["source_date_epoch"], rel.get("manifest_sha256", ""),
                      tuple((ch, tuple(g)) for ch, g in sorted(rel["required_gates"].items())))
    return Matrix(release, tuple(out))


# -- uploading -------------------------------------------------------------------------------------------------
class _Run:
    """One publisher run: what the repository holds now, what this run wrote, and the final signing."""

    def __init__(self, backend: Backend, keys: KeySet, root: Metadata[Root], log: Log) -> None:
        self.backend, self.keys, self.root, self.log = backend, keys, root, log
        self.listing: dict[str, Listed] = backend.list()
        self._check_root()
        self.state: RepoState = read_state(backend)
        self.known = {p: t.hashes.get("sha256", "") for p, t in self.state.target_files().items()}
        self.targets: dict[str, TargetFile] = self.state.target_files()
        self.uploaded = 0
        self.skipped = 0
        self.marked = False

    def _check_root(self) -> None:
        """Never sign into a repository whose first root is another key set's: clients pinned to it would break."""
        if "metadata/1.root.json" not in self.listing:
            return
        served = self.backend.get("metadata/1.root.json") or b""
        first = self.root if self.root.signed.version == 1 else None
        if first is not None and served != first.to_bytes(JSONSerializer(compact=False)):
            raise CairnError(f"{self.backend.url} was signed under another TUF root (metadata/1.root.json differs from "
                             "the root of these keys) — publish with that repository's keys, or to a new location")

    def grant_public_read(self) -> None:
        """Anyone may read the repository over HTTP (pip, uv, a TUF client): on S3 the bucket policy says so."""
        if self.backend.grant_public_read():
            self.log(f"bucket policy: anyone may read {self.backend.url} (and list the bucket, so a missing project is a 404)")

    def _signed_and_listed(self, key: str, size: int, sha: str) -> bool:
        """Present with these bytes, judged from one LIST and the signed targets (no request per object)."""
        listed = self.listing.get(key)
        return listed is not None and listed.size == size and self.known.get(key) == sha

    def _writes(self, obj: Obj, names: str) -> list[_Write]:
        """The keys ``obj`` still needs written, judged from the LIST and the signed targets (no request per object).

        ``names``: ``"all"``, ``"hashed"`` (only the content-addressed copy) or ``"plain"`` (the plain name and
        its alias). A content-addressed copy of a big object that this task writes under its plain name first
        is made by the server from that name (``source``): its bytes are sent once.
        """
        sha, size = obj.sha256, len(obj.data)
        writes: list[_Write] = []
        known = self._signed_and_listed(obj.key, size, sha)
        if names != "hashed":
            if not known:
                writes.append(_Write(obj, obj.key, obj.immutable))
            if obj.alias and not (known and (obj.alias in self.listing or obj.alias + "index.html" in self.listing)):
                writes.append(_Write(obj, obj.alias, False))
        if obj.target and names != "plain":  # content-addressed copy: its name is its digest, so listed means present
            hashed = hashed_name(obj.key, sha)
            listed = self.listing.get(hashed)
            if listed is None or listed.size != size:
                # copy only onto a free name: a name already taken goes through the conditional PUT, as before
                copy = listed is None and writes and writes[0].key == obj.key and COPY_MIN <= size < COPY_MAX
                writes.append(_Write(obj, hashed, True, source=obj.key if copy else ""))
        return writes

    def _mark_in_progress(self) -> None:
        """Before this run's first write: the publish record stops saying "published" (see ``fastpath``)."""
        if self.marked:
            return
        self.marked = True
        if fastpath.RECORD_KEY in self.listing:
            self.backend.put(fastpath.RECORD_KEY, fastpath.IN_PROGRESS, content_type=JSON, immutable=False)
            self.listing[fastpath.RECORD_KEY] = Listed(len(fastpath.IN_PROGRESS))

    def upload_in_order(self, blobs: list[Obj], indexes: list[Obj]) -> None:
        """Blobs and every content-addressed copy first; then the plain names of ``indexes``, which link the
        blobs; the family root pages, which link the project pages, last."""
        self.upload("blobs and content-addressed copies", blobs, extra=indexes)
        self.upload("indexes", [o for o in indexes if not _family_root(o.key)], names="plain")
        self.upload("family root pages", [o for o in indexes if _family_root(o.key)], names="plain")

    def upload(self, phase: str, objs: list[Obj], *, names: str = "all", extra: Sequence[Obj] = ()) -> None:
        """Write what ``objs`` (all names) and ``extra`` (content-addressed copies only) still need, concurrently.

        One task per object, largest first, so every big object starts at once and small ones fill in; a task
        writes the plain name before the server copies it to the content-addressed name.
        """
        # cells of one target share its image records: the same key with the same bytes is written once
        unique = {(obj.key, obj.sha256, part): (obj, part) for obj, part in [(o, names) for o in objs] + [(o, "hashed") for o in extra]}
        wanted = list(unique.values())
        if not wanted:
            return
        tasks = [writes for obj, part in wanted if (writes := self._writes(obj, part))]
        self.skipped += sum(self._candidates(obj, part) for obj, part in wanted) - sum(len(t) for t in tasks)
        if tasks:
            self._mark_in_progress()
        tasks.sort(key=lambda writes: -len(writes[0].obj.data))
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            for written, present in pool.map(self._write_all, tasks):
                self.uploaded += written
                self.skipped += present
        for obj, _part in wanted:
            if obj.target:
                self.targets[obj.key] = _target(obj)
        self.log(f"{phase}: {len(objs) + len(extra)} object(s)")

    @staticmethod
    def _candidates(obj: Obj, names: str) -> int:
        plain = 1 + bool(obj.alias)
        return {"all": plain + obj.target, "plain": plain, "hashed": int(obj.target)}[names]

    def _write_all(self, writes: list[_Write]) -> tuple[int, int]:
        """Write in order; returns how many keys were written and how many already held these bytes."""
        written = 0
        for w in writes:
            obj = w.obj
            if w.source:
                wrote = self.backend.copy(w.source, w.key, content_type=obj.content_type, immutable=w.immutable, sha256=obj.sha256)
            else:
                wrote = self.backend.put(w.key, obj.data, content_type=obj.content_type, immutable=w.immutable, sha256=obj.sha256)
            written += wrote
        return written, len(writes) - written

    def commit(self, report: Report, fingerprint: str = "") -> None:
        """Publish record → TUF targets → snapshot → timestamp, unless nothing changed; the timestamp is the commit.

        ``fingerprint`` is what ``cairn publish`` run again would compare ("" for promote and gate recording,
        which a re-publish must never skip over).
        """
        current = self.state.timestamp.signed.version if self.state.timestamp else 0

        def record(version: int) -> Obj:
            return Obj(fastpath.RECORD_KEY, fastpath.record_bytes(fingerprint, version, report.as_published()), JSON, False)

        if fingerprint or self.marked:
            final = record(current)  # what the record says if nothing needs signing
            signed = sign_state(self.keys, self.root, self.state, {**self.targets, final.key: _target(final)})
            if signed is not None:
                final = record(current + 1)  # the timestamp version this commit writes
            self.upload("publish record", [final])  # nothing written when it is already there and signed
            if signed is not None:
                signed = sign_state(self.keys, self.root, self.state, self.targets)
        else:  # nothing written by a promote/gates run: the record (if any) still describes the repository
            signed = sign_state(self.keys, self.root, self.state, self.targets)
        if signed is not None:
            self._mark_in_progress()
            files = [(key, data, immutable) for key, data, immutable in signed.files
                     if not (immutable and self.listing.get(key, Listed(-1)).size == len(data))]
            *before, timestamp = files  # root, targets and snapshot at once; the timestamp, the commit, after them

            def put(file: tuple[str, bytes, bool]) -> None:
                self.backend.put(file[0], file[1], content_type=JSON, immutable=file[2])

            with ThreadPoolExecutor(max_workers=THREADS) as pool:
                list(pool.map(put, before))
            put(timestamp)
            self.uploaded += len(files)
            report.signed = True
            self.log("metadata: targets, snapshot, timestamp signed")
        ts = signed.files[-1][1] if signed else (self.backend.get("metadata/timestamp.json") or b"{}")
        report.timestamp_version = int(json.loads(ts).get("signed", {}).get("version", 0))
        report.uploaded, report.skipped = self.uploaded, self.skipped


# -- helpers ---------------------------------------------------------------------------------------------------
def _target(obj: Obj) -> TargetFile:
    """The TUF target entry from the digest already known (``TargetFile.from_data`` would hash it again)."""
    return TargetFile(len(obj.data), {"sha256": obj.sha256}, obj.key,
                      {"custom": obj.custom} if obj.custom else None)


def _read_checked(bundle: Bundle, artifact: Any) -> bytes:
    """An artifact's bytes, read once and checked against the sha256 ``bundle.json`` claims."""
    path = bundle.file(artifact)
    try:
        data = path.read_bytes()
    except OSError:
        raise InputError(bundle.root / "bundle.json", f"artifact {artifact.path} is missing from files/", "rebuild the bundle") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact.sha256:
        raise CheckFailed(f"{path}: sha256 is {digest}, bundle.json says {artifact.sha256} — the bundle was modified; rebuild it")
    return data


def _family_root(key: str) -> bool:
    """``<prefix>/simple/<family>/index.html`` (or ``.json``): the page that links every project page."""
    parts = key.split("/")
    return len(parts) >= 3 and parts[-3] == "simple"


def _json(value: Any) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=1) + "\n").encode()


def _range(r: Any) -> dict[str, str]:
    return {"minimum": r.minimum, "below": r.below, "note": r.note}


def cell_gates(gates: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's gate results: its own (keyed by cell id), overridden by results recorded later for its target."""
    return {**gates.get(_cell_id(cell), {}), **gates.get(cell["gfx_target"], {})}


def _cell_id(cell: dict[str, Any]) -> str:
    return f"{cell['release']}/{cell['gfx_target']}/{cell['os']}/py{cell['python']}/{cell['framework']['name']}-{cell['framework']['version']}"


def _wheel_metadata(data: bytes, name: str) -> bytes:
    """The wheel's own ``*.dist-info/METADATA`` — the PEP 658 sidecar must be exactly these bytes."""
    try:
        with zipfile.ZipFile(BytesIO(data)) as zf:
            member = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
            return zf.read(member)
    except (zipfile.BadZipFile, StopIteration):
        raise CheckFailed(f"{name} is not a wheel with a .dist-info/METADATA — the bundle is broken; rebuild it") from None


def _requires_python(metadata: bytes) -> str:
    for line in metadata.decode(errors="replace").splitlines():
        if line.lower().startswith("requires-python:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return ""


def _registry() -> Any:
    try:
        from cairn.model.targets import load_registry

        return load_registry()
    except CairnError:
        return None


def load_root(path: Path) -> Metadata[Root]:
    try:
        return Metadata[Root].from_bytes(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise CairnError(f"cannot read TUF root {path} ({exc}) — run cairn keys init") from None
