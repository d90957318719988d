"""Search the matrix page by what people type (issue 37 §2), in headless Chromium and with ``cairn matrix --find``.

The page is rendered from a published sample release with a cell for every target of the default release
(gfx90a, gfx942, gfx1100-1102, gfx1151, gfx1200, gfx1201; llama.cpp for gfx1100), product names from
``manifests/targets.toml``. A GPU the release does not serve is listed with why and what to use instead, never
"offers nothing"; a target the release serves is found under every spelling of its products.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.matrix.model import from_dict
from cairn.matrix.render import registry_products, to_html
from cairn.matrix.search import aliases, normalize, search_keys
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.keys import init_keys, make_root
from support import ROOT
from support.browser import ROW, dom, shown

TARGETS = ("gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201")  # the default release's
PUBLIC = "registry.cairn.invalid/team"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    from tuf.api.serialization.json import JSONSerializer

    base = tmp_path_factory.mktemp("search")
    keys = init_keys(base / "keys")
    root = make_root(keys)
    (base / "root.json").write_bytes(root.to_bytes(JSONSerializer(compact=False)))
    bundle = write_sample_bundle(base / "bundle", version="7.2.4", families=TARGETS, engine=("gfx1100",), payload_bytes=64)
    publish(load(bundle), FileBackend(base / "repo"), keys, root)
    return base


def load(bundle: Path):  # type: ignore[no-untyped-def]
    from cairn.matrix.bundle import load_bundle

    return load_bundle(bundle)


@pytest.fixture(scope="module")
def page(repo):
    matrix = from_dict(json.loads((repo / "repo" / "channels" / "dev" / "matrix.json").read_text()))
    path = repo / "matrix.html"
    path.write_text(to_html(matrix, registry_products(), PUBLIC, "https://cairn.invalid/r/"))
    return path


def test_product_names_stand_for_what_people_type() -> None:
    assert aliases("Radeon RX 9070 / XT") == ["Radeon RX 9070 / XT", "Radeon RX 9070", "Radeon RX 9070 XT"]
    assert aliases("Radeon RX 7900 XTX / XT")[1:] == ["Radeon RX 7900 XTX", "Radeon RX 7900 XT"]
    assert aliases("Radeon RX 7800 XT / 7700 XT")[1:] == ["Radeon RX 7800 XT", "Radeon RX 7700 XT"]
    assert aliases("Radeon PRO W7900 / W7800")[1:] == ["Radeon PRO W7900", "Radeon PRO W7800"]
    assert aliases("Strix Halo (Ryzen AI Max+ 395)") == ["Strix Halo (Ryzen AI Max+ 395)"]
    assert normalize(" 7900 XTX ") == normalize("7900xtx") == "7900xtx"
    assert "radeonrx6800xt" in search_keys("Radeon RX 6800 / XT", "gfx1030")  # the default release ships gfx1030


@pytest.mark.parametrize(("typed", "expected"), [
    ("RX 9070 XT", [("gfx1201", "Radeon RX 9070 / XT")]),
    ("9060 XT", [("gfx1200", "Radeon RX 9060 / XT")]),
    ("7900XTX", [("gfx1100", "Radeon RX 7900 XTX / XT")]),
    ("7900 xtx", [("gfx1100", "Radeon RX 7900 XTX / XT")]),
    ("W7900", [("gfx1100", "Radeon PRO W7900 / W7800")]),
    ("MI300X", [("gfx942", "MI300X")]),
    ("Ryzen AI Max 395", [("gfx1151", "Strix Halo (Ryzen AI Max+ 395)")]),
    ("7700 XT", [("gfx1101", "Radeon RX 7800 XT / 7700 XT")]),
    ("RX 6800 XT", [("gfx1030", "Radeon RX 6800 / XT")]),  # RDNA2, the default release's sixth family
])
def test_the_page_finds_a_served_gpu_by_what_people_type(page, tmp_path, typed, expected):
    from urllib.parse import quote

    html = dom(page, "#q=" + quote(typed), tmp_path)
    assert len(ROW.findall(html)) == 21  # a row per product of every target the release serves
    assert shown(html) == expected
    assert re.search(r'<p id="none" hidden="">', html)  # a GPU it serves is never "nothing matches"
    assert re.search(r'<div id="other" data-shown="0" hidden="">', html)
    if expected == [("gfx1100", "Radeon RX 7900 XTX / XT")]:  # llama.cpp's cell, open with its commands
        row = re.search(r'data-product="Radeon RX 7900 XTX / XT"[^>]*>(.*?)</tr>', html, re.S)
        assert row and 'data-column="llama.cpp" data-status="passed"><details open="">' in row[1]
        assert f"docker pull {PUBLIC}/cairn/llama-cpp@sha256:" in row[1]
        assert "docker run --rm --device /dev/kfd --device /dev/dri -p 8080:8080" in row[1]


@pytest.mark.parametrize(("typed", "product", "says"), [
    ("Radeon VII", "Radeon VII", "no library code for it in this release (ROCm 7.2.4) and no target of its ISA (gfx9-generic)"),
    ("RX 6700 XT", "Radeon RX 6700 XT", "releases 7.14.0, 10.1.0 of Cairn build for it"),
    ("780M", "Radeon 780M (Ryzen 7 7840U)", "nearest in 7.2.4: gfx1100 (same gfx11-generic ISA) with HSA_OVERRIDE_GFX_VERSION=11.0.0 — unsupported"),
    ("MI355X", "MI355X", "nearest in 7.2.4: gfx942 (same gfx9-4-generic ISA) with HSA_OVERRIDE_GFX_VERSION=9.4.2 — unsupported"),
])
def test_a_gpu_the_release_does_not_serve_says_why_and_what_instead(page, tmp_path, typed, product, says):
    from urllib.parse import quote

    html = dom(page, "#q=" + quote(typed), tmp_path)
    assert shown(html) == []
    other = re.search(r'<div id="other" data-shown="(\d+)">(.*?)</div>', html, re.S)
    assert other and other[1] != "0", html[-3000:]
    item = re.search(r'<li [^>]*data-product="' + re.escape(product) + r'"[^>]*>(.*?)</li>', other[2], re.S)
    assert item and ' hidden=""' not in item[0] and says in item[1].replace("&amp;", "&"), other[2]
    assert "offers nothing" not in html
    assert re.search(r'<p id="none" hidden="">', html)


def test_nothing_known_matches_says_so(page, tmp_path):
    html = dom(page, "#q=GeForce%20RTX%204090", tmp_path)
    assert shown(html) == [] and re.search(r'<p id="none">', html) and "offers nothing" not in html


def test_cairn_matrix_find_is_the_same_lookup(repo, tmp_path):
    env = {**os.environ, "CAIRN_ROOT": str(ROOT)}
    find = lambda q: subprocess.run([sys.executable, "-m", "cairn.cli", "matrix", "--from", str(repo / "repo"), "--find", q],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=120)
    xtx = find("7900XTX")
    assert xtx.returncode == 0, xtx.stderr
    assert xtx.stdout.splitlines() == [
        "Radeon RX 7900 XTX / XT — gfx1100 (gfx1100), release 7.2.4 on dev: llama.cpp passed [validation kernels passed]"]
    vii = find("radeon vii")
    assert vii.returncode == 0 and vii.stdout.startswith("Radeon VII — gfx906: release 7.2.4 builds nothing for gfx906")
    assert find("9070 xt").stdout.startswith("Radeon RX 9070 / XT — gfx1201 (gfx1201), release 7.2.4 on dev: no engine or framework")
    nothing = find("GeForce RTX 4090")
    assert nothing.returncode == 1 and nothing.stdout == "" and nothing.stderr.count("\n") == 1
    assert "no GPU product or gfx target known to Cairn matches 'GeForce RTX 4090'" in nothing.stderr
