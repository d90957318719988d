"""The matrix page in a real browser (headless Chromium): it lists every cell and the filter by GPU product
or gfx target works, preset through the URL; the Markdown table and ``cairn matrix`` read a signed matrix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.matrix.model import from_dict
from cairn.matrix.render import registry_products, to_html, to_markdown
from cairn.publish.backend import FileBackend
from cairn.publish.bundle import load_bundle
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.sign.keys import init_keys, make_root
from conftest import need_tool

ROW = re.compile(r'<tr class="cell" data-target="([^"]+)"[^>]*?( hidden="")?>')


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    base = tmp_path_factory.mktemp("matrix")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    (base / "root.json").write_bytes(root.to_bytes(JSONSerializer(compact=False)))
    gates = {"gfx1030": {"static-coverage": "passed", "gpu": "not-run"}}
    publish(load_bundle(write_sample_bundle(base / "bundle", gates=gates)), FileBackend(base / "repo"), keys, root)
    return base


@pytest.fixture(scope="module")
def page(repo):
    import json

    matrix = from_dict(json.loads((repo / "repo" / "channels" / "dev" / "matrix.json").read_text()))
    path = repo / "matrix.html"
    path.write_text(to_html(matrix, registry_products()))
    return path


def dom(page: Path, fragment: str, tmp_path: Path) -> str:
    chromium = need_tool("chromium", "chromium")
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--no-first-run", "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
                           "--dump-dom", page.as_uri() + fragment], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def shown(html: str) -> list[str]:
    return sorted(target for target, hidden in ROW.findall(html) if not hidden)


@pytest.mark.parametrize(("fragment", "expected"), [
    ("", ["gfx1030", "gfx908", "gfx90a"]),
    ("#q=MI250", ["gfx90a"]),                       # a product name (from manifests/targets.toml)
    ("#q=gfx1030", ["gfx1030"]),                    # a gfx target
    ("#q=radeon%20rx%206900", ["gfx1030"]),         # case-insensitive, URL-encoded
    ("?product=MI100", ["gfx908"]),                 # the product drop-down, preset from the query
    ("#q=MI300X", []),                              # a GPU this release does not ship for
])
def test_filter_in_headless_chromium(page, tmp_path, fragment, expected):
    html = dom(page, fragment, tmp_path)
    assert len(ROW.findall(html)) == 3  # every cell is on the page
    assert shown(html) == expected
    count = re.search(r'<span id="count" data-shown="(\d+)">([^<]+)</span>', html)
    assert count and count[2] == f"{len(expected)} of 3 rows shown"
    none_hidden = re.search(r'<p id="none"( hidden="")?>', html)
    assert none_hidden and bool(none_hidden[1]) == bool(expected)


def test_page_is_self_contained_and_shows_gates(page):
    html = page.read_text()
    assert not re.search(r'(src|href)="(https?:)?//', html) and "<link" not in html
    assert "gpu: not run — gpu not-run on gfx1030" in html
    assert "static-coverage: passed" in html
    assert '<option value="MI300X">MI300X (gfx942)</option>' in html


def test_markdown_lists_every_cell(repo):
    import json

    matrix = from_dict(json.loads((repo / "repo" / "channels" / "dev" / "matrix.json").read_text()))
    text = to_markdown(matrix)
    rows = [line for line in text.splitlines() if line.startswith("| gfx")]
    assert [r.split(" | ")[0] for r in rows] == ["| gfx target", "| gfx1030", "| gfx908", "| gfx90a"]
    assert "gpu: ⏸ not run (gpu not-run on gfx1030)" in text


def test_cairn_matrix_verifies_the_signed_matrix(repo, tmp_path):
    env = {**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf"), "CAIRN_ROOT": str(Path(__file__).parents[1])}
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
