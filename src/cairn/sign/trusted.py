"""What a publish or promote may build on: the repository's signed state, refreshed by python-tuf's own client.

Whoever can write to the bucket — a leaked CI credential, a pull-request job, a mirror — holds no key, but could
otherwise have a publisher carry their bytes into freshly signed metadata: a target added to an unsigned
``N.targets.json``, a staged record flipped in place. So before a run builds on an existing repository, python-tuf's
``ngclient.Updater`` — the client ``cairn verify`` uses, with the same trust anchor: the pinned root the run signs
with — refreshes it through the run's own backend (same credentials, same endpoint), and the run takes its targets
from what that client verified: signatures and thresholds, versions, lengths and hashes along timestamp → snapshot
→ targets. Anything else stops the run, naming the file, before anything is written.

The versions the client verified, and those a run signed, are kept between runs, per repository and pinned root
(``state_file``: ``$CAIRN_TUF_CACHE/publisher/…json``, default ``~/.cache/cairn/tuf``). Each run still verifies
the whole chain from the root, fresh, and then refuses a timestamp, snapshot or targets older than the kept ones:
a bucket writer who puts back an older, validly signed state (dropping what was published since, or bringing back
a withdrawn target) is refused as a rollback, where a client starting from the root alone would accept it and the
run would re-sign it with fresh expiry. A machine that never published to the repository (a fresh CI runner) has
no such memory; a run to a repository with no timestamp (a first publish, or one reset on purpose) sets that
memory aside and says so (``forget``).

One check is left out on purpose: expiry. A publish is what renews an expired timestamp (a repository nobody
published to for a day has one); what the keys signed is still what the keys signed. The trusted set's reference
time, which python-tuf reads only for its expiry checks, is set to the epoch for that. ``cairn verify`` keeps
every check, expiry included.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tuf.api import exceptions as tuf_errors
from tuf.api.metadata import Metadata, TargetFile
from tuf.api.serialization import DeserializationError
from tuf.ngclient import FetcherInterface, Updater

from cairn.errors import CairnError, CheckFailed
from cairn.names import hashed_name
from cairn.sign.tuf import METADATA, RepoState

BASE = "cairn-backend:///"  # the URLs the client asks for; the fetcher turns them back into backend keys
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIX = ("the repository's signed metadata was changed without the keys — run cairn verify on it and restore what "
       "cairn signed; nothing was written")


class _BackendFetcher(FetcherInterface):
    """The TUF client's downloads, read through the publisher's backend (a missing key is a 404, as over HTTP)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.last = ""  # the key asked for last: the file that failed, when the client refuses something
        self.failed: CairnError | None = None  # the backend's own error (S3 unreachable), said as it is

    def _fetch(self, url: str) -> Iterator[bytes]:
        self.last = url.removeprefix(BASE)
        try:
            data = self.backend.get(self.last)
        except CairnError as exc:
            self.failed = exc
            raise
        if data is None:
            raise tuf_errors.DownloadHTTPError(f"{self.last} not found", 404)
        return iter([data])


ROLES = ("timestamp", "snapshot", "targets")


def state_file(url: str, root_bytes: bytes) -> Path:
    """Where this machine keeps the versions it last verified or signed of the repository at ``url`` under the root."""
    base = Path(os.environ.get("CAIRN_TUF_CACHE") or Path.home() / ".cache" / "cairn" / "tuf")
    name = hashlib.sha256(url.encode() + b"\0" + hashlib.sha256(root_bytes).digest()).hexdigest()[:16]
    return base / "publisher" / f"{name}.json"


def _kept(path: Path) -> dict[str, int]:
    try:
        doc = json.loads(path.read_bytes())
        return {role: int(doc[role]) for role in ROLES if role in doc}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _keep(url: str, root_bytes: bytes, versions: dict[str, int]) -> None:
    """Raise the kept versions to ``versions`` (never lower them). Best effort: a state that cannot be written
    only weakens the next run's check."""
    path = state_file(url, root_bytes)
    kept = _kept(path)
    merged = {role: max(kept.get(role, 0), versions.get(role, 0)) for role in ROLES}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps({"url": url, **merged}, sort_keys=True) + "\n")
        partial.replace(path)
    except OSError:
        pass


def forget(url: str, root_bytes: bytes, log: Callable[[str], None]) -> None:
    """A run to a repository with no timestamp starts it over: the versions kept from before would make the next
    run refuse the new ones as a rollback, so they are set aside, and that is said (a bucket writer who removed the
    timestamp gets a new repository, never the old targets re-signed)."""
    path = state_file(url, root_bytes)
    version = _kept(path).get("timestamp")
    path.unlink(missing_ok=True)
    if version is not None:
        log(f"{url} has no metadata/timestamp.json: a new repository — this machine had verified timestamp version "
            f"{version} there; that state is set aside")


def remember(url: str, root_bytes: bytes, files: Iterable[tuple[str, bytes, bool]]) -> None:
    """The versions a run just signed and wrote are kept: the next run refuses anything older."""
    versions = {}
    for key, data, _immutable in files:
        role = key.removeprefix(f"{METADATA}/").removesuffix(".json").rpartition(".")[2]
        if role in ROLES:
            versions[role] = int(json.loads(data)["signed"]["version"])
    _keep(url, root_bytes, versions)


def _check_rollback(backend: Any, root_bytes: bytes, state: RepoState) -> None:
    """Refuse a verified state older than the one this machine verified or signed there before, then keep it."""
    path = state_file(backend.url, root_bytes)
    kept = _kept(path)
    now = {"timestamp": state.timestamp, "snapshot": state.snapshot, "targets": state.targets}
    versions = {role: md.signed.version for role, md in now.items() if md is not None}
    older = [role for role in ROLES if versions.get(role, 0) < kept.get(role, 0)]
    if older:
        role = older[0]
        raise CheckFailed(f"{backend.url}/{METADATA}/timestamp.json: an older signed state than this machine verified there "
                          f"before ({role} version {versions.get(role, 0)} < {kept[role]}) — a bucket writer put back old "
                          f"metadata; nothing was written. If the repository was reset on purpose, remove {path}")
    _keep(backend.url, root_bytes, versions)


def verified_state(backend: Any, root_bytes: bytes) -> RepoState:
    """The repository's timestamp, snapshot and targets as python-tuf verified them against ``root_bytes``,
    then held to what this machine verified or signed there before (``state_file``).

    A CheckFailed naming the file when anything does not verify (a target planted in unsigned metadata, a
    timestamp or snapshot written without the online key, a file missing that the signed metadata names, an
    older signed state put back)."""
    fetcher = _BackendFetcher(backend)
    with tempfile.TemporaryDirectory(prefix="cairn-tuf-") as cache:
        state = _refresh(backend, fetcher, cache, root_bytes)
    _check_rollback(backend, root_bytes, state)
    return state


def _refresh(backend: Any, fetcher: _BackendFetcher, cache: str, root_bytes: bytes) -> RepoState:
    """python-tuf's refresh from the root alone, in a fresh metadata directory: every file verified from the root."""
    try:
        updater = Updater(cache, BASE + f"{METADATA}/", None, None, fetcher=fetcher, bootstrap=root_bytes)
    except (tuf_errors.RepositoryError, DeserializationError, ValueError) as exc:
        raise CairnError(f"the pinned TUF root does not load ({type(exc).__name__}: {exc}) — pass the root.json "
                         "of the release keys") from None
    trusted = getattr(updater, "_trusted_set", None)
    if trusted is None or not hasattr(trusted, "reference_time"):  # a python-tuf whose internals moved
        raise CairnError("this python-tuf has no trusted set with a reference time — install the python-tuf "
                         "cairn was tested with (tuf 5 to 7)")
    trusted.reference_time = EPOCH  # expiry is the one check a publish does not need (module docstring)
    try:
        updater.refresh()
    except (tuf_errors.RepositoryError, tuf_errors.DownloadError, DeserializationError) as exc:
        if fetcher.failed is not None:
            raise fetcher.failed from None
        what = "missing (the signed metadata names it)" if isinstance(exc, tuf_errors.DownloadHTTPError) else \
            f"does not verify against the pinned root ({type(exc).__name__}: {exc})"
        raise CheckFailed(f"{backend.url}/{fetcher.last or METADATA}: {what} — {FIX}") from None
    # the objects python-tuf verified, as it holds them (parsing the persisted files again would cost as much
    # as the targets' own parse); a run reads only their signed parts
    return RepoState(Metadata(trusted.timestamp), Metadata(trusted.snapshot), Metadata(trusted.targets))


def signed_bytes(backend: Any, state: RepoState, key: str) -> bytes | None:
    """``key``'s bytes as the verified targets list them, read from its content-addressed copy (the plain name of a
    mutable object may hold what a killed run wrote and never signed); None when the targets do not list ``key``.
    Refused in one line when the copy is missing or its length or sha256 is not the signed one."""
    info: TargetFile | None = state.target_files().get(key)
    if info is None:
        return None
    sha = info.hashes.get("sha256", "")
    data = backend.get(hashed_name(key, sha)) if sha else None
    try:
        if data is None:
            raise tuf_errors.LengthOrHashMismatchError("missing")
        info.verify_length_and_hashes(data)
    except tuf_errors.LengthOrHashMismatchError:
        raise CheckFailed(f"{backend.url}/{key} is not the file its signed targets list (sha256 {sha[:12]}…, "
                          f"{info.length} bytes) — it was changed after signing; run cairn verify on the repository "
                          "and restore what cairn signed") from None
    return data
