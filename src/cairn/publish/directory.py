"""Publishing to a local directory: a new repository appears whole or not at all, and a full disk is one line.

``cairn publish`` without ``--to`` writes ``<store>/publish``. A repository that does not exist yet (or an empty
directory) is written into a temp sibling (``.tmp-<name>.<pid>``) and renamed onto its name when the publish
has committed; a failure — a full disk, a refused key, Ctrl-C — removes the sibling, so the name the user gave
never holds a half-written tree. A directory that already holds a repository is written in place, as a bucket
is: every file under a temp name and renamed, the timestamp last, so it serves its previous release until the
new one is complete.

Before anything is written the space the publish needs there is worked out (``space_needed``): every artifact
that cannot become a hard link to the bundle's file (another file system) is copied, plus the small files the
publish makes. Too little free space stops the run first, with that figure; a disk that fills anyway (another
writer) stops it with the same line (``FileBackend.no_space``).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from cairn.io import TEMP_PREFIX
from cairn.remote.backend import Backend, FileBackend

# what a publish writes besides the artifacts, per artifact: its attestation, the content-addressed copy of the
# small ones, the sidecar and its copy, a share of the pages, matrices and metadata (the sample bundle: 6 KB)
SMALL_FILES_PER_ARTIFACT = 16 << 10


def space_needed(bundle_dir: Path, place: Path) -> int:
    """Bytes a publish of ``bundle_dir`` needs on ``place``'s file system: what must be copied there (an
    artifact on another device, not hard-linkable), both of its names when it is big (the content-addressed
    copy is then a second link or copy), plus ``SMALL_FILES_PER_ARTIFACT`` each."""
    # lazy: cairn.matrix, cairn.model, cairn.publish, 35 ms at start-up (python -X importtime)
    from cairn.matrix.bundle import load_bundle
    from cairn.publish.writer import COPY_MIN

    device = os.stat(_existing(place)).st_dev
    need = 0
    for artifact in load_bundle(bundle_dir).artifacts:
        try:
            st = os.stat(Path(bundle_dir) / "files" / artifact.path)
        except OSError:
            continue  # the publish's own check says it is missing
        copies = 0 if st.st_dev == device else (2 if st.st_size < COPY_MIN else 1)  # a big one's twin is a link to it
        need += copies * st.st_size + SMALL_FILES_PER_ARTIFACT
    return need


def free_space(place: Path) -> int:
    """Bytes an unprivileged writer may still use on ``place``'s file system."""
    st = os.statvfs(_existing(place))
    return st.f_bavail * st.f_frsize


def _existing(place: Path) -> Path:
    return next(p for p in (place, *place.parents) if p.exists())


class Place:
    """The directory being published into; ``settle``: waits for writes still running on other threads (the
    early blob writer), called before a failed publish's temp sibling is removed."""

    def __init__(self) -> None:
        self.settle: Callable[[], object] = lambda: None


@contextmanager
def publishing_into(backend: Backend, bundle_dir: Path) -> Iterator[Place]:
    """Around a publish to ``backend``: for a directory, the space check, and a new repository written into a temp
    sibling renamed onto its name at the end (removed on any failure). Another backend passes through."""
    place = Place()
    if not isinstance(backend, FileBackend):
        yield place
        return
    final = backend.root.absolute()
    backend.needed = space_needed(bundle_dir, final)
    fresh = not final.exists() or (final.is_dir() and not any(final.iterdir()))
    backend.fresh = fresh
    if backend.needed > free_space(final):
        raise backend.no_space("before writing anything")
    if not fresh:
        yield place
        return
    temp = final.parent / f"{TEMP_PREFIX}{final.name}.{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)  # a killed run of this pid's number long ago
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise backend.no_space(f"making {final.parent}") from None
    backend.root, backend.shown = temp, final
    try:
        yield place
        if temp.exists():
            os.rename(temp, final)  # onto an absent name, or an empty directory
    except BaseException:
        with suppress(BaseException):
            place.settle()
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        backend.root, backend.shown = final, None
