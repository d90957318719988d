"""The matrix page in a real browser (headless Chromium): a grid of GPU products × engines/frameworks whose
filter by product or gfx target works, preset through the URL; each square's status, reasons and commands (the
llama.cpp engine's cell with its own pull, run and pip commands; the SDK and the validation kernels as details of
a target); image references on the public registry, never a loopback one; the Markdown table and ``cairn
matrix`` read a signed matrix."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.matrix.bundle import load_bundle
from cairn.matrix.model import from_dict
from cairn.matrix.render import registry_products, to_html, to_markdown
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.keys import init_keys, make_root
from support import ROOT
from support.browser import ROW, chromium, dom, shown

FAMILIES = ("gfx1030", "gfx908", "gfx90a", "gfx1100")
PUBLIC = "registry.cairn.invalid/team"
LOOPBACK = re.compile(r"127\.0\.0\.1|localhost|\[::1\]")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    base = tmp_path_factory.mktemp("matrix")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    (base / "root.json").write_bytes(root.to_bytes(JSONSerializer(compact=False)))
    gates = {"gfx1030": {"static-coverage": "passed", "gpu": "not-run"}, "gfx908": {"static-coverage": "failed"}}
    bundle = write_sample_bundle(base / "bundle", families=FAMILIES, gates=gates, engine=("gfx1100",),
                                 partial={"gfx1100": ["libhipsparselt.so.0", "librccl.so.1"]})
    publish(load_bundle(bundle), FileBackend(base / "repo"), keys, root)
    return base


def read(repo: Path, path: str):  # type: ignore[no-untyped-def]
    return from_dict(json.loads((repo / "repo" / path).read_text()))


@pytest.fixture(scope="module")
def page(repo):
    """The dev channel's page (gfx908 failed its required gate: it is held, so not on the channel)."""
    path = repo / "matrix.html"
    path.write_text(to_html(read(repo, "channels/dev/matrix.json"), registry_products(), PUBLIC, (repo / "repo").as_uri() + "/"))
    return path


def row_html(html: str, product: str) -> str:
    match = re.search(r'<tr class="row"[^>]*data-product="' + re.escape(product) + r'"[^>]*>(.*?)</tr>', html, re.S)
    assert match, product
    return match[1]


@pytest.mark.parametrize(("fragment", "expected"), [
    ("#q=MI250", [("gfx90a", "MI250"), ("gfx90a", "MI250X")]),    # a product name (from manifests/targets.toml)
    ("#q=gfx1030", [("gfx1030", p) for p in sorted(["Radeon RX 6800 / XT", "Radeon RX 6900 XT", "Radeon PRO W6800", "Radeon PRO V620"])]),
    ("#q=radeon%20rx%206900", [("gfx1030", "Radeon RX 6900 XT")]),  # case-insensitive, URL-encoded
    ("?product=MI210", [("gfx90a", "MI210")]),                    # the product drop-down, preset from the query
    ("#q=MI300X", []),                                             # a GPU this release does not ship for: listed apart
    ("#q=MI100", []),                                              # held (failed gate): not offered on the channel
    ("#q=7900XTX", [("gfx1100", "Radeon RX 7900 XTX / XT")]),     # as people type it: no spaces …
    ("#q=7900%20xtx", [("gfx1100", "Radeon RX 7900 XTX / XT")]),  # … lower case
    ("#q=RX%206800%20XT", [("gfx1030", "Radeon RX 6800 / XT")]),  # "6800 / XT" is the 6800 XT too
    ("#q=W7900", [("gfx1100", "Radeon PRO W7900 / W7800")]),
])
def test_filter_in_headless_chromium(page, tmp_path, fragment, expected):
    html = dom(page, fragment, tmp_path)
    assert len(ROW.findall(html)) == 9  # a row per product of each target on the channel: gfx1030 4, gfx90a 3, gfx1100 2
    assert shown(html) == expected
    count = re.search(r'<span id="count" data-shown="(\d+)">([^<]+)</span>', html)
    assert count and count[2] == f"{len(expected)} of 9 GPUs shown"
    none_hidden = re.search(r'<p id="none"( hidden="")?>', html)
    other = re.search(r'<div id="other" data-shown="(\d+)"( hidden="")?>', html)
    assert none_hidden and bool(none_hidden[1])  # every query here names a GPU Cairn knows: never "nothing matches"
    assert other and (other[1] != "0") == (not expected) and bool(other[2]) == bool(expected)
    opened = bool(re.search(r'<details[^>]* open=""', html))
    assert opened == (len(expected) == 1)  # squares (and target details) open by themselves only for a single GPU


def test_7900_xtx_finds_the_gfx1100_row_with_its_commands(page, repo, tmp_path):
    """The question people ask: "7900 XTX" → the gfx1100 row: llama.cpp passed, with the pull, run and pip commands
    of its own cell; the validation kernels (smoke) are a detail of the target, with theirs."""
    html = dom(page, "#q=7900%20XTX", tmp_path)
    assert shown(html) == [("gfx1100", "Radeon RX 7900 XTX / XT")]
    row = row_html(html, "Radeon RX 7900 XTX / XT")
    assert "<b>gfx1100</b>" in row
    squares = dict(re.findall(r'<td class="sq[^"]*" data-column="([^"]+)" data-status="([^"]+)"', row))
    assert squares == {"llama.cpp": "passed", "JAX": "absent", "PyTorch": "absent", "vLLM": "absent", "SGLang": "absent", "Ollama": "absent"}
    details = dict(re.findall(r'<div class="detail[^"]*" data-column="([^"]+)" data-status="([^"]+)"', row))
    assert details == {"runtime": "absent", "smoke": "partial"}  # ours: inside the target's cell, not a column
    cells = {c.framework.name: c for c in read(repo, "channels/dev/matrix.json").cells if c.gfx_target == "gfx1100"}
    assert sorted(cells) == ["cairn-smoke", "llama-cpp-python"]
    smoke, llama = cells["cairn-smoke"].images[0].digest, cells["llama-cpp-python"].images[0].digest
    assert f"<code>docker pull {PUBLIC}/cairn/smoke@{smoke}</code>" in row
    index = (repo / "repo").as_uri() + "/channels/dev/simple/gfx1100/"
    assert f'<code>pip install --index-url {index} "cairn-smoke==5.2.3"</code>' in row  # the DOM as serialised: quotes as typed
    engine = re.search(r'<td class="sq st-passed" data-column="llama.cpp" data-status="passed"><details open="">(.*?)</td>', row, re.S)
    assert engine, row  # the one GPU left has its squares open: the commands are on screen without a click
    square = engine[1]
    assert f"<code>docker pull {PUBLIC}/cairn/llama-cpp@{llama}</code>" in square
    assert (f'<code>docker run --rm --device /dev/kfd --device /dev/dri -p 8080:8080 -v "$HOME/models:/models" '
            f'{PUBLIC}/cairn/llama-cpp@{llama} -m /models/model.gguf</code>') in square
    assert f'<code>pip install --index-url {index} "llama-cpp-python==0.3.36+rocm.5.2.3"</code>' in square
    assert "cairn-smoke" not in square and "cairn/smoke" not in square  # the engine's wheel rides in no other cell
    assert "Python Requires-Python &gt;=3.11 (py3 wheel)" in square  # the wheel's own range, not the image's 3.11
    # llama.cpp loads neither hipSPARSELt nor RCCL: the partial libraries of its family are not its partial
    assert "partial" not in square and "librccl" not in square
    assert "partial — no gfx1100 code in: libhipsparselt.so.0, librccl.so.1" in row  # the validation kernels' detail

    shot = tmp_path / "matrix-7900xtx.png"  # the test's artefact: what a user sees after searching
    proc = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,900", page.as_uri() + "#q=7900%20XTX")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000  # a rendered page, not a blank or an error tile


def test_pip_command_on_the_page_installs(page, repo, tmp_path):
    """The page's pip command is run as printed (into a target dir): it installs the cell's wheel."""
    command = re.search(r'<pre class="cmd pip"><code>(pip install [^<]*gfx1100[^<]*)</code>', page.read_text())
    assert command
    argv = shlex.split(command[1].replace("&quot;", '"'))
    assert argv[:2] == ["pip", "install"]
    out = subprocess.run([sys.executable, "-m", *argv, "--no-cache-dir", "--disable-pip-version-check", "--target", str(tmp_path / "t")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "t" / "cairn_smoke" / "lib" / "payload-gfx1100.bin").is_file()
    engine = re.search(r'<pre class="cmd pip"><code>(pip install [^<]*llama-cpp-python[^<]*)</code>', page.read_text())
    assert engine and "/simple/gfx1100/" in engine[1]  # from the target's own index
    argv = shlex.split(engine[1].replace("&quot;", '"'))
    out = subprocess.run([sys.executable, "-m", *argv, "--no-cache-dir", "--disable-pip-version-check", "--target", str(tmp_path / "e")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "e" / "llama_cpp" / "lib" / "libggml-hip-gfx1100.bin").is_file()


def test_no_loopback_address_when_a_registry_is_configured(page, repo):
    html = page.read_text()
    assert not LOOPBACK.search(html)
    assert not LOOPBACK.search(to_markdown(read(repo, "channels/dev/matrix.json"), PUBLIC))
    assert html.count(f"docker pull {PUBLIC}/cairn/smoke@sha256:") == 9  # in the smoke square of every GPU row


def test_without_a_registry_a_loopback_image_is_local_only(repo):
    """No public registry configured: no pull command, no loopback address, and the page says so."""
    html = to_html(read(repo, "channels/dev/matrix.json"), registry_products(), None, (repo / "repo").as_uri() + "/")
    assert not LOOPBACK.search(html) and "docker pull" not in html
    assert "Published to a local registry only (no public registry configured): <code>cairn/smoke@sha256:" in html
    assert "(local registry only)" in to_markdown(read(repo, "channels/dev/matrix.json"))


def test_staging_page_shows_the_held_cell_with_why_and_no_command(repo):
    """The staging matrix lists every staged cell: gfx908 failed static-coverage, so it is held, says why and
    offers nothing to install (it is not on any channel)."""
    html = to_html(read(repo, "staging/5.2.3/matrix.json"), registry_products(), PUBLIC, (repo / "repo").as_uri() + "/")
    row = row_html(html, "MI100")
    assert 'data-column="smoke" data-status="held"' in row
    assert "not promoted to dev: required gates did not pass" in row
    assert "static-coverage: failed — static-coverage failed on gfx908" in row
    assert "No install command: this cell is not on the dev channel." in row
    assert "docker pull" not in row and "pip install" not in row


def test_page_is_self_contained_and_deterministic(page, repo):
    html = page.read_text()
    assert not re.search(r'(src|href)="(https?:)?//', html) and "<link" not in html
    assert "gpu: not run — gpu not-run on gfx1030" in html
    assert "static-coverage: passed" in html
    assert '<option value="MI300X">MI300X (gfx942)</option>' in html
    again = to_html(read(repo, "channels/dev/matrix.json"), registry_products(), PUBLIC, (repo / "repo").as_uri() + "/")
    assert again == html


def test_markdown_lists_every_cell(repo):
    text = to_markdown(read(repo, "channels/dev/matrix.json"))
    rows = [line for line in text.splitlines() if line.startswith("| gfx")]
    assert [r.split(" | ")[0] for r in rows] == ["| gfx target", "| gfx1030", "| gfx1100", "| gfx1100", "| gfx90a"]
    assert "| gfx1100 | Radeon RX 7900 XTX / XT, Radeon PRO W7900 / W7800 | debian-12 | Requires-Python >=3.11 (py3 wheel) | llama-cpp-python" in text
    assert "gpu: ⏸ not run (gpu not-run on gfx1030)" in text


def test_cairn_matrix_verifies_the_signed_matrix(repo, tmp_path):
    env = {**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf"), "CAIRN_ROOT": str(ROOT)}
    cmd = [sys.executable, "-m", "cairn.cli", "matrix", "--from", str(repo / "repo"), "--root", str(repo / "root.json")]
    out = subprocess.run([*cmd, "--format", "md"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "| gfx90a | MI210, MI250, MI250X |" in out.stdout
    target = repo / "repo" / "channels" / "dev" / "matrix.json"
    original = target.read_bytes()
    target.write_bytes(original.replace(b'"passed"', b'"failed"', 1))
    try:
        bad = subprocess.run([*cmd, "--format", "html", "--out", str(tmp_path / "m.html")], capture_output=True, text=True, env=env, timeout=120)
        assert bad.returncode == 1
        assert "channels/dev/matrix.json: bytes do not match the signed sha256" in bad.stderr
        assert not (tmp_path / "m.html").exists()
    finally:
        target.write_bytes(original)


def test_cairn_matrix_registry_option_and_env(repo, tmp_path):
    """``--registry`` (or ``$CAIRN_PUBLIC_REGISTRY``) names the public registry; a loopback or malformed one is
    one line, exit 2, nothing written."""
    env = {**os.environ, "CAIRN_ROOT": str(ROOT)}
    env.pop("CAIRN_PUBLIC_REGISTRY", None)
    cmd = [sys.executable, "-m", "cairn.cli", "matrix", "--from", str(repo / "repo"), "--format", "html"]
    by_env = subprocess.run([*cmd, "--out", str(tmp_path / "env.html")], capture_output=True, text=True, timeout=120,
                            env={**env, "CAIRN_PUBLIC_REGISTRY": "ghcr.io/cairn-rocm"})
    assert by_env.returncode == 0, by_env.stderr
    page = (tmp_path / "env.html").read_text()
    assert "docker pull ghcr.io/cairn-rocm/cairn/smoke@sha256:" in page and not LOOPBACK.search(page)
    # a repository read from this machine's disk is never named on the page unasked: no file:// URL, the index by key
    assert "file://" not in page and "pip install" not in page
    assert "Wheels on the index <code>channels/dev/simple/gfx90a/</code> (relative to the repository root)." in page
    by_option = subprocess.run([*cmd, "--registry", PUBLIC, "--base-url", "https://cairn.invalid/r"], capture_output=True, text=True,
                               timeout=120, env={**env, "CAIRN_PUBLIC_REGISTRY": "ghcr.io/cairn-rocm"})
    assert by_option.returncode == 0, by_option.stderr
    assert f"docker pull {PUBLIC}/cairn/smoke@sha256:" in by_option.stdout and "ghcr.io" not in by_option.stdout
    assert "pip install --index-url https://cairn.invalid/r/channels/dev/simple/gfx90a/ &quot;cairn-smoke==5.2.3&quot;" in by_option.stdout
    for bad, says in (("127.0.0.1:5000", "is a loopback address"), ("localhost:5000/x", "is a loopback address"),
                      ("https://ghcr.io/x", "is not a registry name")):
        out = subprocess.run([*cmd, "--registry", bad, "--out", str(tmp_path / "bad.html")], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and f"--registry '{bad}' {says}" in out.stderr, out.stderr
        assert not (tmp_path / "bad.html").exists()
