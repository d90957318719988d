"""A download whose size the caller knows (a pinned .deb's size from the signed Packages index, a cache record's
bound) stops as soon as the source sends more: one line, and nothing of it left on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import UrlError
from cairn.remote.url import download
from support.servers import serve_directory


def test_a_download_that_sends_more_than_its_known_size_stops_there(tmp_path: Path) -> None:
    www = tmp_path / "www"
    www.mkdir()
    (www / "pkg.deb").write_bytes(b"x" * 300_000)
    out = tmp_path / "out"
    out.mkdir()
    with serve_directory(www) as base:
        download(f"{base}/pkg.deb", out / "exact.deb", max_bytes=300_000)
        assert (out / "exact.deb").stat().st_size == 300_000
        with pytest.raises(UrlError) as refused:
            download(f"{base}/pkg.deb", out / "pkg.deb", max_bytes=1000)
    message = str(refused.value)
    assert message == f"cannot download {base}/pkg.deb: it sends more than the 1000 bytes it should have", message
    assert sorted(p.name for p in out.iterdir()) == ["exact.deb"]  # no partial, no pkg.deb
