"""Loopback servers the tests talk to for real: moto's S3 over HTTP, and a directory served over HTTP.

One place for both, so every test that needs a bucket or an archive server starts it the same way.
"""

from __future__ import annotations

import hashlib
import http.server
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.requirements import need_module, need_tool

_RUNNING: list[pytest.Item] = []


def running_test(item: pytest.Item) -> None:
    """Called by the root conftest as each test is set up, before its fixtures: the test ``moto_s3`` serves."""
    _RUNNING[:] = [item]


def cache_writer_env(where: Path) -> dict[str, str]:
    """A trusted cache writer's environment for ``cairn build --cache``: the writer key in ``where`` and the trust
    list naming it (made by ``cairn.store.signing`` as ``cairn keys cache-writer`` does, once per ``where``)."""
    from cairn.store.signing import add_to_trust, make_writer_key

    if not (where / "cache-writer.pem").exists():
        _key, entry = make_writer_key(where, "ed25519", "ci")
        add_to_trust(where / "cache-writers.json", entry)
    return {"CAIRN_CACHE_TRUST": str(where / "cache-writers.json"), "CAIRN_CACHE_SIGNING_KEY": str(where / "cache-writer.pem")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def moto_s3(bucket: str, *, versioning: bool = False) -> Iterator[dict[str, Any]]:
    """A moto S3 server on a free loopback port with one private ``bucket`` (versioned when asked, so a test can
    count overwrites): ``{"server", "endpoint", "client", "port"}``.

    Only for a test marked ``s3``: ``-m "not s3"`` must run with no moto, so a test that would start it unmarked
    fails here, naming itself, instead of running under a selection that promised no S3."""
    if _RUNNING and _RUNNING[0].get_closest_marker("s3") is None:
        raise AssertionError(f"{_RUNNING[0].nodeid} starts moto S3 but is not marked s3: add @pytest.mark.s3 "
                             "(or pytestmark = pytest.mark.s3) so -m 'not s3' leaves it out")
    moto_server = need_module("moto.server")
    boto3 = need_module("boto3")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                              aws_secret_access_key="test")
        client.create_bucket(Bucket=bucket)  # private, as S3 makes it: cairn publish grants public reads itself
        if versioning:
            client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        yield {"server": server, "endpoint": endpoint, "client": client, "port": port}
    finally:
        _forget_every_object(endpoint)
        server.stop()


def _forget_every_object(endpoint: str) -> None:
    """Drop every bucket and object moto holds. Its state lives in this process, not in the server, and each
    object is a temporary file already unlinked: without a reset a stopped server's objects keep their disk
    until pytest exits (the shared-cache and publish tests left 43 GB that ``du`` could not see, and filled a
    CI disk)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:
        answer.read()


@contextmanager
def serve_directory(root: Path, delay: dict[str, float] | None = None) -> Iterator[str]:
    """``root`` over HTTP on loopback; each GET first sleeps ``delay["seconds"]`` (read per request, so a test
    can slow the server down mid-way). Yields the base URL."""
    pause = delay if delay is not None else {"seconds": 0.0}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            time.sleep(pause["seconds"])
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def archive_release(folder: Path, www: Path, base: str, *, name: str, families: tuple[str, ...], parts: int = 3) -> Path:
    """A release of ``parts`` archive components that ``www`` serves at ``base``, each copied into the SDK:
    the smallest real release the build, the shared cache and the CI shards can run."""
    listed = ", ".join(f'"{family}"' for family in families)
    lines = [f'[release]\nname = "{name}"\nversion = "1.0.0"\nchannel = "dev"\nsource_date_epoch = 1700000000\n'
             f'base_os = "debian-12"\nfamilies = [{listed}]\n\n[core]']
    for n in range(parts):
        body = f"payload {n}\n".encode()
        (www / f"part{n}.txt").write_bytes(body)
        lines.append(f'[[core.components]]\nname = "part{n}"\nversion = "1.0"\n'
                     f'source.archive = {{ url = "{base}/part{n}.txt", sha256 = "{hashlib.sha256(body).hexdigest()}" }}\n'
                     'build = { kind = "copy" }\n')
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


@contextmanager
def registry_at(address: str, root: Path) -> Iterator[str]:
    """A registry with fresh storage under ``root`` at a fixed ``address``, as ``cairn services`` starts one:
    what a fresh CI runner has at the same ``localhost`` address as every other runner."""
    import os
    import signal

    from cairn.services.daemons import start_registry

    need_tool("docker-registry", "docker-registry")
    _, pid = start_registry(root, address, die_with_parent=True)
    try:
        yield address
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
