"""The test harness's moto S3 gives its disk back when a test is done with it.

moto keeps a bucket's objects in this process (objects past its key buffer as temporary files it has already
unlinked), not in the server a test stops. Without a reset a stopped server's objects stay on disk until pytest
exits, where ``du`` cannot see them: the shared-cache and publishing tests held 43 GB that way and filled a
CI disk half-way through the suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.servers import moto_s3

pytestmark = pytest.mark.s3


def _unlinked_bytes() -> int:
    """Bytes of files this process holds open that no longer have a name."""
    total = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            if os.readlink(fd).endswith(" (deleted)"):
                total += os.stat(fd).st_size
        except OSError:  # closed meanwhile
            continue
    return total


def test_a_stopped_moto_server_holds_no_object_on_disk() -> None:
    before = _unlinked_bytes()
    with moto_s3("harness") as s3:
        for n in range(3):  # past moto's 5 MB key buffer: each one a temporary file
            s3["client"].put_object(Bucket="harness", Key=f"big-{n}", Body=os.urandom(8 << 20))
        held = _unlinked_bytes() - before
        assert held >= 3 * (8 << 20), f"moto holds {held} bytes on disk for three 8 MiB objects"
    assert _unlinked_bytes() - before < (1 << 20)
