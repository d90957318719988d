"""One upload run: what the repository holds, the writes still needed, and the commit that signs them.

A run judges what is present from one LIST and the signed targets (no request per object), writes the rest
concurrently — immutable keys with conditional writes, big content-addressed copies by the server — and ends
with the commit: the publish record, then the TUF metadata its ``SigningSession`` signs, timestamp last.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cairn.errors import CairnError
from cairn.publish import fastpath
from cairn.publish.backend import COPY_MAX, Backend, Listed
from cairn.publish.objects import JSON, Obj
from cairn.publish.report import Report
from cairn.sign.session import SigningSession
from cairn.sign.tuf import RepoState, hashed_name, known_target, read_state

if TYPE_CHECKING:
    from tuf.api.metadata import TargetFile

THREADS = 16
# From this size the content-addressed copy is a server-side copy of the plain name, not a second upload. Below
# it a CopyObject costs the server about as much as a small PUT (a request's fixed cost dominates) and would
# wait for the first upload to finish.
COPY_MIN = 4 << 20

Log = Callable[[str], None]


@dataclass(frozen=True)
class _Write:
    obj: Obj
    key: str
    immutable: bool
    source: str = ""  # a key this run already wrote with the same bytes: the server copies it


class Run:
    """One publisher run: what the repository holds now, what this run wrote, and the final signing."""

    def __init__(self, backend: Backend, signing: SigningSession, log: Log) -> None:
        self.backend, self.signing, self.log = backend, signing, log
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
        first = self.signing.first_root()
        if first is not None and served != first:
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
            changed = self.signing.needs_signing(self.state, {**self.targets, final.key: _target(final)})
            if changed:
                final = record(current + 1)  # the timestamp version this commit writes
            self.upload("publish record", [final])  # nothing written when it is already there and signed
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

            with ThreadPoolExecutor(max_workers=THREADS) as pool:
                list(pool.map(put, before))
            put(timestamp)
            self.uploaded += len(files)
            report.signed = True
            self.log("metadata: targets, snapshot, timestamp signed")
        ts = signed.files[-1][1] if signed else (self.backend.get("metadata/timestamp.json") or b"{}")
        report.timestamp_version = int(json.loads(ts).get("signed", {}).get("version", 0))
        report.uploaded, report.skipped = self.uploaded, self.skipped


def _target(obj: Obj) -> TargetFile:
    return known_target(obj.key, len(obj.data), obj.sha256, obj.custom)


def _family_root(key: str) -> bool:
    """``<prefix>/simple/<family>/index.html`` (or ``.json``): the page that links every project page."""
    parts = key.split("/")
    return len(parts) >= 3 and parts[-3] == "simple"
