"""Writing objects into the repository, without the signing libraries: what a publish run can do before they load.

A ``Writer`` knows what the repository holds from one LIST, and writes what is missing concurrently: immutable keys
with conditional writes, big content-addressed copies by the server. It is the half of ``upload.Run`` that needs no
TUF: ``cairn.publish.blob_sender`` uses it alone to send the bundle's blobs while tuf, securesystemslib and cryptography
are imported, and ``Run`` takes it over, with what it wrote, to judge the rest against the signed targets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from cairn.names import hashed_name
from cairn.publish import fastpath
from cairn.publish.objects import JSON, Obj
from cairn.publish.progress import Advance, Meter
from cairn.remote.backend import COPY_MAX, MULTIPART_THRESHOLD, AccessState, Backend, Listed

THREADS = 16
# At most this many bytes of objects are being written at once (a bigger object goes alone): 16 threads on a
# release's biggest wheels would otherwise hand 16 of them to the server together — moto, which reads each
# request body whole, was killed for memory at 13.7 GB on the default release.
IN_FLIGHT = 2 << 30
# At most this many multipart uploads at once: each holds up to ``backend.PART_THREADS`` parts in memory, so the
# publisher's memory is bounded by part size x part threads x this (plus 16 writers' 1 MiB send blocks), whatever
# the release and ``CAIRN_MULTIPART_THRESHOLD`` (the byte budget alone let 5 objects of 80 MiB go as 5 at once).
MULTIPART_AT_ONCE = 2
# From this size the content-addressed copy is a server-side copy of the plain name, not a second upload. Below
# it a CopyObject costs the server about as much as a small PUT (a request's fixed cost dominates) and would
# wait for the first upload to finish.
COPY_MIN = 4 << 20

ROOT_KEY = "metadata/1.root.json"  # a repository's first root: every later root is signed by the keys it names

Log = Callable[[str], None]


@dataclass(frozen=True)
class _Write:
    obj: Obj
    key: str
    immutable: bool
    source: str = ""  # a key this run already wrote with the same bytes: the server copies it


class Writer:
    """What the repository holds (one LIST), what this run wrote or found there with the right bytes, and counts."""

    def __init__(self, backend: Backend, log: Log, *, after: Writer | None = None) -> None:
        """``after``: carry on where another writer of this run stopped (its LIST, what it wrote, its counts)."""
        self.backend, self.log = backend, log
        self.known: dict[str, str] = {}  # target path → sha256 the signed metadata gives it (``Run`` fills it)
        self.meter: Meter = after.meter if after is not None else Meter()  # what the user sees of the writes
        if after is None:
            self.listing: dict[str, Listed] = backend.list()
            self.confirmed: dict[str, str] = {}  # key → sha256 this run wrote there, or found there by its digest
            self.uploaded = self.skipped = 0
            self.marked = self.granted = False  # the publish record marked in progress; the bucket policy granted
            self.served_first_root: bytes | None = None  # metadata/1.root.json as read by this run (when listed)
            self.access: AccessState | None = None  # the bucket's access settings as read by this run
            self.verified: Any = None  # the repository's state as python-tuf verified it (``cairn.sign.trusted``)
        else:
            assert after.backend is backend, "a run writes to one repository"
            self.listing, self.confirmed = after.listing, after.confirmed
            self.uploaded, self.skipped, self.marked, self.granted = after.uploaded, after.skipped, after.marked, after.granted
            self.served_first_root, self.access, self.verified = after.served_first_root, after.access, after.verified

    def grant_public_read(self) -> None:
        """Anyone may read the repository over HTTP (pip, uv, a TUF client): on S3 the bucket policy says so. Once
        per run, before its first write (from the access settings this run has read, if it has)."""
        if self.granted:
            return
        self.granted = True
        if self.backend.grant_public_read(self.access):
            self.log(f"bucket policy: anyone may read {self.backend.url} (and list the bucket, so a missing project is a 404)")

    def first_root(self) -> bytes | None:
        """The repository's ``metadata/1.root.json`` (None when the LIST has none), read once per run."""
        if self.served_first_root is None and ROOT_KEY in self.listing:
            self.served_first_root = self.backend.get(ROOT_KEY) or b""
        return self.served_first_root

    def _holds(self, key: str, obj: Obj) -> bool:
        """``key`` holds ``obj``'s bytes, judged from one LIST and the signed targets (no request per object)."""
        listed = self.listing.get(key)
        return listed is not None and listed.size == obj.size and self.known.get(obj.key) == obj.sha256

    def _keys(self, obj: Obj, names: str) -> list[str]:
        """Every key ``obj`` is written to under ``names``: ``"all"``, ``"hashed"`` (only the content-addressed
        copy) or ``"plain"`` (its readable names, ``_plain_keys``)."""
        keys = self._plain_keys(obj) if names != "hashed" else []
        return [*keys, hashed_name(obj.key, obj.sha256)] if obj.target and names != "plain" else keys

    def _writes(self, obj: Obj, names: str) -> list[_Write]:
        """The keys ``obj`` still needs written, judged from the LIST and the signed targets (no request per object).

        A content-addressed copy of a big object that this task writes under its plain name first is made by the
        server from that name (``source``): its bytes are sent once. A key this run already wrote is done.
        """
        sha, size = obj.sha256, obj.size
        writes: list[_Write] = []
        if names != "hashed":
            for key in self._plain_keys(obj):
                if self.confirmed.get(key) != sha and not self._holds(key, obj):
                    writes.append(_Write(obj, key, obj.immutable and not obj.alias))
        if obj.target and names != "plain":  # content-addressed copy: its name is its digest, so listed means present
            hashed = hashed_name(obj.key, sha)
            listed = self.listing.get(hashed)
            if self.confirmed.get(hashed) != sha and (listed is None or listed.size != size):
                # copy only onto a free name: a name already taken goes through the conditional PUT, as before
                copy = listed is None and writes and writes[0].key == obj.key and COPY_MIN <= size < COPY_MAX
                writes.append(_Write(obj, hashed, True, source=obj.key if copy else ""))
        return writes

    def _plain_keys(self, obj: Obj) -> list[str]:
        """Where ``obj``'s bytes go under a readable name. An index page (``…/<project>/index.html``, its TUF
        target name) is served at its directory key ``…/<project>/``, the URL pip and uv request; on disk the
        two are one file. Its ``index.html`` key is written too only where an earlier publish already made it
        (so a repository published before this layout never keeps a stale page there)."""
        if not obj.alias:
            return [obj.key]
        return [obj.alias, obj.key] if obj.key in self.listing else [obj.alias]

    def _mark_in_progress(self) -> None:
        """Before this run's first write: the publish record stops saying "published" (see ``fastpath``)."""
        if self.marked:
            return
        self.marked = True
        abort = getattr(self.backend, "abort_stale_uploads", None)  # S3: a killed run's multipart uploads
        if abort is not None:
            aborted = abort()
            if aborted:
                self.log(f"aborted {len(aborted)} stale multipart upload(s) under {self.backend.url} (a killed run's)")
        if fastpath.RECORD_KEY in self.listing:
            self.backend.put(fastpath.RECORD_KEY, fastpath.IN_PROGRESS, content_type=JSON, immutable=False)
            self.listing[fastpath.RECORD_KEY] = Listed(len(fastpath.IN_PROGRESS))

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
        candidates = sum(1 for obj, part in wanted for key in self._keys(obj, part) if self.confirmed.get(key) != obj.sha256)
        self.skipped += candidates - sum(len(t) for t in tasks)
        if tasks:
            self._mark_in_progress()
        tasks.sort(key=lambda writes: -writes[0].obj.size)
        advance = self.meter.phase(phase, sum(_sent(w) for t in tasks for w in t), sum(len(t) for t in tasks))
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            for written, present in pool.map(lambda writes: self._write_all(writes, advance), tasks):
                self.uploaded += written
                self.skipped += present
        self.log(f"{phase}: {len(objs) + len(extra)} object(s)")

    def _write_all(self, writes: list[_Write], advance: Advance) -> tuple[int, int]:
        """Write in order; returns how many keys were written and how many already held these bytes."""
        written = 0
        for w in writes:
            parts = _MULTIPART if _sent(w) >= MULTIPART_THRESHOLD else nullcontext()
            with _IN_FLIGHT.hold(w.obj.size), parts:
                written += self._write(w)
            advance(_sent(w))
            self.confirmed[w.key] = w.obj.sha256  # written, or there with these bytes (a different digest raises)
            self.listing[w.key] = Listed(w.obj.size)
        return written, len(writes) - written

    def _write(self, w: _Write) -> bool:
        obj = w.obj
        if w.source:
            return self.backend.copy(w.source, w.key, content_type=obj.content_type, immutable=w.immutable, sha256=obj.sha256)
        if obj.path is not None:  # an artifact: streamed from its file, never read into memory whole
            return self.backend.put_file(w.key, obj.path, content_type=obj.content_type, immutable=w.immutable, sha256=obj.sha256)
        return self.backend.put(w.key, obj.data, content_type=obj.content_type, immutable=w.immutable, sha256=obj.sha256)


def _sent(w: _Write) -> int:
    """The bytes a write sends (a server-side copy sends none)."""
    return 0 if w.source else w.obj.size


class _Budget:
    """Bytes being written right now, across every writer of the process, held below ``limit`` (one object
    bigger than the limit waits until nothing else is in flight, then goes alone)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, size: int) -> Iterator[None]:
        size = min(size, self.limit)
        with self._changed:
            self._changed.wait_for(lambda: self.used + size <= self.limit)
            self.used += size
        try:
            yield
        finally:
            with self._changed:
                self.used -= size
                self._changed.notify_all()


_IN_FLIGHT = _Budget(IN_FLIGHT)
_MULTIPART = threading.BoundedSemaphore(MULTIPART_AT_ONCE)
