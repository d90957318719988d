"""The bundle's blobs go up while the signing libraries load.

Of a small release's first publish, about a third of a second passes before the first byte is sent: Python
imports tuf, securesystemslib and cryptography, loads the keys and signs the attestations, and the server waits.
The blobs need none of that: their keys are names and digests from ``bundle.json``, their bytes are the files.
So the blobs are sent from a thread of their own, started by ``cairn publish`` as soon as the bundle is parsed
(before the signing code is imported) or by ``publisher.publish`` itself:

1. every artifact is read and checked against ``bundle.json`` (``read_blobs``): a modified bundle is refused
   with nothing written, as before;
2. one LIST, made while step 1 runs together with the reads of the bucket's access settings (reads only). A
   repository that already has a first root must have exactly the keys' ``root.json``; where that cannot be
   told here (no root file, or a pinned root later than version 1), nothing is written here and the run's own
   check, under the signing libraries, decides as it always did;
3. the bucket policy, and the publish record marked in progress, as the run does before its first write;
4. every blob whose key the LIST does not hold, with its content-addressed copy (conditional writes, as
   always). A listed key is left to the run, which judges it against the signed targets.

The run then carries on from this writer (``Run(writer=)``): what it wrote is done, and counted once.
"""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from cairn.publish.backend import AccessState, Backend
from cairn.publish.background import in_background
from cairn.publish.blobs import Blob, read_blobs
from cairn.publish.bundle import Bundle
from cairn.publish.prefetch import Prefetch
from cairn.publish.writer import Log, Writer


class EarlyBlobs:
    """The blob thread: ``blobs()`` waits for the read and check, ``writer()`` for the writes."""

    def __init__(self, backend: Backend, bundle: Bundle, first_root: bytes | None, public_read: bool, log: Log,
                 prefetch: Prefetch | None = None) -> None:
        """``prefetch``: the bundle's files as ``cairn publish`` started reading them, before anything else."""
        self._backend, self._first_root, self._public_read, self._log = backend, first_root, public_read, log
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-early-blobs")
        self._blobs: Future[list[Blob]] = pool.submit(read_blobs, bundle, prefetch)
        # the reads (LIST, the served first root, the bucket's access settings) go on while the bundle is checked,
        # on a daemon thread: a bad bundle's error never waits for an unreachable endpoint's retries
        self._looked: Future[Writer] = in_background(self._look, "cairn-early-look")
        self._writer: Future[Writer] = pool.submit(self._write)
        pool.shutdown(wait=False)  # the two tasks run in order on the one thread; nothing more is submitted

    def blobs(self) -> list[Blob]:
        """Every blob, read and checked (a bad bundle raises here)."""
        return self._blobs.result()

    def writer(self) -> Writer:
        """The writer once every early write is done (its errors raise here)."""
        return self._writer.result()

    def _look(self) -> Writer:
        """Only reads: the LIST, the repository's first root if it has one, and what the bucket grants."""
        access: Future[AccessState] | None = None
        if self._public_read and self._first_root is not None:  # at once with the LIST: two more reads, no write
            access = in_background(self._backend.read_access, "cairn-early-access")
        writer = Writer(self._backend, self._log)
        if access is not None and self._may_write(writer):
            writer.access = access.result()
        return writer

    def _write(self) -> Writer:
        blobs = self._blobs.result()  # a bad bundle: nothing written (its error is the one reported)
        writer = self._looked.result()
        if not self._may_write(writer):
            return writer
        objs = [obj for blob in blobs for obj in (blob.obj, blob.sidecar) if obj is not None and obj.key not in writer.listing]
        if objs:
            if self._public_read:  # before anything is written: a refused policy leaves nothing half-published
                writer.grant_public_read()
            writer.upload("blobs, while the signing libraries load", objs)
        return writer

    def _may_write(self, writer: Writer) -> bool:
        """The keys' first root is known here, and the repository has none or that one, byte for byte."""
        return self._first_root is not None and writer.first_root() in (None, self._first_root)


def first_root_of(root_file: Path) -> bytes | None:
    """The ``metadata/1.root.json`` a key set's ``root.json`` makes, read without the signing libraries: its bytes
    when it is a version-1 root, else None (missing, unreadable or later: the early thread then writes nothing).
    ``cairn keys init`` writes it with the serializer the run compares with, so equal bytes are the same root."""
    try:
        data = root_file.read_bytes()
        signed = json.loads(data)["signed"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if isinstance(signed, dict) and signed.get("_type") == "root" and signed.get("version") == 1 else None
