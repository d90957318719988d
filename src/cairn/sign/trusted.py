"""What a publish or promote may build on: the repository's signed state, refreshed by python-tuf's own client.

Whoever can write to the bucket — a leaked CI credential, a pull-request job, a mirror — holds no key, but could
otherwise have a publisher carry their bytes into freshly signed metadata: a target added to an unsigned
``N.targets.json``, a staged record flipped in place. So before a run builds on an existing repository, python-tuf's
``ngclient.Updater`` — the client ``cairn verify`` uses, with the same trust anchor: the pinned root the run signs
with — refreshes it through the run's own backend (same credentials, same endpoint), and the run takes its targets
from what that client verified: signatures and thresholds, versions, lengths and hashes along timestamp → snapshot
→ targets. Anything else stops the run, naming the file, before anything is written.

One check is left out on purpose: expiry. A publish is what renews an expired timestamp (a repository nobody
published to for a day has one); what the keys signed is still what the keys signed. The trusted set's reference
time, which python-tuf reads only for its expiry checks, is set to the epoch for that. ``cairn verify`` keeps
every check, expiry included.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
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


def verified_state(backend: Any, root_bytes: bytes) -> RepoState:
    """The repository's timestamp, snapshot and targets as python-tuf verified them against ``root_bytes``.

    A CheckFailed naming the file when anything does not verify (a target planted in unsigned metadata, a
    timestamp or snapshot written without the online key, a file missing that the signed metadata names)."""
    fetcher = _BackendFetcher(backend)
    with tempfile.TemporaryDirectory(prefix="cairn-tuf-") as cache:
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
