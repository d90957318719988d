"""Work that a publish starts ahead of needing it, on daemon threads.

A publish makes some reads before it knows it will use them (the LIST and the bucket's access settings while
the bundle is still being checked). When the run fails for another reason — a modified bundle — the process
must exit with that error at once, not wait for those reads to finish retrying an unreachable endpoint, which
is what a ``ThreadPoolExecutor`` worker would make it do (they are joined at exit). A daemon thread is not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """``work`` started on a daemon thread of its own; its result, or its error, in the future returned."""
    future: Future[T] = Future()

    def settle() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=settle, name=name, daemon=True).start()
    return future
