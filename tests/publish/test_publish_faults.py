"""SIGKILL the publisher at points taken from its own progress against moto S3: after each kill, every
reference in the public indexes resolves to a present object signed by its DSSE attestation, the TUF metadata
served verifies with every target present and intact, and a rerun completes.

The publisher talks to moto through a counting proxy in this process. A full publish is counted once; each
later run is killed by the proxy the moment moto has answered its N-th request (N spread over the whole run),
before the publisher sees that answer — so every kill lands mid-publish by construction, however loaded the
machine, and the interesting case (the server applied a write the client never heard about) is always hit.

Every kill starts from the same published state (release 1.0.0, copied server-side to a fresh prefix) and
interrupts the publish of 1.0.1, so each check costs the same."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urljoin
from urllib.request import urlopen

import pytest
from securesystemslib.signer import SSlibKey

from cairn.matrix.bundle import load_bundle
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import S3Backend
from cairn.sign.keys import load_keys
from cairn.sign.provenance import verify_attestation
from cairn.sign.tuf import load_root
from cairn.sign.verify import fetch, verify_repository
from support.s3 import env
from support.servers import free_port

BUCKET = "cairn-releases"  # the bucket of this module's ``s3`` fixture (support.s3)
pytestmark = pytest.mark.s3
KILLS = int(os.environ.get("CAIRN_FAULT_KILLS", "20"))


def check_public_references(endpoint: str, prefix: str) -> int:
    """Every wheel a channel index page links is there, matches its sha256, and its attestation verifies."""
    base = f"{endpoint}/{BUCKET}/{prefix}/"
    key_doc = fetch(base + "keys/provenance.json")
    if key_doc is None:
        return 0
    info = json.loads(key_doc)
    key = SSlibKey.from_dict(info.pop("keyid"), info)
    listing = urlopen(f"{endpoint}/{BUCKET}?list-type=2&prefix={prefix}/channels/").read().decode()
    pages = [k for k in re.findall(r"<Key>([^<]+)</Key>", listing) if k.endswith("/") and k.count("/") >= 5]  # project pages, at their directory keys
    checked = 0
    for page_key in pages:
        page_url = f"{endpoint}/{BUCKET}/{page_key}"
        html = fetch(page_url)
        assert html is not None
        for href, sha in re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', html.decode()):
            url = urljoin(page_url, href)
            data = fetch(url)
            assert data is not None, f"{page_key} links {href}, which is missing"
            assert hashlib.sha256(data).hexdigest() == sha, f"{href}: bytes differ from the index's sha256"
            verify_attestation(fetch(url + ".intoto.jsonl") or b"", sha, key)
            checked += 1
    matrix_url = f"{endpoint}/{BUCKET}/{prefix}/channels/dev/matrix.json"
    matrix = json.loads(fetch(matrix_url) or b"{}")
    for cell in matrix.get("cells", []):
        for wheel in cell["wheels"]:
            data = fetch(base + wheel["url"])
            assert data is not None, f"the matrix links {wheel['url']}, which is missing"
            assert hashlib.sha256(data).hexdigest() == wheel["sha256"], f"{wheel['url']}: bytes differ from the matrix's sha256"
            verify_attestation(fetch(base + wheel["url"] + ".intoto.jsonl") or b"", wheel["sha256"], key)
            checked += 1
    return checked


@pytest.fixture(scope="module")
def s3():
    """moto as its own process (``moto_server``): the server, the publisher and the checks each get a core."""
    import boto3

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urlopen(endpoint + "/moto-api/", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.1)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=BUCKET)
    # read of the whole bucket, not only what cairn publish grants: this test copies a seed repository to fresh
    # prefixes with boto3, and a kill can land before the publisher has granted the new prefix
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                                       "Resource": f"arn:aws:s3:::{BUCKET}/*"}]}
    client.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(policy))
    yield {"endpoint": endpoint, "client": client, "port": port}
    proc.terminate()
    proc.wait(timeout=10)


HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"})


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a killed client's sockets are expected to break
            super().handle_error(request, client_address)


class KillingProxy:
    """A reverse proxy to moto that counts requests and SIGKILLs ``pid`` once moto has answered request ``kill_at``.

    That answer is never passed on, and requests after it wait until the process is dead, so the publisher is
    blocked on a request when the signal arrives: alive, mid-publish, by construction.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.arm(None)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and ``Expect: 100-continue`` answered as boto3 expects

            def relay(self) -> None:
                proxy.relay(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = relay

            def log_message(self, *args: object) -> None:
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arm(self, kill_at: int | None) -> None:
        """Count from zero; kill the attached process at request ``kill_at`` (never, when None)."""
        with self.lock:
            self.count, self.kill_at, self.pid = 0, kill_at, None
            self.killed, self.attached = threading.Event(), threading.Event()

    def attach(self, pid: int) -> None:
        self.pid = pid
        self.attached.set()

    def relay(self, handler: BaseHTTPRequestHandler) -> None:
        with self.lock:
            self.count += 1
            number, kill_at, killed, attached = self.count, self.kill_at, self.killed, self.attached
        if kill_at is not None and number > kill_at:
            killed.wait(60)  # the publisher is being killed: this request never reaches the server
            handler.close_connection = True
            return
        body = self.read_body(handler)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=120)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        if number == kill_at:
            assert attached.wait(30)
            os.kill(self.pid, signal.SIGKILL)  # the server has applied request N; the publisher never hears back
            killed.set()
            handler.close_connection = True
            return
        handler.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                handler.send_header(key, value)
        length = response.getheader("Content-Length") if handler.command == "HEAD" else str(len(data))
        handler.send_header("Content-Length", length or "0")
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    @staticmethod
    def read_body(handler: BaseHTTPRequestHandler) -> bytes:
        if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(handler.rfile.readline().split(b";")[0], 16):
                chunks.append(handler.rfile.read(size))
                handler.rfile.readline()
            while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def reset(client, source: str, dest: str) -> None:
    """``dest`` becomes a copy of ``source`` (server-side copies): every kill starts from the same public state."""
    names = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=source + "/")
            for o in page.get("Contents", [])]

    def copy(key: str) -> None:
        client.copy_object(Bucket=BUCKET, Key=dest + key[len(source):], CopySource={"Bucket": BUCKET, "Key": key},
                           MetadataDirective="COPY")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(copy, names))


@pytest.mark.slow
def test_sigkill_at_points_across_the_publish_never_breaks_the_public_view(s3, keys, tmp_path, monkeypatch):
    environ = env(s3, tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, environ[name])
    root = (keys / "root.json").read_bytes()
    keyset, signed_root = load_keys(keys), load_root(keys / "root.json")
    proxy = KillingProxy(s3["port"])
    publish_cmd = [sys.executable, "-m", "cairn.cli", "publish", "--keys", str(keys), "--json"]
    via_proxy = {**environ, "CAIRN_S3_ENDPOINT": proxy.endpoint}
    # the public state every kill starts from: release 1.0.0 on the dev channel
    publish(load_bundle(write_sample_bundle(tmp_path / "b0", version="1.0.0")), S3Backend(BUCKET, "seed", s3["endpoint"]),
            keyset, signed_root)
    bundle = write_sample_bundle(tmp_path / "b1", version="1.0.1", wheels_per_family=2)
    # one full publish through the proxy counts the requests a publish makes from that state
    reset(s3["client"], "seed", "counting")
    proxy.arm(None)
    subprocess.run([*publish_cmd, "--to", f"s3://{BUCKET}/counting", str(bundle)], env=via_proxy, check=True, capture_output=True)
    total = proxy.count
    assert total > KILLS, f"a publish made only {total} requests"
    kill_points = [1 + k * (total - 1) // KILLS for k in range(KILLS)]  # first request … well into the last stretch
    for n, kill_at in enumerate(kill_points, 1):
        prefix = f"faults{n}"
        reset(s3["client"], "seed", prefix)
        proxy.arm(kill_at)
        proc = subprocess.Popen([*publish_cmd, "--to", f"s3://{BUCKET}/{prefix}", str(bundle)], env=via_proxy,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        proxy.attach(proc.pid)
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL, (
            f"kill at request {kill_at}/{total}: the publisher exited {proc.returncode} instead: {stderr.decode()[-500:]}")
        # the signed state: every target present and intact under its content-addressed name (plain names of
        # pages and matrices may already hold the interrupted publish's bytes); every public link (index pages
        # and matrix) resolves to a present object whose DSSE provenance verifies
        verify_repository(f"{s3['endpoint']}/{BUCKET}/{prefix}/", root, tmp_path / f"cache-{n}", in_progress=True)
        assert check_public_references(s3["endpoint"], prefix) >= 6
        # the rerun (the same code as the CLI, in this process) completes
        report = publish(load_bundle(bundle), S3Backend(BUCKET, prefix, s3["endpoint"]), keyset, signed_root)
        assert report.promoted and not report.held
    verify_repository(f"{s3['endpoint']}/{BUCKET}/{prefix}/", root, tmp_path / "cache-final")
