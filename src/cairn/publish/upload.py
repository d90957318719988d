"""One upload run: what the repository holds, the writes still needed, and the commit that signs them.

A run judges what is present from one LIST and the signed targets (no request per object), writes the rest
concurrently (``cairn.publish.writer``: immutable keys with conditional writes, big content-addressed copies by
the server) and ends with the commit: the publish record, then the TUF metadata its ``SigningSession`` signs,
timestamp last. It may take over a ``Writer`` that has already written the bundle's blobs (``cairn.publish.blob_sender``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from cairn.errors import CairnError
from cairn.publish import fastpath
from cairn.publish.objects import JSON, Obj
from cairn.publish.report import Report
from cairn.publish.writer import THREADS, Log, Writer
from cairn.remote.backend import Backend, Listed
from cairn.sign.session import SigningSession
from cairn.sign.trusted import forget, remember, signed_bytes, verified_state
from cairn.sign.tuf import RepoState, known_target

if TYPE_CHECKING:
    from tuf.api.metadata import TargetFile


class Run(Writer):
    """One publisher run: what the repository holds now, what this run wrote, and the final signing."""

    def __init__(self, backend: Backend, signing: SigningSession, log: Log, writer: Writer | None = None) -> None:
        super().__init__(backend, log, after=writer)  # the early writer's LIST and writes, if there was one
        self.signing = signing
        self._check_root()
        # verify, then sign: the run builds only on what python-tuf verified against the pinned root
        # (``cairn.sign.trusted``; the early writer may have done it already). The LIST says whether there is
        # anything to verify: a first publish, to an empty repository, has nothing to build on.
        if self.verified is None and "metadata/timestamp.json" in self.listing:
            self.verified = verified_state(backend, signing.root_bytes())
        elif "metadata/timestamp.json" not in self.listing:  # a new repository: no older state of it to hold on to
            forget(backend.url, signing.root_bytes(), log)
        self.state: RepoState = self.verified or RepoState(None, None, None)
        self.known = {p: t.hashes.get("sha256", "") for p, t in self.state.target_files().items()}
        self.targets: dict[str, TargetFile] = self.state.target_files()

    def _check_root(self) -> None:
        """Never sign into a repository whose first root is another key set's: clients pinned to it would break."""
        served = self.first_root()  # read by the early writer, if it looked
        first = self.signing.first_root()
        if served is not None and first is not None and served != first:
            raise CairnError(f"{self.backend.url} was signed under another TUF root (metadata/1.root.json differs from "
                             "the root of these keys) — publish with that repository's keys, or to a new location")

    def signed(self, key: str) -> bytes | None:
        """``key``'s bytes as the verified targets list them (None when they do not list it; refused when no
        copy holds them): what a run reads from the repository to build on (``cairn.sign.trusted.signed_bytes``)."""
        return signed_bytes(self.backend, self.state, key)

    def upload_in_order(self, blobs: list[Obj], indexes: list[Obj]) -> None:
        """Blobs and every content-addressed copy first; then the plain names of ``indexes``, which link the
        blobs; the family root pages, which link the project pages, last."""
        self.upload("blobs and content-addressed copies", blobs, extra=indexes)
        self.upload("indexes", [o for o in indexes if not _family_root(o.key)], names="plain")
        self.upload("family root pages", [o for o in indexes if _family_root(o.key)], names="plain")

    def upload(self, phase: str, objs: list[Obj], *, names: str = "all", extra: Sequence[Obj] = ()) -> None:
        """``Writer.upload``, and every object that is a TUF target becomes a target of the next metadata."""
        super().upload(phase, objs, names=names, extra=extra)
        for obj in [*objs, *extra]:
            if obj.target:
                self.targets[obj.key] = _target(obj)

    def commit(self, report: Report, fingerprint: str = "") -> None:
        """Publish record → TUF targets → snapshot → timestamp, unless nothing changed; the timestamp is the commit.

        ``fingerprint`` is what ``cairn publish`` run again would compare ("" for promote and gate recording,
        which a re-publish must never skip over).
        """
        current = self.state.timestamp.signed.version if self.state.timestamp else 0

        def record(version: int) -> Obj:
            return Obj(fastpath.RECORD_KEY, fastpath.record_bytes(fingerprint, version, report.as_published()), JSON, False)

        recorded: Future[None] | None = None
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            if fingerprint or self.marked:
                final = record(current)  # what the record says if nothing needs signing
                changed = self.signing.needs_signing(self.state, {**self.targets, final.key: _target(final)})
                if changed:
                    final = record(current + 1)  # the timestamp version this commit writes
                    self._mark_in_progress()  # before any write of the commit, the record's own included
                self.targets[final.key] = _target(final)
                # written while the metadata is signed and sent (nothing written when it is already there and signed)
                recorded = pool.submit(Writer.upload, self, "publish record", [final])
                signed = self.signing.sign_metadata(self.state, self.targets) if changed else None
            else:  # nothing written by a promote/gates run: the record (if any) still describes the repository
                signed = self.signing.sign_metadata(self.state, self.targets)
            if signed is not None:
                self._mark_in_progress()
                files = [(key, data, immutable) for key, data, immutable in signed.files
                         if not (immutable and self.listing.get(key, Listed(-1)).size == len(data))]
                *before, timestamp = files  # root, targets and snapshot at once; the timestamp, the commit, after them

                def put(file: tuple[str, bytes, bool]) -> None:
                    self.backend.put(file[0], file[1], content_type=JSON, immutable=file[2])

                list(pool.map(put, before))
            if recorded is not None:
                recorded.result()  # the record is in place before the timestamp makes it current
            if signed is not None:
                put(timestamp)
                remember(self.backend.url, self.signing.root_bytes(), signed.files)  # the next run refuses anything older
                self.uploaded += len(files)
                report.signed = True
                self.log("metadata: targets, snapshot, timestamp signed")
        # nothing signed: the timestamp is the verified one this run built on, not whatever the bucket holds now
        report.timestamp_version = int(json.loads(signed.files[-1][1])["signed"]["version"]) if signed else current
        report.uploaded, report.skipped = self.uploaded, self.skipped


def _target(obj: Obj) -> TargetFile:
    return known_target(obj.key, obj.size, obj.sha256, obj.custom)


def _family_root(key: str) -> bool:
    """``<prefix>/simple/<family>/index.html`` (or ``.json``): the page that links every project page."""
    parts = key.split("/")
    return len(parts) >= 3 and parts[-3] == "simple"
