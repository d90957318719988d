"""``cairn verify``: check a repository, a file, the matrix or an image against the pinned TUF root.

Metadata is verified by python-tuf's own client (``ngclient.Updater``), bootstrapped from the pinned
``root.json``; its trusted state is kept in a cache directory per repository, so a replayed older
timestamp is rejected on the next run. Then every target is fetched under both of its names and checked
against the signed length and sha256, and every ``.intoto.jsonl`` is checked against the provenance key
(itself a signed target) and its subject digest. Any mismatch is a CheckFailed that names the object.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from securesystemslib.signer import SSlibKey
from tuf.api import exceptions as tuf_errors
from tuf.api.metadata import Metadata, Root
from tuf.api.serialization import DeserializationError
from tuf.api.serialization.json import JSONSerializer
from tuf.ngclient import FetcherInterface, Updater

from cairn.errors import CairnError, CheckFailed, UrlError
from cairn.names import hashed_name, relpath_problem
from cairn.paths import repo_root
from cairn.remote.places import check_url_place
from cairn.remote.url import read_status, read_url
from cairn.sign.provenance import verify_attestation


class AnyFetcher(FetcherInterface):
    """``file://``, ``http(s)://`` (anonymous, as pip reads the index) and ``s3://bucket/prefix`` (signed requests
    with the environment's AWS credentials, endpoint by the one S3 rule) for the TUF client, all read by
    ``cairn.remote.url``. A status that said no becomes TUF's DownloadHTTPError, which its client expects for a missing
    role file; nothing answering is the UrlError line, which TUF reports as a DownloadError."""

    def _fetch(self, url: str) -> Iterator[bytes]:
        try:
            return iter([read_url(url, timeout=30)])  # user-given repository URL
        except UrlError as exc:
            if exc.status is None:
                raise
            said = f"{url}: {exc.detail}" if url.startswith(("http:", "https:")) else f"{url} not found"
            raise tuf_errors.DownloadHTTPError(said, exc.status) from None


_FETCHER = AnyFetcher()


def fetch(url: str) -> bytes | None:
    return fetch_status(url)[0]


def fetch_status(url: str) -> tuple[bytes | None, int]:
    """The bytes at ``url`` and 200, or None and the HTTP status that said no (404 missing, 403 not readable)."""
    return read_status(url, timeout=30)


@dataclass
class VerifyReport:
    repository: str
    timestamp_version: int = 0
    checked: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"repository": self.repository, "timestamp_version": self.timestamp_version, "checked": len(self.checked)}


def cache_dir_for(url: str) -> Path:
    base = Path(os.environ.get("CAIRN_TUF_CACHE") or Path.home() / ".cache" / "cairn" / "tuf")
    return base / hashlib.sha256(url.encode()).hexdigest()[:16]


def repository_url(url: str) -> str:
    """The repository's base URL with one trailing slash; a plain path becomes a ``file://`` URL."""
    if "://" not in url:
        url = Path(url).absolute().as_uri()
    check_url_place(url)
    return url.rstrip("/") + "/"


def trusted_updater(url: str, root_bytes: bytes, cache: Path | None = None) -> tuple[Updater, Path]:
    """A refreshed TUF client for ``url``; any metadata problem is a CheckFailed naming the role file."""
    base = repository_url(url)
    if base.startswith("file:"):
        _check_is_repository(base)  # a local stat: say "not a repository" before making a cache for it
    cache = cache or cache_dir_for(base)
    (cache / "targets").mkdir(parents=True, exist_ok=True)
    check_root(root_bytes, "the pinned root")  # said in one line here, not as python-tuf's traceback below
    updater = Updater(str(cache), base + "metadata/", str(cache / "targets"), base, fetcher=_FETCHER, bootstrap=root_bytes)
    started = time.time()
    try:
        updater.refresh()
    except tuf_errors.BadVersionNumberError as exc:
        raise CheckFailed(f"metadata/timestamp.json: rollback rejected ({exc}) — the server replays old metadata; do not trust it") from None
    except (tuf_errors.RepositoryError, tuf_errors.DownloadError, DeserializationError) as exc:
        if isinstance(exc, tuf_errors.DownloadError):
            _check_is_repository(base)
        name = _failed_role(cache, started)
        raise CheckFailed(f"{name}: {type(exc).__name__}: {exc} — the repository's signed metadata does not verify") from None
    return updater, cache


def _check_is_repository(base: str) -> None:
    """A place with neither a timestamp nor a first root is no Cairn repository at all: saying its signatures
    do not verify (exit 1) would read as tampering, when the user only pointed at the wrong place (exit 2)."""
    parsed = urlparse(base)
    fix = "point cairn verify at the directory or URL cairn publish wrote to"
    if parsed.scheme == "file" and not Path(parsed.path).is_dir():
        what = "not a directory" if Path(parsed.path).exists() else "no such directory"
        raise CairnError(f"{parsed.path}: not a Cairn repository ({what}) — {fix}")
    timestamp, status = fetch_status(base + "metadata/timestamp.json")
    if timestamp is None and fetch(base + "metadata/1.root.json") is None:
        if status == 403:  # a private bucket read anonymously: saying "not a repository" would send the user astray
            raise CairnError(f"{base}: metadata/timestamp.json answers 403 Forbidden — the repository is not readable "
                             "without credentials; publish it without --no-public-read, or verify s3://BUCKET/PREFIX "
                             "(signed requests)")
        shown = parsed.path if parsed.scheme == "file" else base
        raise CairnError(f"{shown}: not a Cairn repository (no metadata/timestamp.json or metadata/1.root.json) — {fix}")


def _failed_role(cache: Path, started: float) -> str:
    """The first metadata file this refresh did not get to persist: the one that failed to verify."""
    version = 0
    for role in ("timestamp", "snapshot", "targets"):
        path = cache / f"{role}.json"
        if not path.exists() or path.stat().st_mtime < started:
            return "metadata/timestamp.json" if role == "timestamp" else f"metadata/{version or 'N'}.{role}.json"
        signed = json.loads(path.read_bytes())["signed"]
        version = signed["meta"]["snapshot.json"]["version"] if role == "timestamp" else signed["meta"]["targets.json"]["version"]
    return "metadata"


def verify_repository(url: str, root_bytes: bytes, cache: Path | None = None, *, in_progress: bool = False) -> VerifyReport:
    """Every target under both names, every attestation, and the pinned root's own copy on the server.

    ``in_progress=True`` accepts mutable objects (index pages, matrices) whose plain name already holds the
    bytes of a publish that has not committed its timestamp yet; their hashed names are still checked.
    """
    base = repository_url(url)
    _updater, cache = trusted_updater(base, root_bytes, cache)
    report = VerifyReport(base)
    targets = json.loads((cache / "targets.json").read_bytes())["signed"]["targets"]
    report.timestamp_version = json.loads((cache / "timestamp.json").read_bytes())["signed"]["version"]
    served_root = fetch(base + "metadata/1.root.json")
    if served_root is not None and served_root != root_bytes and json.loads(root_bytes)["signed"]["version"] == 1:
        raise CheckFailed("metadata/1.root.json: differs from the pinned root — the server's root was replaced")
    latest = json.loads((cache / "root.json").read_bytes())
    served_latest = fetch(base + "metadata/root.json")
    if served_latest is not None and served_latest != (cache / "root.json").read_bytes() and latest["signed"]["version"] > 0:
        raise CheckFailed("metadata/root.json: differs from the trusted root — it was modified after signing")
    _check_metadata_form(cache)
    for path in targets:  # a signed name that climbs would make this check read outside the repository
        problem = relpath_problem(path)
        if problem:
            raise CheckFailed(f"{path!r}: a signed target name that {problem} — cairn never signs such a name; do not trust this repository")
    key = _provenance_key(base, targets)
    for path, info in sorted(targets.items()):
        sha = info["hashes"]["sha256"]
        hashed = hashed_name(path, sha)
        # over HTTP an index page is served at its directory, the URL pip and uv request (``<project>/``)
        served = path.removesuffix("index.html") if path.endswith("/index.html") and base.startswith(("http", "s3")) else path
        for name in (served, hashed):
            if in_progress and name != hashed and not _immutable(path):
                continue
            data = fetch(base + name)
            if data is None:
                raise CheckFailed(f"{name}: missing from the repository (the signed targets list it)")
            if len(data) != info["length"] or hashlib.sha256(data).hexdigest() != sha:
                raise CheckFailed(f"{name}: bytes do not match the signed sha256 {sha[:16]}… — it was modified after signing"
                                  + (" (or a publish is in progress)" if name == path and not _immutable(path) else ""))
            report.checked.append(name)
        if path.endswith(".intoto.jsonl"):
            subject = path.removesuffix(".intoto.jsonl")
            if subject not in targets:
                raise CheckFailed(f"{path}: attests {subject}, which is not a signed target")
            expected = targets[subject].get("custom", {}).get("image", {}).get("digest", "").removeprefix("sha256:") \
                or targets[subject]["hashes"]["sha256"]
            try:
                verify_attestation(fetch(base + path) or b"", expected, key)
            except ValueError as exc:
                raise CheckFailed(f"{path}: {exc}") from None
    return report


def verify_file(url: str, root_bytes: bytes, file: Path, cache: Path | None = None) -> str:
    """The signed target whose bytes ``file`` has (by name first, then by digest), with its attestation."""
    base = repository_url(url)
    _updater, cache = trusted_updater(base, root_bytes, cache)
    targets = json.loads((cache / "targets.json").read_bytes())["signed"]["targets"]
    data = Path(file).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    same_name = [p for p in targets if p.rsplit("/", 1)[-1] == Path(file).name]
    match = next((p for p in targets if targets[p]["hashes"]["sha256"] == sha and p in same_name), None) \
        or next((p for p in targets if targets[p]["hashes"]["sha256"] == sha), None)
    if match is None:
        hint = f" (the signed {same_name[0]} has sha256 {targets[same_name[0]]['hashes']['sha256'][:16]}…)" if same_name else ""
        raise CheckFailed(f"{file}: sha256 {sha[:16]}… is not a signed target of {base}{hint} — do not use this file")
    attestation = match + ".intoto.jsonl"
    if attestation in targets:
        try:
            verify_attestation(fetch(base + attestation) or b"", sha, _provenance_key(base, targets))
        except ValueError as exc:
            raise CheckFailed(f"{attestation}: {exc}") from None
    return match


def verify_target(url: str, root_bytes: bytes, path: str, data: bytes, cache: Path | None = None) -> None:
    """``data`` are exactly the bytes the signed targets list for ``path`` (e.g. ``channels/dev/matrix.json``)."""
    SignedTargets.of(url, root_bytes, cache).check(path, data)


class SignedTargets:
    """The targets of one refreshed TUF client, for checking several files against a single refresh."""

    def __init__(self, base: str, targets: dict[str, Any]) -> None:
        self.base, self.targets = base, targets

    @classmethod
    def of(cls, url: str, root_bytes: bytes, cache: Path | None = None) -> SignedTargets:
        base = repository_url(url)
        _updater, cache = trusted_updater(base, root_bytes, cache)
        return cls(base, json.loads((cache / "targets.json").read_bytes())["signed"]["targets"])

    def check(self, path: str, data: bytes) -> None:
        """``data`` are exactly the bytes the signed targets list for ``path``; CheckFailed otherwise."""
        if path not in self.targets:
            raise CheckFailed(f"{path}: not a signed target of {self.base} — do not trust it")
        info = self.targets[path]
        if len(data) != info["length"] or hashlib.sha256(data).hexdigest() != info["hashes"]["sha256"]:
            raise CheckFailed(f"{path}: bytes do not match the signed sha256 {info['hashes']['sha256'][:16]}… — do not trust it")


def _provenance_key(base: str, targets: dict[str, dict[str, object]]) -> SSlibKey:
    if "keys/provenance.json" not in targets:
        raise CheckFailed("keys/provenance.json: not a signed target — the repository has no provenance key")
    data = fetch(base + "keys/provenance.json") or b""
    if hashlib.sha256(data).hexdigest() != targets["keys/provenance.json"]["hashes"]["sha256"]:  # type: ignore[index]
        raise CheckFailed("keys/provenance.json: bytes do not match the signed sha256 — it was modified after signing")
    info = json.loads(data)
    return SSlibKey.from_dict(info.pop("keyid"), info)


def _check_metadata_form(cache: Path) -> None:
    """Signatures cover only the canonical ``signed`` part, so whitespace edits would pass TUF; cairn writes
    one exact serialization, and anything else was edited after signing."""
    snap_version = json.loads((cache / "timestamp.json").read_bytes())["signed"]["meta"]["snapshot.json"]["version"]
    targets_version = json.loads((cache / "snapshot.json").read_bytes())["signed"]["meta"]["targets.json"]["version"]
    names = {"timestamp": "metadata/timestamp.json", "snapshot": f"metadata/{snap_version}.snapshot.json",
             "targets": f"metadata/{targets_version}.targets.json", "root": "metadata/root.json"}
    for role, name in names.items():
        raw = (cache / f"{role}.json").read_bytes()
        if Metadata.from_bytes(raw).to_bytes(JSONSerializer(compact=False)) != raw:
            raise CheckFailed(f"{name}: not the bytes cairn signed (edited after signing)")
        # hex decoding ignores case, so an upper-cased signature digit still verifies: cairn writes lower case
        if any(sig.get("sig", "") != sig.get("sig", "").lower() for sig in json.loads(raw).get("signatures", [])):
            raise CheckFailed(f"{name}: not the bytes cairn signed (signature text edited after signing)")


def _immutable(path: str) -> bool:
    return not (path.startswith(("channels/", "keys/")) or path.endswith(("/gates.json", "/matrix.json"))
                or (path.startswith("staging/") and "/simple/" in path))


def _canonical(data: bytes) -> str:
    try:
        return json.dumps(json.loads(data), sort_keys=True)
    except ValueError:
        return data.decode(errors="replace")


def load_pinned_root(path: Path | None = None) -> bytes:
    """The root a verifier trusts: ``--root``, ``$CAIRN_TUF_ROOT``, or ``publish/root.json`` of the checkout."""
    if path is None:
        env = os.environ.get("CAIRN_TUF_ROOT")
        path = Path(env) if env else repo_root() / "publish" / "root.json"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CairnError(f"cannot read the pinned TUF root {path} ({exc}) — pass --root or set CAIRN_TUF_ROOT") from None
    check_root(data, str(path))
    return data


def check_root(data: bytes, where: str) -> None:
    """``data`` is a TUF root signed by a threshold of its own root keys — else one line naming ``where`` (a file
    given as ``--root`` that is not one would otherwise surface as python-tuf's traceback)."""
    fix = "pass --root the root.json of the release keys (publish/root.json, or <keys>/root.json from cairn keys init)"
    try:
        root = Metadata[Root].from_bytes(data)
        if root.signed.type != Root.type:
            raise ValueError(f"it is {root.signed.type} metadata")
        root.verify_delegate(Root.type, root)
    except tuf_errors.UnsignedMetadataError as exc:
        raise CairnError(f"{where}: a TUF root not signed by its own root keys ({exc}) — {fix}") from None
    except (DeserializationError, ValueError, KeyError, TypeError) as exc:
        reason = exc.__cause__ or exc
        said = f"no {reason} field" if isinstance(reason, KeyError) else str(reason)
        raise CairnError(f"{where}: not a TUF root.json ({said}) — {fix}") from None
