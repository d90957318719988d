"""Whether a URL names a place at all: checked before anything reads or writes there."""

from __future__ import annotations

from urllib.parse import urlparse

from cairn.errors import CairnError


def check_url_place(url: str) -> None:
    """Refuse a URL that names no place, before it is mistaken for another one: ``file://dir/x`` is the file
    ``/x`` on host ``dir`` (a repository published or verified there would be ``/x``), and ``https://`` or
    ``s3://`` with nothing after them would otherwise be read as a relative path."""
    parsed = urlparse(url)
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise CairnError(f"'{url}' names the host {parsed.netloc!r} — a local directory is file:///absolute/dir "
                         "(three slashes) or a plain path")
    if parsed.scheme in ("http", "https", "s3") and not parsed.netloc:
        what = "bucket" if parsed.scheme == "s3" else "host"
        raise CairnError(f"'{url}' names no {what} — give {parsed.scheme}://{what}/path")
