"""What ``cairn publish`` is doing while it works: bytes checked, bytes written, per phase.

A publish of the default release reads and hashes 21 GB before its first write and then writes it; without a
display that is a quarter of a minute of silence. A ``Meter`` is handed to the bundle check (``read_blobs``)
and to the writer (``Writer.meter``): ``phase(label, total)`` starts a bar and gives the function each thread
calls with the bytes it has just finished. On a terminal it is a rich progress display on stderr, as ``cairn
build`` shows one; elsewhere (a log, CI) one line per phase when it starts, on stdout; with ``--json`` nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Advance = Callable[[int], None]


class Meter:
    """No display (the library default, and ``--json``)."""

    def phase(self, label: str, total: int, count: int) -> Advance:
        """Start a phase of ``count`` objects, ``total`` bytes; returns what to call with each finished object's size."""
        return _nothing


def _nothing(_done: int) -> None:
    return None


def _size(n: int) -> str:
    # lazy: cairn.remote, email, _hashlib, 51 ms at start-up (python -X importtime)
    from cairn.remote.backend import human_bytes

    return human_bytes(n)


class LineMeter(Meter):
    """One line on stdout when a phase starts (not a terminal: a CI log gets no control characters). Not stderr:
    there a failed publish says one line, its error, and nothing else."""

    def phase(self, label: str, total: int, count: int) -> Advance:
        if count:
            print(f"{label}: {count} object(s), {_size(total)}…", file=sys.stdout, flush=True)
        return _nothing


class RichMeter(Meter):
    """A rich progress display on stderr: one bar per phase, bytes done of bytes wanted, speed and time."""

    def __init__(self, progress: object) -> None:
        self._progress = progress

    def phase(self, label: str, total: int, count: int) -> Advance:
        if not count:
            return _nothing
        progress = self._progress
        task = progress.add_task(f"{label} ({count})", total=max(total, 1))  # type: ignore[attr-defined]

        def advance(done: int) -> None:
            progress.advance(task, done)  # type: ignore[attr-defined]  # rich's Progress takes a lock: any thread

        return advance


@contextmanager
def meter_for(quiet: bool) -> Iterator[Meter]:
    """The display ``cairn publish`` shows: none when ``quiet`` (``--json``), rich on a terminal, lines elsewhere."""
    if quiet:
        yield Meter()
        return
    # lazy: rich, inspect, ast, 39 ms at start-up (python -X importtime)
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield LineMeter()
        return
    # lazy: rich, inspect, pickle, 55 ms at start-up (python -X importtime)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        yield RichMeter(progress)
