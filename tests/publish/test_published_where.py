"""What a publish uploads for a cell that failed a required gate, exactly as README.md and docs/publishing.md
("What is published where") say: its artifacts are uploaded and signed and the staging pages list it; the
channel's index and matrix — what pip and ``cairn doctor`` read — never offer it."""

from __future__ import annotations

import json

from tuf.api.serialization.json import JSONSerializer

from cairn.publish.sample import write_sample_bundle
from cairn.sign.keys import init_keys, make_root
from support import ROOT, cairn


def test_a_held_cell_is_uploaded_signed_and_staged_but_on_no_channel_page(tmp_path):
    keys = init_keys(tmp_path / "keys")
    (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.5.0", families=("gfx90a", "gfx908"),
                                 gates={"gfx90a": {"static-coverage": "passed"}, "gfx908": {"static-coverage": "failed"}})
    repo = tmp_path / "repo"
    published = cairn("publish", str(bundle), "--to", repo.as_uri(), "--keys", str(keys.directory), "--channel", "dev", "--json", extra_env={"CAIRN_ROOT": str(ROOT), "CAIRN_TUF_CACHE": str(tmp_path / "tuf")})
    assert published.returncode == 0, published.stderr
    report = json.loads(published.stdout)
    assert list(report["held"]) == ["5.5.0/gfx908/debian-12/py3.11/cairn-smoke-0.1.0"]

    (held_wheel,) = (repo / "packages" / "gfx908").glob("cairn_smoke-*.whl")  # besides its <sha256>.<name> copy
    signed = cairn("verify", str(held_wheel), "--repo", str(repo), "--root", str(keys.directory / "root.json"), extra_env={"CAIRN_ROOT": str(ROOT), "CAIRN_TUF_CACHE": str(tmp_path / "tuf2")})
    assert signed.returncode == 0, signed.stderr + signed.stdout  # uploaded and signed, though its cell failed
    assert (repo / f"{held_wheel.relative_to(repo)}.intoto.jsonl").is_file()
    assert held_wheel.name in (repo / "staging" / "5.5.0" / "simple" / "gfx908" / "cairn-smoke" / "index.html").read_text()

    assert not (repo / "channels" / "dev" / "simple" / "gfx908").exists()
    channel = json.loads((repo / "channels" / "dev" / "matrix.json").read_text())
    assert sorted(c["gfx_target"] for c in channel["cells"]) == ["gfx90a"]
    passing_page = (repo / "channels" / "dev" / "simple" / "gfx90a" / "cairn-smoke" / "index.html").read_text()
    assert "packages/gfx90a/" in passing_page and "packages/gfx908/" not in passing_page


def test_the_readme_says_what_is_published_where_not_that_nothing_failed_is():
    readme = (ROOT / "README.md").read_text()
    assert "Nothing that failed its gates is published" not in readme
    assert "docs/publishing.md#what-is-published-where" in readme
    assert "## What is published where" in (ROOT / "docs" / "publishing.md").read_text()
