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

This module is the flow, top-down; what it uploads is made by ``stage`` (blobs, attestations, the staging
record) and ``indexes`` (pages and matrices, built by ``cairn.matrix.build``), written by ``upload.Run``, and
signed — attestations, image signatures, TUF metadata — by one ``cairn.sign.session.SigningSession``.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# isort: off
import cairn.sign  # noqa: F401 - first, so that tuf's securesystemslib loads without boto3 (see cairn.sign)
from tuf.api.metadata import Metadata, Root
# isort: on

from cairn.errors import CairnError
from cairn.matrix.build import Published, cell_id, record_gates
from cairn.matrix.bundle import Bundle
from cairn.matrix.model import CHANNELS
from cairn.names import name_problem
from cairn.publish import fastpath
from cairn.publish.blob_sender import EarlyBlobs
from cairn.publish.changes import channel_objects
from cairn.publish.indexes import index_objects
from cairn.publish.objects import JSON, Obj, json_bytes
from cairn.publish.report import Report
from cairn.publish.stage import stage_objects
from cairn.publish.upload import Log, Run
from cairn.remote.backend import Backend, sha256_hex
from cairn.sign.keys import KeySet
from cairn.sign.session import SigningSession


def publish(bundle: Bundle, backend: Backend, keys: KeySet, root: Metadata[Root], *, channel: str | None = None,
            stage_only: bool = False, public_read: bool = True, log: Log = lambda _: None,
            early: EarlyBlobs | None = None, where: Published | None = None) -> Report:
    """Stage ``bundle`` and (unless ``stage_only``) promote it to ``channel``; returns what happened.

    First the bucket policy (S3): anyone may read the repository (``public_read=False``: the bucket is left as
    it is, for an index served by something with its own access to it, e.g. a CDN). Then three upload phases
    and the commit: (1) every blob with its content-addressed copy (most of them sent already by ``early``,
    while the attestations were signed: ``cairn publish`` starts it before the signing libraries load), the
    attestations, and the content-addressed copies of the staging record, gates, pages and matrices (nothing
    links those until the metadata is signed);
    (2) the plain names of the record, gates, project pages and matrices, which link the blobs of (1), and the
    diff from the release the channel served before (``cairn.publish.changes``); (3) the family root pages,
    which link the project pages; then the signed metadata, timestamp last. Image signatures
    are pushed to their registry meanwhile. ``where``: the public repository URL and image registry the
    matrices name (``cairn.matrix.build.Published``; ``cairn publish --public-url/--registry``).
    """
    channel = channel or bundle.channel
    if channel not in CHANNELS:
        raise CairnError(f"unknown channel '{channel}' — use one of {', '.join(CHANNELS)}")
    signing = SigningSession(keys, root)
    early = early or EarlyBlobs(backend, bundle, signing.first_root(), public_read, log)
    blobs = early.blobs()  # every artifact read and checked against bundle.json: a bad bundle stops here
    with ThreadPoolExecutor(max_workers=1) as inspect:
        # the signed metadata is read, and the root checked, while the attestations are signed and the blobs go up
        opened = inspect.submit(lambda: Run(backend, signing, log, early.writer()))
        staged = stage_objects(bundle, signing, blobs)
    run = opened.result()
    if public_read:  # before anything else is written or signed: a refused policy leaves nothing half-published
        run.grant_public_read()
    with ThreadPoolExecutor(max_workers=1) as registry:
        images = registry.submit(signing.sign_images, [image.pinned for cell in bundle.cells for image in cell.images], log)
        record = staged.pop()  # release.json names every blob: its plain name goes up after them
        stage = json.loads(record.data)
        gates = json.loads(next(o.data for o in staged if o.key.endswith("/gates.json")))
        report = Report(backend.url, bundle.version, channel)
        indexes = [record, *[o for o in staged if not o.immutable],
                   *index_objects(f"staging/{bundle.version}", stage, stage["cells"], gates, channel, where=where)]
        if not stage_only:
            indexes += channel_objects(run, channel, stage, gates, report, where)
        run.upload_in_order([o for o in staged if o.immutable], indexes)
        report.images = images.result()
    run.commit(report, publish_fingerprint(bundle, channel, stage_only, signing, public_read, where))
    return report


def publish_fingerprint(bundle: Bundle, channel: str, stage_only: bool, signing: SigningSession, public_read: bool = True,
                        where: Published | None = None) -> str:
    """The fingerprint ``cairn publish``'s fast path compares (``fastpath.fingerprint``); "" without public.json."""
    pinned = signing.pinned()
    if pinned is None:
        return ""
    root_signed, public = pinned
    where = where or Published()
    return fastpath.fingerprint(bundle.root, channel, stage_only, root_signed, public, public_read, where.base_url, where.registry)


def check_version_names(version: str, as_version: str = "") -> None:
    """``--version`` and ``--as`` become keys (``staging/<version>/…``): each must be one plain name, never ``..``,
    a path or empty, or the keys would climb out of ``staging/`` (an S3 key is not a path, but a proxy or a later
    file copy may treat it as one). One line, before anything is read or written."""
    for flag, value in (("--version", version), ("--as", as_version)):
        problem = name_problem(value) if value or flag == "--version" else ""
        if problem:
            raise CairnError(f"{flag} {value!r} {problem} — a release version is one plain name, like 1.2.3 or 1.2.3rc1")


def promote(backend: Backend, keys: KeySet, root: Metadata[Root], version: str, channel: str, *,
            as_version: str = "", gate_results: list[tuple[Path, bytes]] | None = None,
            public_read: bool = True, log: Log = lambda _: None, where: Published | None = None) -> Report:
    """Move ``channel`` to staged ``version`` (only cells whose required gates passed); re-signs, never rebuilds.

    ``gate_results`` are gate verdicts reported after staging — the GPU gate run on a GPU host — as (file, bytes)
    of signed attestations (``cairn gate --sign-with``); each must verify with a runner key the key set's signed
    runner list trusts for its gate (``cairn.sign.runners.accept``, checked before anything is written), and is
    then merged into ``staging/<version>/gates.json`` (``record_gates``); the attestations and the runner list are
    published beside it as signed targets.
    ``as_version`` promotes a release candidate as the final version: its staging record is copied under
    the new version number and the same blobs are re-signed.
    """
    if channel not in CHANNELS:
        raise CairnError(f"unknown channel '{channel}' — use one of {', '.join(CHANNELS)}")
    check_version_names(version, as_version)
    attested = attested_gates(keys, root, version, gate_results or [])
    run = Run(backend, SigningSession(keys, root), log)  # the repository verified against the pinned root first
    stage, gates = staged_records(run, version)  # read before anything is written: a refused record writes nothing
    if public_read:
        run.grant_public_read()
    indexes: list[Obj] = []
    if attested:  # recorded with the promotion's pages, before the metadata that makes them visible
        results, proofs = attested
        gates = record_gates(stage, gates, results)
        indexes += [*proofs, Obj(f"staging/{version}/gates.json", json_bytes(gates), JSON, False)]
    if as_version and as_version != version:
        stage = {**stage, "release": {**stage["release"], "version": as_version, "promoted_from": version}}
        for cell in stage["cells"]:
            old_id = cell_id(cell)
            cell["release"] = as_version
            if old_id in gates:
                gates[cell_id(cell)] = gates.pop(old_id)
        indexes += [Obj(f"staging/{as_version}/release.json", json_bytes(stage), JSON, True),
                    Obj(f"staging/{as_version}/gates.json", json_bytes(gates), JSON, False)]
        version = as_version
    report = Report(backend.url, version, channel)
    try:
        indexes += channel_objects(run, channel, stage, gates, report, where)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a signed record of another shape: one line
        raise CairnError(f"{backend.url}/staging/{version}/release.json: a staged record this cairn cannot promote "
                         f"({type(exc).__name__}: {exc}) — stage the release again with this cairn") from None
    run.upload_in_order([], indexes)
    run.commit(report)
    return report


def attested_gates(keys: KeySet, root: Metadata[Root], version: str, files: list[tuple[Path, bytes]]
                   ) -> tuple[list[tuple[Path, dict[str, Any]]], list[Obj]] | None:
    """Verified verdicts of ``files`` (``cairn.sign.runners.accept``) and what publishes them: each attestation as an
    immutable target under ``staging/<version>/gate-attestations/`` (named by its sha256, which its recorded
    verdict names) and the runner list that trusted it as ``keys/runners.json``. None without files."""
    # lazy: cairn.sign, cairn.dsse, 6 ms at start-up (python -X importtime)
    from cairn.sign import runners

    if not files:
        return None
    trusted = runners.load(keys.directory, root)
    results = runners.accept(files, trusted, keys.directory)
    assert trusted is not None
    proofs = [Obj(runners.REPO_KEY, trusted.data, JSON, False)]
    for (_path, data), (_, result) in zip(files, results, strict=True):
        key = f"staging/{version}/gate-attestations/{sha256_hex(data)}.intoto.json"
        result["runner"]["attestation"] = key
        proofs.append(Obj(key, data, JSON, True))
    return results, proofs


def staged_records(run: Run, version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``staging/<version>/release.json`` and ``gates.json`` as the verified targets list them (``Run.signed``): a
    record written or flipped in the bucket without the keys is refused, never promoted and signed over."""
    where = f"{run.backend.url}/staging/{version}"
    found: dict[str, Any] = {}
    for name in ("release.json", "gates.json"):
        key = f"staging/{version}/{name}"
        raw = run.signed(key)
        if raw is None:
            if key in run.listing:
                raise CairnError(f"{where}/{name}: not a signed target of the repository (written without the keys) — "
                                 "stage the release with cairn publish --stage-only; nothing was written")
            if name == "release.json":
                raise CairnError(f"{run.backend.url} has no staged release {version} — run cairn publish --stage-only first")
            raw = b"{}"
        try:
            found[name] = json.loads(raw)
        except ValueError as exc:
            raise CairnError(f"{where}/{name}: not JSON ({exc}) — stage the release again") from None
    stage, gates = found["release.json"], found["gates.json"]
    release = stage.get("release") if isinstance(stage, dict) else None
    if not (isinstance(release, dict) and isinstance(release.get("version"), str) and isinstance(release.get("required_gates"), dict)
            and isinstance(stage.get("cells"), list) and all(_cell_shape(c) for c in stage["cells"])):
        raise CairnError(f"{where}/release.json: not a staged record (a JSON object with release.version, "
                         "release.required_gates and a list of cells, each with its target, os, python, framework "
                         "and wheels) — stage the release again")
    if not (isinstance(gates, dict) and all(isinstance(g, dict) for g in gates.values())):
        raise CairnError(f"{where}/gates.json: not a gate record (an object of cells, each an object of gates) — "
                         "stage the release again")
    return stage, gates


def _cell_shape(cell: Any) -> bool:
    """A staged cell has what ``cell_id`` and the channel pages read."""
    return (isinstance(cell, dict) and all(isinstance(cell.get(k), str) for k in ("release", "gfx_target", "os", "python"))
            and isinstance(cell.get("framework"), dict) and isinstance(cell.get("wheels"), list))
