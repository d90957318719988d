"""One way out of a build container that has no network: an HTTP proxy that reaches one service and no other.

Build containers run with ``--network none``, so a configure step that tries to download fails instead of
making the build depend on the day. A compiler cache in S3 needs exactly one destination, the cache's
endpoint, and nothing else may become reachable because of it. So the container stays without a network and
gets a Unix socket instead (a bind-mounted directory): inside, a relay listens on loopback and passes each
connection through the socket; outside, this proxy reads the first request of each connection and connects
only to an allowed ``host:port``:

- ``CONNECT host:port`` (HTTPS through a proxy) is answered ``200`` and then tunnelled, so TLS and the
  request signatures stay end to end;
- an absolute-form request (``GET http://host:port/...``, plain HTTP through a proxy) is forwarded as sent;
- anything else is answered ``403`` and recorded in ``refused``, which the action's log shows.

A tunnel is opened to an allowed destination only, so whatever a process in the container sends later on
the same connection reaches that destination and no other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

SOCKET_NAME = "proxy.sock"
MAX_HEAD = 64 * 1024

Allows = Callable[[str, int], bool]


class EgressProxy:
    """The host side: accepts connections on a Unix socket and connects allowed ones to their destination."""

    def __init__(self, allows: Allows) -> None:
        self.allows = allows
        self.refused: list[str] = []
        self.forwarded = 0
        self.directory = Path(tempfile.mkdtemp(prefix="cairn-egress-", dir="/tmp"))  # short: a socket path is ≤ 107 bytes
        os.chmod(self.directory, 0o755)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.directory / SOCKET_NAME))
        os.chmod(self.directory / SOCKET_NAME, 0o666)  # the container's user may not be ours
        self._server.listen(64)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="cairn-egress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = _read_head(conn)
            if head is None:
                return
            destination = _destination(head)
            if destination is None or not self.allows(*destination):
                shown = f"{destination[0]}:{destination[1]}" if destination else head.split(b"\r\n", 1)[0][:120].decode("latin-1")
                with self._lock:
                    self.refused.append(shown)
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            try:
                upstream = socket.create_connection(destination, timeout=60)
            except OSError:
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            with upstream:
                upstream.settimeout(None)
                with self._lock:
                    self.forwarded += 1
                if head.startswith(b"CONNECT "):
                    _, _, rest = head.partition(b"\r\n\r\n")
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    if rest:
                        upstream.sendall(rest)
                else:
                    upstream.sendall(head)
                _pipe_both(conn, upstream)


def _read_head(conn: socket.socket) -> bytes | None:
    """The bytes up to and including the end of the first request's headers (plus whatever came with them)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk or len(data) > MAX_HEAD:
            return None
        data += chunk
    return data


def _destination(head: bytes) -> tuple[str, int] | None:
    """``(host, port)`` a proxied request asks for, or None for a request that is not a proxy request."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3:
        return None
    method, target, _ = parts
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return (host.strip("[]"), int(port)) if host and port.isdigit() else None
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        return None
    try:
        return url.hostname, url.port or 80
    except ValueError:
        return None


def _pipe_both(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides have closed."""
    def copy(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join()


@contextlib.contextmanager
def egress_proxy(allows: Allows) -> Iterator[EgressProxy]:
    proxy = EgressProxy(allows)
    try:
        yield proxy
    finally:
        proxy.close()


# The container side, written into the build script: it listens on loopback and relays every connection
# through the mounted socket. Started before anything that uses the proxy; it prints "ready" when listening.
RELAY_PORT = 3128
RELAY_SOURCE = """
import os, socket, sys, threading
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[2])))
listener.listen(64)
print("ready", flush=True)
def copy(source, sink):
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(sys.argv[1])
    except OSError:
        client.close()
        return
    back = threading.Thread(target=copy, args=(upstream, client), daemon=True)
    back.start()
    copy(client, upstream)
    back.join()
    client.close()
    upstream.close()
while True:
    client, _ = listener.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
"""
