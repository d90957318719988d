"""The bundle's blobs go up while the signing libraries load.

Of a small release's first publish, about a third of a second passes before the first byte is sent: Python
imports tuf, securesystemslib and cryptography, loads the keys and signs the attestations, and the server waits.
The blobs need none of that: their keys are names and digests from ``bundle.json``, their bytes are the files.
So the blobs are sent from a thread of their own, started by ``cairn publish`` as soon as the bundle is parsed
(before the signing code is imported) or by ``publisher.publish`` itself:

1. every artifact is read and checked against ``bundle.json`` (``read_blobs``): a modified bundle is refused
   with nothing written, as before;
2. one LIST, with the reads of the bucket's access settings (``cairn.publish.repo_reads``: reads only, which
   ``cairn publish`` starts before the bundle is even parsed). A repository that already has a first root must
   have exactly the keys' ``root.json``; where that cannot be told here (no root file, or a pinned root later
   than version 1), nothing is written here and the run's own check, under the signing libraries, decides as
   it always did;
3. a repository that already has a timestamp is verified against the pinned root first
   (``cairn.sign.trusted``: python-tuf's client, which waits for the signing libraries; a repository that does
   not verify gets nothing written), then the bucket policy, and the publish record marked in progress, as the
   run does before its first write;
4. every blob whose key the LIST does not hold, with its content-addressed copy (conditional writes, as
   always). A listed key is left to the run, which judges it against the signed targets.

The run then carries on from this writer (``Run(writer=)``): what it wrote is done, and counted once.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from cairn.matrix.bundle import Bundle
from cairn.publish.blobs import Blob, read_blobs
from cairn.publish.prefetch import Prefetch
from cairn.publish.progress import Meter
from cairn.publish.repo_reads import may_write_early, start_look
from cairn.publish.writer import Log, Writer
from cairn.remote.backend import Backend


class EarlyBlobs:
    """The blob thread: ``blobs()`` waits for the read and check, ``writer()`` for the writes."""

    def __init__(self, backend: Backend, bundle: Bundle, first_root: bytes | None, public_read: bool, log: Log,
                 prefetch: Prefetch | None = None, looked: Future[Writer] | None = None, meter: Meter | None = None) -> None:
        """``prefetch``: the bundle's files as ``cairn publish`` started reading them, before anything else;
        ``looked``: the reads (``cairn.publish.repo_reads``) as ``cairn publish`` started them, before the bundle was read;
        ``meter``: the progress display (``cairn.publish.progress``) of the check and of every write."""
        self._first_root, self._public_read = first_root, public_read
        self._meter = meter or Meter()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-early-blobs")
        self._blobs: Future[list[Blob]] = pool.submit(self._read, bundle, prefetch)
        # the reads go on while the bundle is checked (on a daemon thread: a bad bundle's error never waits for an
        # unreachable endpoint's retries)
        self._looked = looked or start_look(backend, first_root, public_read, log)
        self._writer: Future[Writer] = pool.submit(self._write)
        pool.shutdown(wait=False)  # the two tasks run in order on the one thread; nothing more is submitted

    def blobs(self) -> list[Blob]:
        """Every blob, read and checked (a bad bundle raises here)."""
        return self._blobs.result()

    def writer(self) -> Writer:
        """The writer once every early write is done (its errors raise here)."""
        return self._writer.result()

    def _read(self, bundle: Bundle, prefetch: Prefetch | None) -> list[Blob]:
        wanted = [bundle.file(a) for a in bundle.artifacts if a.kind != "metadata"]
        sizes = sum(p.stat().st_size for p in wanted if p.is_file())  # a missing one is read_blobs's one-line error
        return read_blobs(bundle, prefetch, self._meter.phase("checking the bundle's files", sizes, len(wanted)))

    def _write(self) -> Writer:
        blobs = self._blobs.result()  # a bad bundle: nothing written (its error is the one reported)
        writer = self._looked.result()
        writer.meter = self._meter
        if not may_write_early(writer, self._first_root):
            return writer
        objs = [obj for blob in blobs for obj in (blob.obj, blob.sidecar) if obj is not None and obj.key not in writer.listing]
        if objs and "metadata/timestamp.json" in writer.listing:
            # verify, then write: a repository that does not verify against the pinned root gets nothing, not even
            # blobs (this waits for the signing libraries; only a first publish writes before they load)
            # lazy: cryptography, urllib3, securesystemslib, 89 ms at start-up (python -X importtime)
            from cairn.sign.trusted import verified_state

            writer.verified = verified_state(writer.backend, self._first_root)  # type: ignore[arg-type]
        if objs:
            if self._public_read:  # before anything is written: a refused policy leaves nothing half-published
                writer.grant_public_read()
            writer.upload("blobs, while the signing libraries load", objs)
        return writer
