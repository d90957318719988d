"""The matrix ``cairn doctor`` reads when nobody names one: the release this host installs from.

A Cairn channel index in pip's or uv's configuration (``cairn.doctor.read.indexes``) —
``<repository>/channels/<channel>/simple/<family>/`` or a staged release's
``<repository>/staging/<version>/simple/<family>/`` — names the published repository, and beside it the
release's own matrix (``channels/<channel>/matrix.json``, ``staging/<version>/matrix.json``). That matrix is
trusted only as a signed TUF target of that repository under the pinned root (``cairn.sign.verify``): a
matrix found rather than given must prove where it came from, so anything short of that is refused in one
line, and the checks still run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlparse, urlunparse

from cairn.doctor.advice import LoadedMatrix
from cairn.doctor.snapshot import HostSnapshot
from cairn.errors import CairnError, InputError, UrlError
from cairn.matrix.model import parse_matrix
from cairn.remote.url import read_url
from cairn.sign.refresh import time_left
from cairn.sign.verify import cache_dir_for, load_pinned_root, repository_url, verify_target

_CAIRN_INDEX = re.compile(r"^(?P<repository>.+/)(?P<release>channels/[A-Za-z0-9_-]+|staging/[^/]+)/simple/[^/]+/?$")
PASS_MATRIX = "pass --matrix URL (a release's channels/<channel>/matrix.json) or set CAIRN_MATRIX"


@dataclass(frozen=True)
class ReleaseSource:
    """Where the release's matrix is, and which index configuration said so."""

    repository: str  # https://…/cairn/ (no credentials)
    target: str  # the signed target path: channels/stable/matrix.json
    where: str  # PIP_INDEX_URL, /etc/pip.conf [global] index-url, …
    index: str

    @property
    def url(self) -> str:
        return self.repository + self.target


def release_source(snap: HostSnapshot) -> ReleaseSource | None:
    """The first configured index that is a Cairn channel or staging index, in the installers' precedence."""
    for index in snap.indexes:
        url = _without_credentials(index.url)
        match = _CAIRN_INDEX.match(url)
        if match and urlparse(url).scheme in ("http", "https", "file", "s3"):
            return ReleaseSource(match["repository"], f"{match['release']}/matrix.json", index.where, url)
    return None


def _without_credentials(url: str) -> str:
    """Cairn indexes are read anonymously (as pip reads them), and a token in pip.conf must not reach the output."""
    parsed = urlparse(url)
    if "@" not in parsed.netloc:
        return url
    return urlunparse(parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1]))


def load_release_matrix(snap: HostSnapshot) -> tuple[list[LoadedMatrix], tuple[str, str]]:
    """The verified matrix of the release this host installs from; else [] and (status, the one line why not).

    Status ``no-matrix``: no release is known; ``refused``: its matrix could not be read or did not verify.
    """
    source = release_source(snap)
    if source is None:
        return [], ("no-matrix", "no compatibility matrix: no Cairn index is configured for pip or uv on this host "
                    f"(PIP_INDEX_URL, UV_DEFAULT_INDEX, pip.conf), so its release is unknown — {PASS_MATRIX}")

    said = f"{source.url} (the release of {source.where} {source.index})"
    try:
        data = read_url(source.url, timeout=30)  # the release's matrix, beside the index pip is configured with
    except UrlError as exc:
        return [], ("refused", f"cannot read the release's matrix {said}: {exc.detail} — {PASS_MATRIX}")
    try:
        root = load_pinned_root()
    except CairnError:
        return [], ("refused", f"refused the release's matrix {said}: no pinned TUF root to verify it with "
                    "— set CAIRN_TUF_ROOT to the release's root.json, or " + PASS_MATRIX)
    try:
        verify_target(source.repository, root, source.target, data)
    except CairnError as exc:
        return [], ("refused", f"refused the release's matrix {said}: {exc}")
    try:
        matrix = parse_matrix(data, source.url)
    except InputError as exc:
        return [], ("refused", f"refused the release's matrix {said}: {exc}")

    note = (f"verified: signed target {source.target} of {source.repository}; the release of {source.where}; "
            + time_left(cache_dir_for(repository_url(source.repository))))
    return [LoadedMatrix(matrix, source.url, source.repository, True, note)], ("", "")
