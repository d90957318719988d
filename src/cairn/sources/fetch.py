"""Fetch and verify pinned inputs: deb, pypi, archive, git and path sources.

Every fetcher writes into ``out`` (an empty work directory) and verifies before returning. Downloads use
the host's own clients and settings (apt, git, pip's index configuration, urllib), so proxies and mirrors
configured on the host apply.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import urlparse

from cairn import proc
from cairn.digest import file_sha256
from cairn.errors import CairnError, PinMismatch, UrlError
from cairn.io import link_or_copy
from cairn.paths import repo_root
from cairn.remote.url import download, exists
from cairn.sources import debian
from cairn.sources.pypi import download_pinned

Fetcher = Callable[[Mapping[str, Any], Path, IO[str]], None]


def _verify(path: Path, algorithm: str, expected: str, what: str) -> None:
    h = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            h.update(chunk)
    actual = h.hexdigest()
    if actual != expected:
        path.unlink(missing_ok=True)
        raise PinMismatch(f"{what}: {algorithm} is {actual}, the manifest pins {expected} — the upstream file changed "
                          "or the pin is wrong; re-pin only after checking why")


def source_mirrors(store_mirror: Path | None) -> list[str]:
    """Where pinned inputs are kept by sha256, tried before the archive: the store's own mirror first, then
    every base of ``$CAIRN_SOURCE_MIRROR`` (space-separated; a directory or http(s) URL holding
    ``sources/sha256/<digest>``, e.g. a published release bucket)."""
    bases = [str(store_mirror)] if store_mirror else []
    return bases + os.environ.get("CAIRN_SOURCE_MIRROR", "").split()


def mirror_key(sha256: str) -> str:
    return f"sources/sha256/{sha256}"


def _from_mirrors(sha256: str, dest: Path, log: IO[str], store_mirror: Path | None) -> bool:
    for base in source_mirrors(store_mirror):
        url = f"{base.rstrip('/')}/{mirror_key(sha256)}"
        if not exists(url):
            continue
        try:
            download(url, dest)
            _verify(dest, "sha256", sha256, url)
        except CairnError as exc:
            log.write(f"mirror {url} unusable: {exc}\n")
            continue
        log.write(f"+ from mirror {url}\n")
        return True
    return False


def keep_in_mirror(path: Path, sha256: str, store_mirror: Path) -> None:
    """Hard-link a verified input into the store's mirror, so the pin outlives the archive."""
    dest = store_mirror / mirror_key(sha256)
    if not dest.exists():
        link_or_copy(path, dest)


def fetch_deb_from_suite(source: Mapping[str, Any], out: Path, log: IO[str], store_mirror: Path | None = None) -> None:
    """A .deb pinned to a suite: the mirror by sha256 first, then the suite's pool; verified, then kept."""
    package, version, sha256, suite = source["package"], source["version"], source["sha256"], source["suite"]
    name = f"{package}_{version.split(':')[-1]}_{source.get('arch', 'amd64')}.deb"
    dest = out / name
    if not _from_mirrors(sha256, dest, log, store_mirror):
        entries = debian.suite_index(suite).get(package, [])
        entry = next((e for e in entries if e.version == version), None)
        if entry is None:
            offered = debian.newest(entries).version if entries else "nothing"
            raise CairnError(f"{package}={version} is no longer served by {suite} and no mirror holds sha256 {sha256[:12]}…; "
                             f"{suite} now offers {offered} — run: cairn pins refresh MANIFEST")
        url = debian.pool_url(entry)
        log.write(f"+ download {url}\n")
        # the suite's Packages index (its digest checked against InRelease) names the .deb's size: no more is read
        download(url, dest, max_bytes=entry.size or None)
        _verify(dest, "sha256", sha256, f"{package}={version}")
    if store_mirror:
        keep_in_mirror(dest, sha256, store_mirror)


def fetch_deb(source: Mapping[str, Any], out: Path, log: IO[str], store_mirror: Path | None = None) -> None:
    """``apt-get download PKG=VERSION`` (optionally from the manifest's own apt source), then verify.

    A pin that names its ``suite`` is fetched from that suite's pool instead (the host's apt does not
    know sid or experimental), trying the source mirror first."""
    if source.get("suite"):
        fetch_deb_from_suite(source, out, log, store_mirror)
        return
    package, version = source["package"], source["version"]
    options: list[str] = []
    scratch = Path(tempfile.mkdtemp(prefix="cairn-apt-"))
    try:
        if source.get("apt_source"):
            (scratch / "lists" / "partial").mkdir(parents=True)
            (scratch / "sources.list").write_text(f"{source['apt_source']}\n")
            options = ["-o", f"Dir::Etc::SourceList={scratch / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/dev/null",
                       "-o", f"Dir::State::Lists={scratch / 'lists'}"]
            proc.run(["apt-get", "update", "-q", *options], log=log)
        proc.run(["apt-get", "download", "-q", *options, f"{package}={version}"], cwd=scratch, log=log)
        debs = sorted(scratch.glob("*.deb"))
        if len(debs) != 1:
            raise CairnError(f"apt-get download {package}={version} produced {len(debs)} files, expected one")
        _verify(debs[0], "sha256", source["sha256"], f"{package}={version}")
        shutil.move(str(debs[0]), out / debs[0].name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fetch_pypi(source: Mapping[str, Any], out: Path, log: IO[str]) -> None:
    """The exact file named by the pin, from pip's configured index, verified before anything opens it.

    Not ``pip download``: for an sdist that runs the package's build backend before the hash is checked.
    """
    download_pinned(source["name"], source["filename"], source["sha256"], out, log)


def fetch_archive(source: Mapping[str, Any], out: Path, log: IO[str]) -> None:
    """Download (``cairn.io``: http(s), file:// or s3://) to a temp name, verify, then rename into place."""
    url = source["url"]
    name = PurePosixPath(urlparse(url).path).name or "archive"
    unverified = out / f".{name}.unverified"
    log.write(f"+ download {url}\n")
    try:
        download(url, unverified, timeout=60)
    except UrlError as exc:  # the transport's own words, as this line always gave them
        raise CairnError(f"cannot download {url}: {exc.detail}") from None
    algorithm = "sha256" if "sha256" in source else "sha512"
    _verify(unverified, algorithm, source[algorithm], url)
    os.replace(unverified, out / name)


def fetch_git(source: Mapping[str, Any], out: Path, log: IO[str]) -> None:
    """Fetch exactly one commit and check it out without history; verify HEAD is the pinned commit."""
    url, commit = source["url"], source["commit"]
    checkout = out / "src"
    checkout.mkdir()
    git = ["git", "-c", "advice.detachedHead=false", "-c", "init.defaultBranch=main"]
    proc.run([*git, "init", "-q"], cwd=checkout, log=log)
    proc.run([*git, "fetch", "-q", "--depth", "1", url, commit], cwd=checkout, log=log)
    proc.run([*git, "checkout", "-q", "FETCH_HEAD"], cwd=checkout, log=log)
    head = proc.run(["git", "rev-parse", "HEAD"], cwd=checkout, log=log).stdout.strip()
    if head != commit:
        raise PinMismatch(f"{url}: checked out {head}, the manifest pins {commit}")
    shutil.rmtree(checkout / ".git")
    (out / "COMMIT").write_text(f"{url} {commit}\n")


def fetch_path(source: Mapping[str, Any], out: Path, log: IO[str]) -> None:
    """Copy a directory of this repository (our own sources) into the store."""
    root = repo_root()
    src = (root / source["dir"]).resolve()
    if not src.is_dir() or root not in src.parents:
        raise CairnError(f"source path {source['dir']} is not a directory inside {root}")
    log.write(f"+ copy {source['dir']}\n")
    shutil.copytree(src, out / "src", symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def path_digest(directory: str) -> str:
    """Content digest of a repository directory: part of the fetch key, so edits rebuild."""
    root = (repo_root() / directory).resolve()
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\n".encode())
    return h.hexdigest()


FETCHERS: dict[str, Fetcher] = {
    "deb": fetch_deb,
    "pypi": fetch_pypi,
    "archive": fetch_archive,
    "git": fetch_git,
    "path": fetch_path,
}


def fetch(kind: str, source: Mapping[str, Any], out: Path, log: IO[str], store_mirror: Path | None = None) -> None:
    """Fetch one pinned input into ``out``; ``store_mirror`` is the store's source mirror (debs keep a copy)."""
    if kind == "deb":
        fetch_deb(source, out, log, store_mirror)
    else:
        FETCHERS[kind](source, out, log)
