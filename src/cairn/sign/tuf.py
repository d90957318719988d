"""The TUF repository over a published tree (consistent snapshots), read from and written to a backend.

Layout under the repository root: ``metadata/{N}.root.json`` (and ``root.json``), ``metadata/{N}.targets.json``,
``metadata/{N}.snapshot.json``, ``metadata/timestamp.json``; every target at its path *and* at the
hash-prefixed name ``dir/{sha256}.{name}`` that a consistent-snapshot client downloads. Writing a new
state uploads targets, then snapshot, then the timestamp — the timestamp write is the commit point, so a
client never sees metadata that names something not yet uploaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tuf.api.metadata import Metadata, MetaFile, Root, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CairnError
from cairn.sign.keys import KeySet

TARGETS_EXPIRY = timedelta(days=365)
SNAPSHOT_EXPIRY = timedelta(days=7)
TIMESTAMP_EXPIRY = timedelta(days=1)
REFRESH_BEFORE = timedelta(hours=12)  # an unchanged re-publish still re-signs a timestamp this close to expiry
METADATA = "metadata"
RECORD_KEY = "channels/published.json"  # = cairn.publish.fastpath.RECORD_KEY (a test checks)
# The timestamp names the publish record's length and sha256 (an extra field of its signed part, which TUF clients
# keep and sign over): the fast path checks the record against the one signed file it reads anyway.
RECORD_FIELD = "x-cairn-published"  # = cairn.publish.fastpath.RECORD_FIELD (a test checks)


@dataclass
class RepoState:
    """The signed state a backend serves now (all None/empty for a new repository)."""

    timestamp: Metadata[Timestamp] | None
    snapshot: Metadata[Snapshot] | None
    targets: Metadata[Targets] | None

    def target_files(self) -> dict[str, TargetFile]:
        return dict(self.targets.signed.targets) if self.targets else {}

def read_state(backend: Any) -> RepoState:
    """Follow timestamp → snapshot → targets as the backend serves them, signatures unchecked: for reading only.
    Nothing a publisher signs is built on this — ``cairn.sign.trusted.verified_state`` verifies first."""
    raw = backend.get(f"{METADATA}/timestamp.json")
    if raw is None:
        return RepoState(None, None, None)
    try:
        ts = Metadata[Timestamp].from_bytes(raw)
        snap_raw = backend.get(f"{METADATA}/{ts.signed.snapshot_meta.version}.snapshot.json")
        snap = Metadata[Snapshot].from_bytes(snap_raw) if snap_raw else None
        tmeta = snap.signed.meta.get("targets.json") if snap else None
        targets_raw = backend.get(f"{METADATA}/{tmeta.version}.targets.json") if tmeta else None
        targets = Metadata[Targets].from_bytes(targets_raw) if targets_raw else None
    except Exception as exc:
        raise CairnError(f"the repository's TUF metadata is unreadable ({exc}) — run cairn verify on it to see which file") from None
    return RepoState(ts, snap, targets)


@dataclass(frozen=True)
class SignedMetadata:
    """New metadata files in upload order (root first, timestamp last)."""

    files: tuple[tuple[str, bytes, bool], ...]  # (key, bytes, immutable)


def sign_state(keys: KeySet, root: Metadata[Root], state: RepoState, targets: dict[str, TargetFile],
               *, force: bool = False) -> SignedMetadata | None:
    """New targets/snapshot/timestamp for ``targets``; None when nothing changed and nothing is expiring."""
    now = datetime.now(UTC).replace(microsecond=0)
    if not force and not needs_signing(state, targets, now):
        return None
    serializer = JSONSerializer(compact=False)
    files: list[tuple[str, bytes, bool]] = []
    root_bytes = root.to_bytes(serializer)
    files.append((f"{METADATA}/{root.signed.version}.root.json", root_bytes, True))
    files.append((f"{METADATA}/root.json", root_bytes, False))

    targets_version = (state.targets.signed.version + 1) if state.targets else 1
    tmd = Metadata(Targets(version=targets_version, expires=now + TARGETS_EXPIRY, targets=dict(sorted(targets.items()))))
    tmd.sign(keys.signer("targets"))
    targets_bytes = tmd.to_bytes(serializer)
    files.append((f"{METADATA}/{targets_version}.targets.json", targets_bytes, True))

    snapshot_version = (state.snapshot.signed.version + 1) if state.snapshot else 1
    smd = Metadata(Snapshot(version=snapshot_version, expires=now + SNAPSHOT_EXPIRY,
                            meta={"targets.json": MetaFile(version=targets_version)}))
    smd.sign(keys.signer("online"))
    files.append((f"{METADATA}/{snapshot_version}.snapshot.json", smd.to_bytes(serializer), True))

    timestamp_version = (state.timestamp.signed.version + 1) if state.timestamp else 1
    tsmd = Metadata(Timestamp(version=timestamp_version, expires=now + TIMESTAMP_EXPIRY,
                              snapshot_meta=MetaFile(version=snapshot_version), unrecognized_fields=record_binding(targets)))
    tsmd.sign(keys.signer("online"))
    files.append((f"{METADATA}/timestamp.json", tsmd.to_bytes(serializer), False))
    return SignedMetadata(tuple(files))


def needs_signing(state: RepoState, targets: dict[str, TargetFile], now: datetime | None = None) -> bool:
    """Whether serving ``targets`` takes new metadata: they differ from the signed ones, or the timestamp expires soon."""
    now = now or datetime.now(UTC).replace(microsecond=0)
    return not (state.targets is not None and state.timestamp is not None
                and _same(state.target_files(), targets) and state.timestamp.signed.expires - now > REFRESH_BEFORE
                and state.timestamp.signed.unrecognized_fields == record_binding(targets))


def record_binding(targets: dict[str, TargetFile]) -> dict[str, Any]:
    """The timestamp's extra field naming the publish record's length and sha256 (none without a record)."""
    record = targets.get(RECORD_KEY)
    if record is None:
        return {}
    return {RECORD_FIELD: {"length": record.length, "hashes": {"sha256": record.hashes["sha256"]}}}


def known_target(path: str, size: int, sha256: str, custom: dict[str, Any] | None = None) -> TargetFile:
    """The target entry from a digest already known (``TargetFile.from_data`` would hash the bytes again)."""
    return TargetFile(size, {"sha256": sha256}, path, {"custom": custom} if custom else None)


def target_file(path: str, data: bytes, custom: dict[str, Any] | None = None) -> TargetFile:
    tf = TargetFile.from_data(path, data, ["sha256"])
    if custom:
        tf.unrecognized_fields["custom"] = custom
    return tf


def _same(old: dict[str, TargetFile], new: dict[str, TargetFile]) -> bool:
    return {p: t.to_dict() for p, t in old.items()} == {p: t.to_dict() for p, t in new.items()}


def load_root(path: Path) -> Metadata[Root]:
    """The root a key set pins (its ``root.json``), as python-tuf reads it; one line when it cannot be read."""
    try:
        return Metadata[Root].from_bytes(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise CairnError(f"cannot read TUF root {path} ({exc}) — run cairn keys init") from None
