"""Download one pinned file from the package indexes pip is configured with, verified before anything opens it.

``pip download`` of an sdist runs the package's build backend to read its metadata: code from the very file
whose sha256 was to be checked afterwards. Here the index's project page (PEP 691 JSON, or PEP 503 HTML from
mirrors and ``file://`` trees that serve only that) gives the URL of the file with exactly the pinned name;
its bytes are streamed to a hidden temp name while hashed, and only a file whose sha256 equals the pin is
renamed into place. Nothing here unpacks, imports or builds what it downloads — building happens later, from
the verified file, in the build's own isolated environment.

The indexes are pip's own (``index-url`` then ``extra-index-url``, from ``pip config`` and ``PIP_*``
variables), and so are its ``proxy`` and ``cert`` settings, so a mirror configured for pip applies here too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import IO, NamedTuple
from urllib.parse import unquote, urljoin, urlparse, urlunparse

from cairn import proc
from cairn.errors import CairnError, PinMismatch

DEFAULT_INDEX = "https://pypi.org/simple/"  # pip's own default when nothing is configured
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
_SCOPES = (":env:", "download", "global")  # pip's precedence: environment, then the command's section, then global


class IndexFile(NamedTuple):
    filename: str
    url: str
    sha256: str  # "" when the index does not say


@dataclass(frozen=True)
class PipSettings:
    """What pip would use to reach an index: where (in order), through which proxy, trusting which CA bundle."""

    indexes: list[str] = field(default_factory=lambda: [DEFAULT_INDEX])
    proxy: str = ""
    cert: str = ""

    def opener(self) -> urllib.request.OpenerDirector:
        """An opener with pip's proxy and CA bundle. The index client keeps its own opener rather than
        ``cairn.io``: it must honour those two settings, send Accept and Basic auth headers, and read the
        answer's Content-Type (JSON or HTML page) — ``cairn.io`` reads a URL's bytes with the defaults."""
        handlers: list[urllib.request.BaseHandler] = []
        if self.proxy:
            handlers.append(urllib.request.ProxyHandler({"http": self.proxy, "https": self.proxy}))
        if self.cert:
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=self.cert)))
        return urllib.request.build_opener(*handlers)


def pip_settings(log: IO[str] | None = None) -> PipSettings:
    """pip's ``index-url`` then ``extra-index-url``, ``proxy`` and ``cert``, as ``pip config list`` reports them."""
    listed = proc.run([sys.executable, "-m", "pip", "config", "list", "--disable-pip-version-check"], log=log).stdout
    values: dict[str, str] = {}
    for line in listed.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("'\"")

    def first(name: str) -> str:
        return next((values[f"{scope}.{name}"] for scope in _SCOPES if f"{scope}.{name}" in values), "")

    indexes = [first("index-url") or DEFAULT_INDEX, *first("extra-index-url").split()]
    return PipSettings(list(dict.fromkeys(indexes)), proxy=first("proxy"), cert=first("cert"))


def normalized(name: str) -> str:
    """PEP 503 project name normalisation: clients must request this form."""
    return re.sub(r"[-_.]+", "-", name).lower()


def redacted(url: str) -> str:
    """The URL with any credentials removed, for logs and messages."""
    parts = urlparse(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunparse(parts._replace(netloc=f"***@{host}" + (f":{parts.port}" if parts.port else "")))


def _request(url: str, accept: str) -> urllib.request.Request:
    """A request for ``url``; ``user:password@`` in an index URL (as pip allows) becomes a Basic auth header."""
    parts = urlparse(url)
    headers = {"Accept": accept, "User-Agent": "cairn"}
    if parts.username is not None:
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        host = parts.hostname or ""
        url = urlunparse(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))
    return urllib.request.Request(url, headers=headers)


def _open(settings: PipSettings, url: str, accept: str):  # type: ignore[no-untyped-def]
    """Open ``url`` (http, https or file) as pip would; a ``file://`` directory stands for its ``index.html``."""
    if url.startswith("file:"):
        path = Path(unquote(urlparse(url).path))
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            raise FileNotFoundError(str(path))
        url = path.as_uri()
    return settings.opener().open(_request(url, accept), timeout=60)


class _Links(HTMLParser):
    """The ``<a href>`` targets of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _sha256_of(fragment_or_hashes: str | dict[str, str]) -> str:
    if isinstance(fragment_or_hashes, dict):
        return str(fragment_or_hashes.get("sha256", "")).lower()
    name, _, value = fragment_or_hashes.partition("=")
    return value.lower() if name == "sha256" else ""


def project_files(settings: PipSettings, index: str, project: str) -> list[IndexFile]:
    """Every file the index lists for ``project`` (empty when the index does not have the project)."""
    page = urljoin(index.rstrip("/") + "/", normalized(project) + "/")
    try:
        with _open(settings, page, ACCEPT) as response:
            base = response.geturl()
            kind = response.headers.get_content_type() if page.startswith("http") else ""
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise CairnError(f"package index {redacted(page)} answered HTTP {exc.code} — check pip's index-url "
                         "(pip config list) and that the index is up") from None
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CairnError(f"cannot read package index {redacted(page)}: {exc} — check pip's index-url "
                         "(pip config list) and the network") from None
    if kind == JSON_TYPE or (not kind and body.lstrip()[:1] == b"{"):
        try:
            entries = json.loads(body)["files"]
            return [IndexFile(e["filename"], urljoin(base, e["url"]), _sha256_of(e.get("hashes") or {})) for e in entries]
        except (ValueError, KeyError, TypeError):
            raise CairnError(f"package index {redacted(page)} sent a JSON page that is not PEP 691 (no files[] with "
                             "filename and url) — point pip's index-url at a PEP 503/691 simple index") from None
    links = _Links()
    links.feed(body.decode("utf-8", "replace"))
    files = []
    for href in links.hrefs:
        url = urljoin(base, href)
        name = unquote(PurePosixPath(urlparse(url).path).name)
        files.append(IndexFile(name, url.split("#", 1)[0], _sha256_of(urlparse(url).fragment)))
    return files


def download_pinned(project: str, filename: str, sha256: str, out: Path, log: IO[str] | None = None,
                    settings: PipSettings | None = None, pinned_by: str = "the manifest") -> Path:
    """``out/filename``: the file of that exact name from the first index that lists it, its sha256 the pin's.

    A wrong hash (announced by the index, or found in the bytes) is refused before the file gets its name,
    and nothing of it is left in ``out``.
    """
    if PurePosixPath(filename).name != filename or filename in ("", ".", "..") or "\\" in filename:
        raise CairnError(f"pinned filename {filename!r} is not a plain file name — pin the file's own name as the index lists it")
    settings = settings or pip_settings(log)
    for index in settings.indexes:
        found = next((f for f in project_files(settings, index, project) if f.filename == filename), None)
        if found is None:
            continue
        if found.sha256 and found.sha256 != sha256:
            raise PinMismatch(f"{filename}: the index {redacted(index)} lists sha256 {found.sha256}, {pinned_by} pins {sha256} "
                              "— the upstream file changed or the pin is wrong; re-pin only after checking why")
        return _download_verified(settings, found.url, filename, sha256, out, log, pinned_by)
    names = ", ".join(redacted(i) for i in settings.indexes)
    raise CairnError(f"{filename} is not listed for project {project} on {names} — check the pin's filename, or "
                     "point pip at an index that has it (pip config set global.index-url URL)")


def _download_verified(settings: PipSettings, url: str, filename: str, sha256: str, out: Path, log: IO[str] | None, pinned_by: str) -> Path:
    partial = out / f".{filename}.partial"
    if log is not None:
        log.write(f"+ download {redacted(url)}\n")
    digest = hashlib.sha256()
    try:
        with _open(settings, url, "application/octet-stream, */*") as response, open(partial, "wb") as handle:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                handle.write(chunk)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise CairnError(f"cannot download {redacted(url)}: {exc} — check the network and pip's index-url") from None
    if digest.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise PinMismatch(f"{filename}: sha256 is {digest.hexdigest()}, {pinned_by} pins {sha256} — the upstream file changed "
                          "or the pin is wrong; re-pin only after checking why")
    final = out / filename
    os.replace(partial, final)
    return final
