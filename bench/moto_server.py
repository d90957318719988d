"""moto's S3 server in a process of its own, for the benchmarks that talk to S3 over real HTTP.

Its own process so that the server, the client under test and the peer each get a core, and so that the
objects it holds (unlinked temporary files under its TMPDIR) go away with it.

``start_moto(discard_above=N)`` (bench-only, ``publish_memory_bench.py --release-shaped-gb``) starts it with a
storage shim: a body of an object PUT of at least ``N`` bytes, and the body of every multipart part, is read
from the socket, hashed (MD5 and SHA-256), checked against the ``Content-MD5`` / ``x-amz-checksum-sha256`` the
client sent (a mismatch is refused with ``BadDigest``, as S3 refuses it) and then *discarded*: moto stores a
72-byte token naming the body's size and digests, and answers with the real size (HEAD, LIST, a part's size
check), the real ETag (the MD5 of the bytes; ``<md5 of md5s>-<parts>`` for a multipart object) and the
metadata sent (``x-amz-meta-sha256``). A server-side copy copies the token. A GET of such an object is
refused with ``501 NotImplemented`` naming the shim, never answered with wrong bytes: the bench then fails
loudly instead of measuring something else. Why: a release-shaped bench sends 21 GB, which moto would keep
(21 GB of disk or memory beside the source's) while the server is not what is measured — the publisher is.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs

MAGIC = b"cairn-bench-ghst"  # 16 bytes: a token, not an object's bytes
TOKEN = struct.Struct(">16sQ16s32s")  # magic, size, MD5, SHA-256 of the discarded body
STATS_PATH = "/_bench_shim/stats"  # GET: what the shim discarded and refused, as JSON
BLOCK = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(stderr: IO[bytes] | int = subprocess.DEVNULL, spool: Path | None = None,
               discard_above: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start moto on a free loopback port and wait until it answers; its process and endpoint. ``stderr`` takes
    its werkzeug access log (one line per request); objects past its key buffer are spooled under ``spool``.
    ``discard_above``: run it with the storage shim (this module's docstring), bodies from that size discarded."""
    port = free_port()
    env = {**os.environ, "TMPDIR": str(spool)} if spool else None
    if discard_above is None:
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--port", str(port), "--discard-above", str(discard_above)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
            return proc, endpoint
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start")


def shim_stats(endpoint: str) -> dict[str, int]:
    """What a shimmed server discarded and refused so far (``STATS_PATH``)."""
    with urllib.request.urlopen(endpoint + STATS_PATH, timeout=10) as answer:
        return dict(json.loads(answer.read()))


# -- the storage shim ---------------------------------------------------------------------------------------
def token(size: int, md5: bytes, sha256: bytes) -> bytes:
    return TOKEN.pack(MAGIC, size, md5, sha256)


def ghost_parts(value: bytes) -> list[tuple[int, bytes, bytes]] | None:
    """The (size, MD5, SHA-256) of each discarded body ``value`` stands for — one token, or a multipart object's
    tokens end to end — or None when ``value`` is real bytes."""
    n = TOKEN.size
    if not value or len(value) % n or any(value[i:i + len(MAGIC)] != MAGIC for i in range(0, len(value), n)):
        return None
    return [TOKEN.unpack_from(value, i)[1:] for i in range(0, len(value), n)]


def install_ghost_keys() -> None:
    """Make moto's ``FakeKey`` take a token for the bytes it stands for: size and ETag from the token (an ETag
    given, a multipart object's, is kept); the token itself is what moto stores and copies."""
    from moto.s3.models import FakeKey

    stored: Any = FakeKey.__dict__["value"]  # the property itself: its getter is kept, its setter wrapped

    def set_value(key: Any, new_value: bytes) -> None:
        assert stored.fset is not None
        stored.fset(key, new_value)
        parts = ghost_parts(new_value) if isinstance(new_value, bytes | bytearray) else None
        if parts is None:
            return
        key.contentsize = sum(size for size, _, _ in parts)
        if key._etag is None:  # a PUT's or a copy's; a multipart completion passes its own
            key._etag = parts[0][1].hex() if len(parts) == 1 else \
                f"{hashlib.md5(b''.join(md5 for _, md5, _ in parts)).hexdigest()}-{len(parts)}"

    FakeKey.value = property(stored.fget, set_value)  # type: ignore[assignment]


class DiscardingBodies:
    """WSGI middleware in front of moto: reads, checks and replaces big bodies by tokens (the module docstring)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], discard_above: int) -> None:
        self.app, self.discard_above = app, discard_above
        self.stats = {"discarded_bodies": 0, "discarded_parts": 0, "discarded_bytes": 0, "refused_gets": 0,
                      "bad_digests": 0}
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method == "GET" and path == STATS_PATH:
            with self._lock:
                body = json.dumps(self.stats).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        on_object = path.strip("/").count("/") >= 1  # path-style: /bucket/key
        if method == "PUT" and on_object and "HTTP_X_AMZ_COPY_SOURCE" not in environ \
                and "HTTP_X_AMZ_DECODED_CONTENT_LENGTH" not in environ:
            part = "partNumber" in query and "uploadId" in query
            size = int(environ.get("CONTENT_LENGTH") or 0)
            if part or (not query and size >= self.discard_above):
                refused = self._discard(environ, size, part)
                if refused is not None:
                    return _error(start_response, *refused)
        if method == "GET" and on_object and not set(query) - {"partNumber", "versionId"}:
            return self._get(environ, start_response)
        return self.app(environ, start_response)

    def _discard(self, environ: dict[str, Any], size: int, part: bool) -> tuple[str, str, str] | None:
        """Read the body, check it, and hand moto its token instead; an error (status, code, message) if refused."""
        md5, sha = hashlib.md5(), hashlib.sha256()
        source, left = environ["wsgi.input"], size
        while left:
            chunk = source.read(min(BLOCK, left))
            if not chunk:
                return "400 Bad Request", "IncompleteBody", f"{left} of {size} bytes not received"
            md5.update(chunk)
            sha.update(chunk)
            left -= len(chunk)
        sent_md5, sent_sha = environ.get("HTTP_CONTENT_MD5"), environ.get("HTTP_X_AMZ_CHECKSUM_SHA256")
        if (sent_md5 and base64.b64decode(sent_md5) != md5.digest()) or (sent_sha and base64.b64decode(sent_sha) != sha.digest()):
            with self._lock:
                self.stats["bad_digests"] += 1
            return "400 Bad Request", "BadDigest", "the body does not match the digest sent with it"
        body = token(size, md5.digest(), sha.digest())
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        with self._lock:
            self.stats["discarded_parts" if part else "discarded_bodies"] += 1
            self.stats["discarded_bytes"] += size
        return None

    def _get(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """moto's answer, unless it is a token: then 501, never a token in place of the object's bytes."""
        held: list[Any] = []

        def hold(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
            held[:] = [status, headers, exc_info]
            return lambda _data: None

        answer = self.app(environ, hold)
        try:
            body = b"".join(answer)
        finally:
            close = getattr(answer, "close", None)
            if close is not None:
                close()
        if held and held[0].startswith("2") and ghost_parts(body) is not None:
            with self._lock:
                self.stats["refused_gets"] += 1
            return _error(start_response, "501 Not Implemented", "NotImplemented",
                          f"bench storage shim: the body of {environ.get('PATH_INFO')} was discarded on upload "
                          "(only its size and digests are kept)")
        start_response(*held)
        return [body]


def _error(start_response: Callable[..., Any], status: str, code: str, message: str) -> list[bytes]:
    body = f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body))), ("Connection", "close")])
    return [body]


def serve(port: int, discard_above: int, host: str = "127.0.0.1") -> None:
    """moto's server (as ``python -m moto.server`` runs it) behind the storage shim."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    install_ghost_keys()
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, DiscardingBodies(app, discard_above), threaded=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="moto's S3 server with the bench storage shim (bench/moto_server.py)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--discard-above", type=int, required=True, help="discard object bodies of at least this many bytes")
    options = parser.parse_args()
    serve(options.port, options.discard_above)
