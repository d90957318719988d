"""A shared action cache in S3, or in a directory, in front of the local store, so many machines (CI shards) share one build.

Where: ``s3://bucket/prefix`` (endpoint from ``$CAIRN_S3_ENDPOINT``, as for publishing), or a directory the machines
share — an NFS mount, say — named ``file:///abs/dir`` or by its path. Both go through ``cairn.remote.backend``'s
``open_backend``, the one I/O layer, whose directory backend answers as S3 does: ``If-None-Match: *`` is a hard link
of a complete temp file onto the name (never a rename, so a key already there is never replaced and of two racing
writers one wins), a bounded download stops past its bound, and a symbolic link or FIFO planted there is refused,
never followed out of the directory. The directory must exist (a share that is not mounted is refused, not made on
the local disk). Everything below — the layout, the signatures and trust rules, what is deleted — is the same for
both: whoever can write files in the directory is the attacker the signatures stop, as a writer of the bucket is.

Layout under the prefix (or directory)::

    trees/<digest>.v2.tar.zst  one output tree (``cairn.store.archive``), named by its tree digest, with every
                               file of at least ``BLOB_MIN`` bytes left out and named by its sha256 instead
    blobs/<sha256>.zst         such a file, zstd-compressed: stored once however many trees hold it
    ac/<key>.v3.json           action record: key → output digest, the same JSON as the local ``ac/`` plus the
                               ``Bound`` of the tree (its entries and bytes), which its archive may not unpack past,
                               in a DSSE envelope signed by a cache writer's key (``cairn.store.signing``)

A record is used only when its signature verifies with a key of the reader's trust list (``--cache-trust``): one
with no signature, a bad one, or one by a key the list does not name is reported in one line ("cache: record
ac/<key>.v3.json is signed by an untrusted key …: building instead"), counted as ``untrusted``, and the action
runs locally; nothing it names is downloaded. A writer (not read-only) also deletes it, so its own signed record
can take the key (records are never overwritten). Records of earlier versions are never read: ``ac/<key>.v2.json``
is unsigned, and ``ac/<key>.json`` names no bound either, so an archive it points at could unpack to any size
(8 KB of zstd made 268 MB of zeros before the digest check could refuse it). Earlier
versions wrote whole trees, ``trees/<digest>.tar.zst`` and before that ``trees/<digest>.tar.gz``; both are
still read. Why blobs: a release holds each wheel in its package, index and bundle trees, and each library in the
SDK and in image trees. Archived whole, the default release's trees took the bucket several times the bytes of its
distinct files; a fetching machine now downloads each distinct file once and hard-links the rest.

Action keys never name a machine or a path, so a key computed on one machine finds the work of another.

Writing (after the local commit, so the local build never waits on a half-made upload): the blobs the bucket
lacks, then the tree, the record last, all with ``If-None-Match: *``. A machine killed between the two leaves a tree nobody points at
(harmless); a record is only ever written once its tree is in the bucket. Two machines racing on one action
both upload, the second record PUT is refused, and the first record stays: one record per key, never
overwritten. A local hit that the cache lacks is uploaded too, so a store built before the cache seeds it.
A build hands its uploads to a small pool and goes on with the next action (packing and sending a tree of GBs
took longer than making it from a local hit); ``finish`` waits for every one before the build reports, so the
report lists them all and a build's end means its work is in the bucket.

Reading (before an action would run, when the local store has no record): the record, then its tree, unpacked
into the local store's work area, its blobs filled in (hard links to a file this build already fetched with the
same bytes, else downloaded and checked against their sha256 and size), and digested there. A tree whose digest
is not the one its name and record claim, or a blob that is missing or not the bytes its name says, is a cache
miss: it is reported, never used, and (unless read-only) the wrong objects are deleted from the bucket — their
names prove them wrong — with the tree that needs a missing or wrong blob, so the rebuild that follows uploads
the right ones. Read-only mode (for untrusted jobs such
as pull requests) reads and never writes or deletes. The first request that fails (after the S3 wrapper's
retries) takes the cache offline for the rest of the build: it is reported once and every action then runs
locally, instead of every lookup waiting out the same retries.

What the signature cannot catch: a holder of a trusted writer key who signs a wrong tree's record. The cache is
as trustworthy as the machines holding those keys; write access to the bucket alone no longer suffices to poison
it (the prefix's write policy is defence in depth, ``docs/ci.md``). Writing needs the writer's key: a cache opened
for writing without one is refused before the build starts, and so is a key its own trust list does not name
(readers would ignore everything it pushed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlparse

import zstandard

from cairn.errors import CairnError
from cairn.store.archive import (
    Blob,
    Bound,
    DamagedArchive,
    HashingWriter,
    PastBound,
    measure,
    pack_to,
    unpack,
)
from cairn.store.base import ActionRecord
from cairn.store.local import LocalStore

if TYPE_CHECKING:
    from securesystemslib.signer import Signer

    from cairn.store.signing import Trust

_HEX64 = re.compile(r"[0-9a-f]{64}")
UPLOADS_AT_ONCE = 2  # each packs one tree (zlib and hashing free the GIL) while the other one's bytes are sent
# Files from this size on are blobs: below it, a request per file costs more than the bytes a repeat would
BLOB_MIN = 1 << 20
_CHUNK = 1 << 20


@dataclass
class CacheReport:
    """What the shared cache did during one build: the action ids per event, and the messages of problems."""

    url: str
    read_only: bool
    fetched: list[str] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)
    raced: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    untrusted: list[str] = field(default_factory=list)  # records not used: unsigned, bad signature, untrusted key
    failed: list[str] = field(default_factory=list)
    offline: str = ""  # set at the first failed request: the rest of the build does without the cache
    sent_bytes: int = 0  # archives and blobs written to the bucket, as stored (compressed)
    received_bytes: int = 0  # archives and blobs read from it, as stored
    linked_blobs: int = 0  # blobs of fetched trees filled by a hard link to a file already fetched, not downloaded

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "read_only": self.read_only, "fetched": sorted(self.fetched),
                "uploaded": sorted(self.uploaded), "raced": sorted(self.raced), "damaged": self.damaged,
                "untrusted": self.untrusted, "failed": self.failed, "offline": self.offline or None, "sent_bytes": self.sent_bytes,
                "received_bytes": self.received_bytes, "linked_blobs": self.linked_blobs}


def _stderr(message: str) -> None:
    print(f"cache: {message}", file=sys.stderr, flush=True)


class SharedCache:
    """The bucket (or directory) side: fetch a record and its verified tree into a local store, push them from one.

    ``trust``: the cache writers whose records are used (default: the list ``$CAIRN_CACHE_TRUST`` names);
    ``signer``: this writer's key (default: ``$CAIRN_CACHE_SIGNING_KEY``), needed unless ``read_only``."""

    def __init__(self, url: str, *, read_only: bool = False, warn: Callable[[str], None] = _stderr,
                 trust: Trust | None = None, signer: Signer | None = None) -> None:
        # lazy: cairn.remote, email, _ssl, 50 ms at start-up (python -X importtime)
        from cairn.remote.backend import FileBackend, open_backend  # the one I/O layer: S3 or a directory

        # lazy: cairn.store.signing, cairn.dsse, cryptography, 7 ms at start-up (python -X importtime)
        from cairn.store.signing import load_trust, load_writer

        parsed = urlparse(url)
        if parsed.scheme not in ("s3", "file", "") or (parsed.scheme == "s3" and not parsed.netloc):
            raise CairnError(f"--cache {url}: not an s3://bucket/prefix URL nor a directory (file:///abs/dir or a path) — "
                             "the shared cache lives in S3 or in a directory the machines share")
        self.trust = trust if trust is not None else load_trust(None)
        self.signer = None if read_only else signer if signer is not None else load_writer(None)
        if not read_only and self.signer is None:
            raise CairnError(f"--cache {url}: writing the cache needs a cache-writer key: --cache-key FILE or "
                             "$CAIRN_CACHE_SIGNING_KEY (make one with cairn keys cache-writer) — or read it only with --cache-read-only")
        if self.signer is not None and not self.trust.trusts(self.signer.public_key.keyid):
            raise CairnError(f"--cache {url}: the cache-writer key {self.signer.public_key.keyid[:16]} is not in the trust "
                             f"list {self.trust.source}, so no reader would use what it pushes — add its entry there "
                             "(cairn keys cache-writer printed it) or sign with a key the list names")
        self.backend = open_backend(url)
        if isinstance(self.backend, FileBackend):
            _check_directory(url, self.backend.root, read_only)
        self.read_only = read_only
        self.report = CacheReport(self.backend.url, read_only)
        self._warn = warn
        self._lock = threading.Lock()
        # (sha256, executable) -> a file of a tree this build fetched: later fetched trees hard-link to it, as
        # trees built locally share files, instead of holding one copy per tree
        self._content: dict[tuple[str, bool], Path] = {}
        self._blobs_there: set[str] = set()  # blobs this build saw in the bucket or put there: not asked about again
        self._uploads: ThreadPoolExecutor | None = None  # made at the first push_later
        self._pending: list[Future[None]] = []
        try:
            self.backend.list("ac/~probe")  # one cheap request: a wrong bucket or endpoint fails here, not per action
        except CairnError as exc:
            fix = "check the directory" if isinstance(self.backend, FileBackend) else "check the bucket and $CAIRN_S3_ENDPOINT"
            raise CairnError(f"cache {url}: {exc} — {fix}") from None

    # -- names ----------------------------------------------------------------------------------------------
    @staticmethod
    def record_key(key: str) -> str:
        return f"ac/{key}.v3.json"

    @staticmethod
    def tree_key(digest: str) -> str:
        return f"trees/{digest}.v2.tar.zst"

    @staticmethod
    def whole_tree_keys(digest: str) -> tuple[str, str]:
        """Where earlier versions put the tree, every file inside (zstd, and before that gzip): a record they wrote
        names only the digest, so these are tried after ``tree_key``."""
        return f"trees/{digest}.tar.zst", f"trees/{digest}.tar.gz"

    @staticmethod
    def blob_key(sha256: str) -> str:
        return f"blobs/{sha256}.zst"

    # -- reading ----------------------------------------------------------------------------------------------
    def fetch(self, key: str, local: LocalStore) -> ActionRecord | None:
        """The record for ``key`` with its tree now in ``local``, or None (a miss, reported when it is damage)."""
        if self.report.offline:
            return None
        try:
            data = self.backend.get(self.record_key(key))
        except CairnError as exc:
            self._note("failed", f"lookup of {key[:12]} failed: {exc} — running the action")
            return None
        if data is None:
            return None
        payload = self._trusted(key, data)
        if payload is None:
            return None
        parsed = _parse_record(payload, key)
        if parsed is None:  # no reader can use it: unless read-only, remove it so the rebuild can record the key
            removed = self._remove(self.record_key(key))
            self._note("damaged", f"{self.record_key(key)} is not a cache record for that key — not used{removed}; running the action")
            return None
        record, bound = parsed
        if local.has_tree(record.output):
            local.record(record)
            self._event("fetched", record.action)
            return record
        return self._fetch_tree(record, local, bound)

    def _fetch_tree(self, record: ActionRecord, local: LocalStore, bound: Bound) -> ActionRecord | None:
        # lazy: cairn.remote, email, ssl, 32 ms at start-up (python -X importtime)
        from cairn.remote.backend import ObjectTooLarge

        archive = _scratch(local.root / "tmp", "archive")  # the download goes to disk, never whole into memory
        blobs: list[Blob] | None = []
        try:
            try:
                name = self._download_tree(record.output, archive, _compressed_most(bound.stream))
            except ObjectTooLarge as exc:  # bigger than any archive of the tree its record bounds could be
                self._reject(record, self.tree_key(record.output), str(exc), with_record=True)
                return None
            except (CairnError, OSError) as exc:  # OSError: writing it here (a full disk)
                self._note("failed", f"{record.action}: download of {self.tree_key(record.output)} failed: {exc} — running the action")
                return None
            if name is None:
                self._note("damaged", f"{record.action}: the record names {self.tree_key(record.output)}, which the cache does not hold — running the action")
                return None
            if name != self.tree_key(record.output):
                blobs = None  # a whole tree, as earlier versions wrote it: a member naming a blob is damage there
            workdir = local.workdir(f"cache-{record.action}")
            try:
                files = unpack(archive, workdir, blobs=blobs, bound=bound)
            except DamagedArchive as exc:
                shutil.rmtree(workdir, ignore_errors=True)
                # past the bound: the archive or the record lies, and which cannot be told — both go, and the
                # rebuild's push puts back a tree and a record that agree
                self._reject(record, name, str(exc), with_record=isinstance(exc, PastBound))
                return None
            except OSError as exc:  # this machine's failure (a full disk): the tree in the bucket is not to blame
                shutil.rmtree(workdir, ignore_errors=True)
                self._note("failed", f"{record.action}: unpacking {name} failed here: {exc} — running the action")
                return None
        finally:
            archive.unlink(missing_ok=True)
        if blobs and not self._fill_blobs(record, name, workdir, blobs):
            shutil.rmtree(workdir, ignore_errors=True)
            return None
        self._share_files(workdir, files)
        got = local.commit(workdir, expect=record.output)
        if got != record.output:
            self._reject(record, name, f"its files digest to {got[:12]}")
            return None
        tree = local.tree(got)
        for rel, sha, executable in [*files, *((b.path, b.sha256, b.executable) for b in blobs or ())]:
            self._content.setdefault((sha, executable), tree / rel)
        local.record(record)
        self._event("fetched", record.action)
        return record

    def _download_tree(self, digest: str, archive: Path, max_bytes: int) -> str | None:
        """The name of the archive of ``digest`` the bucket holds, now in the file ``archive``; None if none.
        An archive of more than ``max_bytes`` raises ObjectTooLarge once it passes them."""
        for name in (self.tree_key(digest), *self.whole_tree_keys(digest)):
            if self.backend.get_file(name, archive, max_bytes=max_bytes):
                self._count("received_bytes", archive.stat().st_size)
                return name
        return None

    def _fill_blobs(self, record: ActionRecord, tree_name: str, workdir: Path, blobs: list[Blob]) -> bool:
        """Give each blob of an unpacked tree its bytes: a hard link to a file of this build with the same bytes
        and mode, else the blob downloaded and checked. False (reported) when one is missing, wrong or fails."""
        here: dict[tuple[str, bool], Path] = {}  # a blob twice in one tree is downloaded once
        for blob in blobs:
            target = workdir / blob.path
            known = self._content.get((blob.sha256, blob.executable)) or here.get((blob.sha256, blob.executable))
            if known is not None and _link_over(known, target):
                self._count("linked_blobs", 1)
                continue
            problem = self._download_blob(blob, target, workdir.parent)
            if problem == "failed":
                return False
            if problem:
                with self._lock:
                    self._blobs_there.discard(blob.sha256)  # a push later in this build must put it back
                removed = self._remove(self.blob_key(blob.sha256))
                tree_removed = self._remove(tree_name)
                self._note("damaged", f"{record.action}: {self.blob_key(blob.sha256)} ({blob.path}) {problem} — not "
                                      f"used{removed}{' with the tree that names it' if tree_removed else ''}; running the action")
                return False
            here[(blob.sha256, blob.executable)] = target
        return True

    def _download_blob(self, blob: Blob, target: Path, scratch_dir: Path) -> str:
        """Download ``blob`` into ``target`` (its place in an unpacked tree): "" when it holds the right bytes, else
        what is wrong with the bucket's copy, or "failed" (reported) when this machine or the request failed."""
        # lazy: cairn.remote, email, ssl, 32 ms at start-up (python -X importtime)
        from cairn.remote.backend import ObjectTooLarge

        name = self.blob_key(blob.sha256)
        compressed = _scratch(scratch_dir, "blob")
        try:
            try:
                present = self.backend.get_file(name, compressed, max_bytes=_compressed_most(blob.size))
                self._count("received_bytes", compressed.stat().st_size if present else 0)
            except ObjectTooLarge:
                return f"failed verification (more bytes than zstd makes of the {blob.size} the tree names)"
            except (CairnError, OSError) as exc:
                self._note("failed", f"download of {name} ({blob.path}) failed: {exc} — running the action")
                return "failed"
            if not present:
                return "is not in the cache"
            try:
                sha256, size = _decompress_to(compressed, target, blob.size)
            except zstandard.ZstdError as exc:
                return f"is not zstd ({exc})"
            except OSError as exc:
                self._note("failed", f"writing {blob.path} from {name} failed here: {exc} — running the action")
                return "failed"
        finally:
            compressed.unlink(missing_ok=True)
        if size > blob.size:
            return f"failed verification (more than the {blob.size} bytes the tree names)"
        if (sha256, size) != (blob.sha256, blob.size):
            return f"failed verification (its bytes have sha256 {sha256[:12]}, {size} bytes)"
        os.chmod(target, 0o755 if blob.executable else 0o644)
        return ""

    def _share_files(self, workdir: Path, files: list[tuple[str, str, bool]]) -> None:
        """Replace each unpacked file whose bytes and mode a tree fetched earlier has by a hard link to that
        file (same bytes, so the digest the commit checks is unchanged; any failure just keeps the copy)."""
        for rel, sha, executable in files:
            known = self._content.get((sha, executable))
            if known is not None:
                _link_over(known, workdir / rel)

    def _reject(self, record: ActionRecord, name: str, why: str, *, with_record: bool = False) -> None:
        """A tree that is not what its name says: never used; removed from the bucket unless read-only (with the
        record that named it, when asked)."""
        removed = self._remove(name)
        if with_record and removed and self._remove(self.record_key(record.key)):
            removed += " with its record"
        self._note("damaged", f"{record.action}: {name} failed verification ({why}) — not used{removed}; running the action")

    def _remove(self, name: str) -> str:
        """Delete an object that is wrong whatever reads it; says so for the report (nothing when read-only)."""
        if self.read_only:
            return ""
        try:
            self.backend.delete(name)
        except CairnError:
            return ""
        return ", removed from the cache"

    def _trusted(self, key: str, data: bytes) -> bytes | None:
        """The payload of the record for ``key`` when a trusted writer signed it; else None, reported in one line
        and (unless read-only) the record deleted, so this build's signed record can take the key."""
        # lazy: cairn.store.signing, cairn.dsse, cryptography, 7 ms at start-up (python -X importtime)
        from cairn.dsse import Unverified
        from cairn.store.signing import open_record, why_not

        try:
            return open_record(data, self.trust)
        except Unverified as exc:
            name = self.record_key(key)
            removed = "; removed from the cache" if self._remove(name) else ""
            self._note("untrusted", f"record {name} {why_not(exc, self.trust)}: building instead{removed}")
            return None

    def has_record(self, key: str) -> bool:
        """Whether the cache holds a trusted record for ``key`` (a local hit it lacks is uploaded: an untrusted
        record there is reported and removed, and does not stop the trusted one)."""
        if self.report.offline:
            return True  # unknown: do not upload
        try:
            data = self.backend.get(self.record_key(key))
        except CairnError as exc:
            self._note("failed", f"lookup of {key[:12]} failed: {exc}")
            return True  # unknown: do not upload blindly
        return data is not None and self._trusted(key, data) is not None

    # -- writing ----------------------------------------------------------------------------------------------
    def push(self, record: ActionRecord, local: LocalStore) -> None:
        """Upload the tree (unless the bucket has it), then the record; both conditional. Never raises: the
        local build is complete whatever the bucket says."""
        # lazy: cairn.remote, email, ssl, 32 ms at start-up (python -X importtime)
        from cairn.remote.backend import RefusedOverwrite

        # lazy: cairn.store.signing, cairn.dsse, cryptography, 7 ms at start-up (python -X importtime)
        from cairn.store.signing import sign_record

        if self.read_only or self.report.offline or self.signer is None:
            return
        try:
            name, tree = self.tree_key(record.output), local.tree(record.output)
            if not self.backend.exists(name):
                self._put_tree(name, tree, local)
            bound = measure(tree)
            body = {**json.loads(record.to_json()), "entries": bound.entries, "size": bound.size}
            signed = sign_record(body, self.signer)
            try:
                wrote = self._put_record(record.key, signed)
            except RefusedOverwrite:
                if not self._raced(record):
                    return
                try:  # the record there was untrusted and is deleted: ours takes the key
                    wrote = self._put_record(record.key, signed)
                except RefusedOverwrite:  # not deleted after all, or a third machine was quicker
                    self._event("raced", record.action)
                    return
            if wrote:
                self._event("uploaded", record.action)
            else:
                self._event("raced", record.action)  # the very same record was already there
        except (CairnError, OSError) as exc:  # OSError: writing the archive here (a full disk)
            self._note("failed", f"{record.action}: upload failed: {exc} — the local build is unaffected")

    def _put_record(self, key: str, signed: bytes) -> bool:
        return self.backend.put(self.record_key(key), signed, content_type="application/json", immutable=True)

    def push_later(self, record: ActionRecord, local: LocalStore) -> None:
        """``push`` in the background; the tree must stay in ``local`` until ``finish`` returns."""
        if self.read_only or self.report.offline:
            return
        if self._uploads is None:
            self._uploads = ThreadPoolExecutor(max_workers=UPLOADS_AT_ONCE, thread_name_prefix="cairn-cache-upload")
        self._pending.append(self._uploads.submit(self.push, record, local))

    def finish(self) -> None:
        """Wait for every upload handed to ``push_later`` (``push`` reports its own failures; an exception here
        is a bug and is raised)."""
        try:
            for upload in self._pending:
                upload.result()
        finally:
            if self._uploads is not None:
                self._uploads.shutdown(cancel_futures=True)  # interrupted: what has not started never starts
            self._uploads, self._pending = None, []

    def _put_tree(self, name: str, tree: Path, local: LocalStore) -> None:
        """The tree's archive, written to a file in the store's work area and sent from there (an output of
        gigabytes never sits in memory: a build sharing a whole release keeps to the machine's RAM), after the
        blobs it names that the bucket lacks."""
        # lazy: cairn.remote, email, ssl, 32 ms at start-up (python -X importtime)
        from cairn.remote.backend import RefusedOverwrite

        archive = _scratch(local.root / "tmp", "pack")
        blobs: list[Blob] = []
        try:
            with open(archive, "xb") as out:
                sha256 = pack_to(tree, out, blobs_from=BLOB_MIN, blobs=blobs)
            for blob in blobs:
                self._put_blob(blob, tree / blob.path, local)
            # refused: another machine's archive of this tree with other bytes (another zstd); verified on download
            with contextlib.suppress(RefusedOverwrite):
                if self.backend.put_file(name, archive, content_type="application/zstd", immutable=True, sha256=sha256):
                    self._count("sent_bytes", archive.stat().st_size)
        finally:
            archive.unlink(missing_ok=True)

    def _put_blob(self, blob: Blob, path: Path, local: LocalStore) -> None:
        """Upload one file as ``blobs/<sha256>.zst`` unless the bucket has it (asked once per build and blob)."""
        # lazy: cairn.remote, email, ssl, 32 ms at start-up (python -X importtime)
        from cairn.remote.backend import RefusedOverwrite

        name = self.blob_key(blob.sha256)
        with self._lock:
            if blob.sha256 in self._blobs_there:
                return
        if not self.backend.exists(name):
            compressed = _scratch(local.root / "tmp", "blob")
            try:
                with open(compressed, "xb") as out:
                    sha256 = _compress_to(path, out)
                # refused: another machine's copy, compressed by another zstd; verified on download all the same
                with contextlib.suppress(RefusedOverwrite):
                    if self.backend.put_file(name, compressed, content_type="application/zstd", immutable=True, sha256=sha256):
                        self._count("sent_bytes", compressed.stat().st_size)
            finally:
                compressed.unlink(missing_ok=True)
        with self._lock:
            self._blobs_there.add(blob.sha256)

    def _raced(self, record: ActionRecord) -> bool:
        """Another machine recorded this key first: a trusted record stays, and whether it agrees with ours is
        said. True when the record there was not trusted and is now removed (ours goes in its place)."""
        try:
            data = self.backend.get(self.record_key(record.key))
        except CairnError:
            self._event("raced", record.action)
            return False
        payload = self._trusted(record.key, data) if data is not None else None
        if data is not None and payload is None:
            return not self.read_only
        self._event("raced", record.action)
        parsed = _parse_record(payload or b"", record.key)
        if parsed is not None and parsed[0].output != record.output:
            self._warn(f"{record.action}: another machine recorded output {parsed[0].output[:12]} for the same key, "
                       f"this one built {record.output[:12]} — the action is not reproducible")
        return False

    # -- bookkeeping ------------------------------------------------------------------------------------------
    def _event(self, kind: str, action: str) -> None:
        with self._lock:
            getattr(self.report, kind).append(action)

    def _count(self, counter: str, amount: int) -> None:
        with self._lock:
            setattr(self.report, counter, getattr(self.report, counter) + amount)

    def _note(self, kind: str, message: str) -> None:
        self._event(kind, message)
        self._warn(message)
        if kind == "failed":
            with self._lock:
                first, self.report.offline = not self.report.offline, self.report.offline or message
            if first:  # every later request would wait out the same retries: build on without the cache
                self._warn(f"giving up on {self.report.url} for the rest of this build; actions run locally")


def _check_directory(url: str, root: Path, read_only: bool) -> None:
    """A directory cache must already be there (a mistyped path or a share that is not mounted is refused, not made
    on this machine's disk where no other machine sees it), and writable unless read-only: one line before the build."""
    if not root.is_dir():
        raise CairnError(f"--cache {url}: {root} is not a directory — make it (mkdir -p {root}) or mount the shared one there")
    if not read_only and not os.access(root, os.W_OK | os.X_OK):
        raise CairnError(f"--cache {url}: {root} is not writable here — give this user write access, or read it only with --cache-read-only")


def _link_over(known: Path, target: Path) -> bool:
    """Make ``target`` a hard link to ``known`` (same bytes and mode); False, ``target`` untouched, if it cannot be."""
    spare = target.parent / f".link-{uuid.uuid4().hex}"  # a name no tree has: pack and unpack never write dot-link-
    try:
        os.link(known, spare)
        os.replace(spare, target)
    except OSError:
        spare.unlink(missing_ok=True)
        return False
    return True


def _compressed_most(size: int) -> int:
    """The most bytes zstd (or gzip, for trees of earlier versions) can make of ``size`` bytes, with room to spare:
    what a download of such an object may take before it is plainly something else."""
    return size + size // 64 + (64 << 10)


def _decompress_to(compressed: Path, target: Path, limit: int) -> tuple[str, int]:
    """Decompress the zstd file ``compressed`` into ``target`` as it is read; the sha256 and size of what came out.
    Stops once more than ``limit`` bytes came out (the size the tree names): a blob never fills the disk."""
    digest, size = hashlib.sha256(), 0
    with open(compressed, "rb") as source, open(target, "wb") as out:
        reader = zstandard.ZstdDecompressor().stream_reader(source, read_size=_CHUNK, read_across_frames=True)
        while size <= limit and (chunk := reader.read(_CHUNK)):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return digest.hexdigest(), size


def _compress_to(path: Path, out: BinaryIO) -> str:
    """The file ``path`` zstd-compressed (level 1, one thread: the bytes depend on the file and zstd alone) into
    ``out``; the sha256 of the compressed bytes, which the upload's checksum needs."""
    sink: Any = HashingWriter(out)  # file-like enough for zstd's copy
    with open(path, "rb") as source:
        zstandard.ZstdCompressor(level=1, threads=0).copy_stream(source, sink, read_size=_CHUNK, write_size=_CHUNK)
    sink.flush()
    return str(sink.sha256.hexdigest())


def _scratch(directory: Path, what: str) -> Path:
    """A fresh file name in ``directory`` (the store's work area), never a name inside a tree."""
    return directory / f".{what}-{uuid.uuid4().hex}"


def _parse_record(data: bytes, key: str) -> tuple[ActionRecord, Bound] | None:
    """The record for ``key`` in ``data`` and the bound of its tree; None when it is no such record (a bound that
    is missing or not two whole numbers included: nothing could then stop its archive)."""
    try:
        fields = json.loads(data)
        entries, size = fields.pop("entries"), fields.pop("size")
        record = ActionRecord(**fields)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not all(type(n) is int and n >= 0 for n in (entries, size)):
        return None
    if record.key != key or not isinstance(record.output, str) or not _HEX64.fullmatch(record.output):
        return None
    if not isinstance(record.action, str):
        return None
    return record, Bound(entries, size)


class CachedStore:
    """A ``LocalStore`` with a ``SharedCache`` behind it: the executor sees one ``Store``."""

    def __init__(self, local: LocalStore, cache: SharedCache) -> None:
        self.local, self.cache = local, cache

    @property
    def root(self) -> Path:
        return self.local.root

    def lock(self) -> None:
        self.local.lock()

    def unlock(self) -> None:
        self.local.unlock()

    def lookup(self, key: str) -> ActionRecord | None:
        record = self.local.lookup(key)
        if record is None:
            return self.cache.fetch(key, self.local)
        if not self.cache.read_only and not self.cache.has_record(key):
            self.cache.push_later(record, self.local)  # built before this cache was used: seed it
        return record

    def record(self, record: ActionRecord) -> None:
        self.local.record(record)
        self.cache.push_later(record, self.local)

    def has_tree(self, digest: str) -> bool:
        return self.local.has_tree(digest)

    def tree(self, digest: str) -> Path:
        return self.local.tree(digest)

    def workdir(self, action_id: str) -> Path:
        return self.local.workdir(action_id)

    def commit(self, workdir: Path) -> str:
        return self.local.commit(workdir)

    def log_path(self, key: str) -> Path:
        return self.local.log_path(key)
