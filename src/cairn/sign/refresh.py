"""``cairn refresh REPO [--keys DIR]``: re-sign timestamp and snapshot before they expire; and how long is left.

The timestamp lives a day and the snapshot a week (``cairn.sign.tuf``), so that a client cannot be held on old
metadata for longer; something has to renew them when no release is published — the CI workflow's scheduled
``refresh`` job, which holds the online key alone (``docs/ci.md``). Refreshing signs nothing new: the new snapshot
names the very targets version the old one named, and the new timestamp that snapshot.

Verify, then sign. The metadata a refresh re-signs is read from the bucket, which others may write. Before
signing over it, every file of the chain (timestamp → snapshot → targets) must carry the signatures the key
set's root demands of its role, each version must be the one the file before names, and no newer signed
snapshot or targets version may sit in the repository (a replayed older timestamp would otherwise be renewed,
rolling the repository back). Expiry is the one check left out: renewing expired metadata is the point.
Anything else stops the run with one line naming the file, and nothing is written.

The key set's root versions (``roots/`` in the key directory, ``cairn.sign.keys.rotate_root``) the repository
lacks are uploaded first, so a client bootstrapped from an older root can walk to the current one.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tuf.api.metadata import Metadata, MetaFile, Snapshot, Targets, Timestamp
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CairnError, CheckFailed

_VERSIONED = re.compile(r"^metadata/(\d+)\.(root|snapshot|targets)\.json$")
ROLES = ("timestamp", "snapshot", "targets", "root")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repository", help="the repository: a directory (file layout) or s3://bucket/prefix")
    parser.add_argument("--keys", type=Path, default=None,
                        help="key directory with online.pem, public.json and root.json (default ~/.config/cairn/keys or $CAIRN_KEYS)")


def run(args: argparse.Namespace) -> int:
    # lazy: cairn.sign, tuf, cairn.io, 8 ms at start-up (python -X importtime)
    from cairn.sign.keys import default_keys_dir

    result = refresh(args.repository, args.keys or default_keys_dir())
    print(f"refreshed {result.url}: {result.describe()}")
    return 0


@dataclass(frozen=True)
class Refreshed:
    url: str
    timestamp_version: int
    snapshot_version: int
    targets_version: int
    expires: dict[str, datetime]  # role → expiry of the metadata now served
    roots_uploaded: tuple[int, ...]

    def describe(self) -> str:
        roots = f"; uploaded root version(s) {', '.join(map(str, self.roots_uploaded))}" if self.roots_uploaded else ""
        return (f"timestamp v{self.timestamp_version}, snapshot v{self.snapshot_version} over targets "
                f"v{self.targets_version}{roots}; {expiry_line(self.expires)}")


def refresh(url: str, keys_dir: Path, *, now: datetime | None = None) -> Refreshed:
    """Verify the served chain against the key set's root, then upload missing roots, a new snapshot, a new timestamp."""
    # lazy: cairn.remote, cairn.sign, email, 42 ms at start-up (python -X importtime)
    from cairn.remote.backend import open_backend
    from cairn.sign.keys import load_keys, read_root, root_history
    from cairn.sign.tuf import SNAPSHOT_EXPIRY, TIMESTAMP_EXPIRY

    keys_dir = Path(keys_dir)
    keys = load_keys(keys_dir)
    online = keys.signer("online")
    root = read_root(keys_dir / "root.json")
    history = root_history(keys_dir)
    backend = open_backend(url)
    listing = backend.list("metadata/")
    versions: dict[str, list[int]] = {"root": [], "snapshot": [], "targets": []}
    for key in listing:
        match = _VERSIONED.match(key)
        if match:
            versions[match.group(2)].append(int(match.group(1)))
    if "metadata/timestamp.json" not in listing:
        raise CairnError(f"{backend.url}: no metadata/timestamp.json — not a published repository; publish it first")
    served_root = max(versions["root"], default=0)
    if served_root > root.signed.version:
        raise CairnError(f"{backend.url}: serves root version {served_root}, newer than {keys_dir / 'root.json'} "
                         f"(version {root.signed.version}) — refresh with the key set that signed that root")

    def verified(name: str, role: str, cls: Any) -> Any:
        raw = backend.get(name)
        if raw is None:
            raise CheckFailed(f"{name}: missing from the repository (the metadata before it names it)")
        try:
            md = Metadata[cls].from_bytes(raw)  # type: ignore[valid-type]
        except Exception as exc:
            raise CheckFailed(f"{name}: not {role} metadata ({exc}) — do not re-sign it; publish again") from None
        try:
            root.signed.verify_delegate(role, md.signed_bytes, md.signatures)
        except Exception as exc:
            raise CheckFailed(f"{name}: not signed by the {role} key(s) of root v{root.signed.version} ({exc}) — "
                              "someone without the keys wrote it; refusing to re-sign it") from None
        return md

    timestamp = verified("metadata/timestamp.json", "timestamp", Timestamp)
    snapshot_name = f"metadata/{timestamp.signed.snapshot_meta.version}.snapshot.json"
    snapshot = verified(snapshot_name, "snapshot", Snapshot)
    if snapshot.signed.version != timestamp.signed.snapshot_meta.version:
        raise CheckFailed(f"{snapshot_name}: holds snapshot version {snapshot.signed.version} — not the one its name says")
    targets_meta = snapshot.signed.meta.get("targets.json")
    if targets_meta is None:
        raise CheckFailed(f"{snapshot_name}: names no targets.json — not a Cairn repository's snapshot")
    targets_name = f"metadata/{targets_meta.version}.targets.json"
    targets = verified(targets_name, "targets", Targets)
    if targets.signed.version != targets_meta.version:
        raise CheckFailed(f"{targets_name}: holds targets version {targets.signed.version} — not the one its name says")
    for role, current in (("snapshot", snapshot.signed.version), ("targets", targets.signed.version)):
        newer = [v for v in versions[role] if v > current]
        if newer:
            raise CheckFailed(f"metadata/{max(newer)}.{role}.json: newer than the {role} version {current} the served "
                              "timestamp leads to — a replayed timestamp or an interrupted publish; refresh will not "
                              "renew it: run cairn verify on the repository, then publish again")
    now = now or datetime.now(UTC).replace(microsecond=0)
    if targets.signed.expires <= now:
        raise CairnError(f"{targets_name}: expired {targets.signed.expires:%Y-%m-%d %H:%M} UTC — refresh renews only "
                         "snapshot and timestamp; publish again with the targets key")

    serializer = JSONSerializer(compact=False)
    uploaded = []
    for version in sorted(v for v in history if v > served_root):
        backend.put(f"metadata/{version}.root.json", history[version], content_type="application/json", immutable=True)
        uploaded.append(version)
    if uploaded and uploaded[-1] == root.signed.version:
        backend.put("metadata/root.json", history[root.signed.version], content_type="application/json", immutable=False)

    new_snapshot = Metadata(Snapshot(version=snapshot.signed.version + 1, expires=now + SNAPSHOT_EXPIRY,
                                     meta={"targets.json": MetaFile(version=targets.signed.version)}))
    new_snapshot.sign(online)
    new_timestamp = Metadata(Timestamp(version=timestamp.signed.version + 1, expires=now + TIMESTAMP_EXPIRY,
                                       snapshot_meta=MetaFile(version=new_snapshot.signed.version)))
    new_timestamp.sign(online)
    for md in (new_snapshot, new_timestamp):  # what the root demands of them: the online key must be the one it names
        root.signed.verify_delegate(md.signed.type, md.signed_bytes, md.signatures)
    backend.put(f"metadata/{new_snapshot.signed.version}.snapshot.json", new_snapshot.to_bytes(serializer),
                content_type="application/json", immutable=True)
    backend.put("metadata/timestamp.json", new_timestamp.to_bytes(serializer), content_type="application/json", immutable=False)
    expires = {"timestamp": new_timestamp.signed.expires, "snapshot": new_snapshot.signed.expires,
               "targets": targets.signed.expires, "root": root.signed.expires}
    return Refreshed(backend.url, new_timestamp.signed.version, new_snapshot.signed.version, targets.signed.version,
                     expires, tuple(uploaded))


def upload_roots(url: str, keys_dir: Path) -> tuple[int, ...]:
    """The key set's root versions the repository lacks, uploaded oldest first (``rotate-root --repo``)."""
    # lazy: cairn.remote, queue, email, 50 ms at start-up (python -X importtime)
    from cairn.remote.backend import open_backend
    from cairn.sign.keys import root_history

    history = root_history(keys_dir)
    backend = open_backend(url)
    listed = {int(m.group(1)) for key in backend.list("metadata/") if (m := _VERSIONED.match(key)) and m.group(2) == "root"}
    if not listed:
        raise CairnError(f"{backend.url}: no metadata/N.root.json — not a published repository")
    if max(listed) > max(history):
        raise CairnError(f"{backend.url}: serves root version {max(listed)}, newer than this key set's {max(history)}")
    uploaded = tuple(v for v in sorted(history) if v > max(listed))
    for version in uploaded:
        backend.put(f"metadata/{version}.root.json", history[version], content_type="application/json", immutable=True)
    if uploaded:
        backend.put("metadata/root.json", history[uploaded[-1]], content_type="application/json", immutable=False)
    return uploaded


def expiry_of(cache: Path) -> dict[str, datetime]:
    """Each role's expiry in a TUF client's trusted-metadata directory (what ``cairn verify`` just verified)."""
    found = {}
    for role in ROLES:
        path = Path(cache) / f"{role}.json"
        try:
            stamp = json.loads(path.read_bytes())["signed"]["expires"]
            found[role] = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def expiry_line(expires: dict[str, datetime], now: datetime | None = None) -> str:
    """One line: how long the metadata has left — the soonest expiry first (that is when clients stop trusting it)."""
    if not expires:
        return "metadata expiry unknown"
    now = now or datetime.now(UTC)
    role, soonest = min(expires.items(), key=lambda item: item[1])
    others = ", ".join(f"{r} {_span(t - now)}" for r, t in expires.items() if r != role)
    left = soonest - now
    head = (f"metadata EXPIRED {_span(-left)} ago ({role}, {soonest:%Y-%m-%d %H:%M} UTC) — run cairn refresh"
            if left <= timedelta(0) else
            f"metadata valid for {_span(left)} more ({role} expires {soonest:%Y-%m-%d %H:%M} UTC)")
    return f"{head}; {others}" if others else head


def time_left(cache: Path, now: datetime | None = None) -> str:
    return expiry_line(expiry_of(cache), now)


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 0:
        return "-" + _span(-delta)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {rest // 60} min"
