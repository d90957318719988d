"""Pinned PyPI files come from pip's configured index, and their sha256 is checked before any of their code can run.

A local PEP 503/691 index over loopback HTTP serves a hostile sdist: its ``setup.py`` and its in-tree build
backend each write a marker file the moment they are executed. ``pip download --no-binary`` would run them to
read the metadata; the fetch must not, with the right pin or the wrong one.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cairn.errors import CairnError, PinMismatch
from cairn.execute.runners import ActionContext
from cairn.plan.graph import Action
from cairn.sources.fetch import fetch
from cairn.sources.pypi import JSON_TYPE
from cairn.wheels.run import run_fetch_sdist

SDIST = "cairn_probe-1.0.tar.gz"
WHEEL = "cairn_probe-1.0-py3-none-any.whl"


BACKEND = """
import os

def get_requires_for_build_wheel(config_settings=None):
    return []

def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, "cairn_probe-1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as handle:
        handle.write("Metadata-Version: 2.1\\nName: cairn-probe\\nVersion: 1.0\\n")
    return "cairn_probe-1.0.dist-info"
"""


def hostile_sdist(marker: Path) -> bytes:
    """An sdist whose every entry point (setup.py, the PEP 517 backend named in pyproject.toml) writes ``marker``."""
    payload = f"open({str(marker)!r}, 'a').write(__file__ + '\\n')\n"
    members = {
        "cairn_probe-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: cairn-probe\nVersion: 1.0\n",
        "cairn_probe-1.0/setup.py": payload + "from setuptools import setup\nsetup(name='cairn-probe', version='1.0')\n",
        "cairn_probe-1.0/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n',
        "cairn_probe-1.0/evil_backend.py": payload + BACKEND,
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class LocalIndex:
    """A PEP 691 (JSON) / PEP 503 (HTML) simple index on 127.0.0.1 that records every request it answers."""

    def __init__(self, files: dict[str, bytes], *, json_api: bool = True, list_hashes: bool = True) -> None:
        self.files, self.json_api, self.list_hashes = files, json_api, list_hashes
        self.requests: list[tuple[str, str]] = []  # (path, Accept)
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.requests.append((self.path, self.headers.get("Accept", "")))
                body, kind = index.answer(self.path, self.headers.get("Accept", ""))
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, accept: str) -> tuple[bytes | None, str]:
        if path.startswith("http://"):  # asked as a proxy: the absolute URL names the index host
            path = "/" + path.split("/", 3)[3]
        if path.startswith("/files/") and path[len("/files/"):] in self.files:
            return self.files[path[len("/files/"):]], "application/octet-stream"
        if path != "/simple/cairn-probe/":
            return None, "text/plain"
        hashes = {n: hashlib.sha256(d).hexdigest() if self.list_hashes else "" for n, d in self.files.items()}
        if self.json_api and JSON_TYPE in accept:
            files = [{"filename": n, "url": f"../../files/{n}", "hashes": {"sha256": h} if h else {}} for n, h in hashes.items()]
            return json.dumps({"meta": {"api-version": "1.0"}, "name": "cairn-probe", "files": files}).encode(), JSON_TYPE
        links = "".join(f'<a href="/files/{n}' + (f"#sha256={h}" if h else "") + f'">{n}</a>\n' for n, h in hashes.items())
        return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode(), "text/html"

    def downloads(self) -> list[str]:
        return [path for path, _ in self.requests if "/files/" in path]


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "backend-ran"


@pytest.fixture
def index(marker: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalIndex]:
    served = LocalIndex({SDIST: hostile_sdist(marker), WHEEL: b"PK\x05\x06" + b"\0" * 18})
    monkeypatch.setenv("PIP_INDEX_URL", served.url)
    yield served
    served.server.shutdown()


def pin(index: LocalIndex, filename: str, sha256: str = "") -> dict[str, str]:
    return {"name": "cairn-probe", "version": "1.0", "filename": filename,
            "sha256": sha256 or hashlib.sha256(index.files[filename]).hexdigest()}


def test_pinned_sdist_is_downloaded_from_the_configured_index_and_never_executed(index, marker, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fetch("pypi", pin(index, SDIST), out, io.StringIO())
    assert [p.name for p in out.iterdir()] == [SDIST]
    assert (out / SDIST).read_bytes() == index.files[SDIST]
    assert not marker.exists(), f"the sdist's code ran during fetch: {marker.read_text()}"
    page_accept = next(accept for path, accept in index.requests if path == "/simple/cairn-probe/")
    assert page_accept.startswith(JSON_TYPE)  # PEP 691 JSON asked for first
    assert index.downloads() == [f"/files/{SDIST}"]


def test_wrong_sha256_listed_by_the_index_is_refused_before_the_file_is_downloaded(index, marker, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(PinMismatch, match=f"{SDIST}: the index .* lists sha256 .*, the manifest pins 1111"):
        fetch("pypi", pin(index, SDIST, "1" * 64), out, io.StringIO())
    assert list(out.iterdir()) == []
    assert index.downloads() == []
    assert not marker.exists()


def test_wrong_sha256_of_the_bytes_is_refused_and_nothing_is_left(marker, tmp_path, monkeypatch):
    """An index that lists no hashes (plain PEP 503 HTML): the bytes themselves are checked before they get a name."""
    served = LocalIndex({SDIST: hostile_sdist(marker)}, json_api=False, list_hashes=False)
    monkeypatch.setenv("PIP_INDEX_URL", served.url)
    out = tmp_path / "out"
    out.mkdir()
    try:
        with pytest.raises(PinMismatch, match=f"{SDIST}: sha256 is [0-9a-f]{{64}}, the manifest pins 2222"):
            fetch("pypi", pin(served, SDIST, "2" * 64), out, io.StringIO())
        assert served.downloads() == [f"/files/{SDIST}"]
    finally:
        served.server.shutdown()
    assert list(out.iterdir()) == []
    assert not marker.exists()


def test_index_from_a_pip_config_file_applies_and_html_only_mirrors_work(marker, tmp_path, monkeypatch):
    served = LocalIndex({SDIST: hostile_sdist(marker)}, json_api=False)
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nindex-url = {served.url}\n")
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    out = tmp_path / "out"
    out.mkdir()
    try:
        fetch("pypi", pin(served, SDIST), out, io.StringIO())
    finally:
        served.server.shutdown()
    assert (out / SDIST).read_bytes() == served.files[SDIST]
    assert served.downloads() == [f"/files/{SDIST}"]
    assert not marker.exists()


def test_pips_proxy_setting_applies(marker, tmp_path, monkeypatch):
    """An index host that does not resolve, reachable only through the proxy named in pip's config."""
    proxy = LocalIndex({SDIST: hostile_sdist(marker)})
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nindex-url = http://cairn-mirror.invalid/simple/\nproxy = {proxy.url.split('/simple/')[0]}\n")
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    out = tmp_path / "out"
    out.mkdir()
    try:
        fetch("pypi", pin(proxy, SDIST), out, io.StringIO())
    finally:
        proxy.server.shutdown()
    assert (out / SDIST).read_bytes() == proxy.files[SDIST]
    assert [path for path, _ in proxy.requests] == ["http://cairn-mirror.invalid/simple/cairn-probe/",
                                                   f"http://cairn-mirror.invalid/files/{SDIST}"]
    assert not marker.exists()


def test_pinned_wheel_goes_the_same_way(index, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fetch("pypi", pin(index, WHEEL), out, io.StringIO())
    assert [p.name for p in out.iterdir()] == [WHEEL]
    assert index.downloads() == [f"/files/{WHEEL}"]


def test_a_file_the_index_does_not_list_is_one_clear_error(index, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(CairnError, match=r"cairn_probe-9\.9\.tar\.gz is not listed for project cairn-probe on http://127\.0\.0\.1") as err:
        fetch("pypi", dict(pin(index, SDIST), filename="cairn_probe-9.9.tar.gz"), out, io.StringIO())
    assert "\n" not in str(err.value) and "pip config" in str(err.value)
    assert list(out.iterdir()) == []


def test_a_pinned_filename_with_a_path_never_leaves_the_output_directory(index, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(CairnError, match="is not a plain file name"):
        fetch("pypi", dict(pin(index, SDIST), filename="../" + SDIST), out, io.StringIO())
    assert list(tmp_path.iterdir()) == [out] and list(out.iterdir()) == []


def test_wheel_recipes_fetch_sdists_the_same_way(index, marker, tmp_path):
    """The wheels stage's ``fetch-sdist`` action: verified before its code runs, with the recipe named as the pin."""
    out = tmp_path / "out"
    out.mkdir()
    source = {"pypi": pin(index, SDIST)}
    ctx = ActionContext(Action(f"fetch-sdist:{SDIST}", "fetch-sdist", {"source": source}), out, io.StringIO(), {}, {})
    run_fetch_sdist(ctx)
    assert (out / SDIST).read_bytes() == index.files[SDIST]
    assert not marker.exists()
    wrong = ActionContext(Action("x", "fetch-sdist", {"source": {"pypi": pin(index, SDIST, "3" * 64)}}), tmp_path / "w",
                          io.StringIO(), {}, {})
    wrong.out.mkdir()
    with pytest.raises(PinMismatch, match="the recipe pins 3333"):
        run_fetch_sdist(wrong)
    assert list(wrong.out.iterdir()) == [] and not marker.exists()
