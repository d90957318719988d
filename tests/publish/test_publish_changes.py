"""A channel's matrix names the release it served before, and the diff from it is published beside the new one:
the matrix page links it, `cairn verify` covers it, a re-run signs nothing, gate results recorded later
are written into it, and a matrix or repository that
would make the link point elsewhere, or the diff come from unsigned bytes, is refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CairnError, InputError
from cairn.matrix.bundle import load_bundle, write_bundle_json
from cairn.matrix.model import parse_matrix
from cairn.publish.publisher import promote, publish
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import FileBackend
from cairn.sign.keys import init_keys, make_root
from cairn.sign.verify import verify_repository
from support import cairn

OLD, NEW = "5.2.3", "5.2.4"
DIFF = f"staging/{NEW}/diff-from-{OLD}.json"


def _targets(repo: Path) -> dict:
    """The newest signed targets of a file repository."""
    newest = max((repo / "metadata").glob("*.targets.json"), key=lambda p: int(p.name.split(".")[0]))
    return json.loads(newest.read_text())["signed"]["targets"]


def _new_bundle(base: Path) -> Path:
    """The next release: other wheel bytes, one cell more, a failed gate, and a newer HIP pin."""
    bundle = write_sample_bundle(base / "new", version=NEW, families=("gfx90a", "gfx1100"), seed="rebuilt",
                                 gates={"gfx90a": {"static-coverage": "failed"}})
    doc = json.loads((bundle / "bundle.json").read_text())
    doc["pins"] = {"hip-runtime": "deb:libamdhip64-5=5.2.4-1"}
    write_bundle_json(bundle, doc)
    return bundle


@pytest.fixture
def published(tmp_path) -> dict:
    keys = init_keys(tmp_path / "keys")
    root = make_root(keys)
    (tmp_path / "pinned-root.json").write_bytes(root.to_bytes(JSONSerializer(compact=False)))
    repo = tmp_path / "repo"
    old = write_sample_bundle(tmp_path / "old", version=OLD, families=("gfx90a",))
    publish(load_bundle(old), FileBackend(repo), keys, root)
    first = json.loads((repo / "channels" / "dev" / "matrix.json").read_text())
    report = publish(load_bundle(_new_bundle(tmp_path)), FileBackend(repo), keys, root)
    return {"repo": repo, "keys": keys, "root": root, "first": first, "report": report, "base": tmp_path}


def test_the_next_release_on_a_channel_names_the_one_before_and_publishes_the_diff(published) -> None:
    repo = published["repo"]
    assert "previous" not in published["first"]["release"]  # a channel's first release names nothing
    matrix = json.loads((repo / "channels" / "dev" / "matrix.json").read_text())
    assert matrix["release"]["previous"] == {"version": OLD, "diff": DIFF}

    diff = json.loads((repo / DIFF).read_text())
    assert (diff["a"]["input"], diff["b"]["input"]) == (f"staging/{OLD}", f"staging/{NEW}")
    assert diff["components"]["changed"] == [{"name": "hip-runtime", "pin": ["deb:libamdhip64-5=5.2.3-8", "deb:libamdhip64-5=5.2.4-1"]}]
    assert diff["cells"]["added"] == ["gfx1100/debian-12/py3.11/cairn-smoke"]
    [cell] = diff["cells"]["changed"]
    assert cell["gates"] == [{"gate": "static-coverage", "from": "passed", "to": "failed"}]
    assert [w["to"]["file"] for w in cell["wheels"]] == [f"cairn_smoke-{NEW}-py3-none-linux_x86_64.whl"]

    # the same comparison `cairn diff` makes of the two published releases, pins included now that the record keeps them
    proc = cairn("diff", f"{repo}@{OLD}", f"{repo}@{NEW}", "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    by_hand = json.loads(proc.stdout)
    labels = ("a", "b", "not_compared")  # what each side was called, and so the lines that name them
    assert {k: v for k, v in by_hand.items() if k not in labels} == {k: v for k, v in diff.items() if k not in labels}
    assert not [line for line in diff["not_compared"] + by_hand["not_compared"] if line.startswith("component pins")]

    # a signed target like every object outside metadata/: verified, and a changed byte in it is caught
    pinned = (published["base"] / "pinned-root.json").read_bytes()
    assert DIFF in verify_repository(str(repo), pinned, published["base"] / "tuf-cache").checked
    (repo / DIFF).write_bytes((repo / DIFF).read_bytes().replace(b"failed", b"passed"))
    verified = cairn("verify", str(repo), "--root", str(published["base"] / "pinned-root.json"), timeout=120)
    assert verified.returncode != 0 and DIFF in verified.stderr, verified.stderr + verified.stdout


def test_the_matrix_page_links_the_diff_and_shows_what_changed(published) -> None:
    repo = published["repo"]
    proc = cairn("matrix", "--from", str(repo), "--channel", "dev", "--format", "html", "--base-url", repo.as_uri(),
                 "--root", str(published["base"] / "pinned-root.json"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = proc.stdout
    assert f'<a href="{repo.as_uri()}/{DIFF}">{DIFF}</a>' in page
    unasked = cairn("matrix", "--from", str(repo), "--channel", "dev", "--format", "html")  # a local directory: named by key only
    assert unasked.returncode == 0 and f"<code>{DIFF}</code> (relative to the repository root)" in unasked.stdout
    assert "file://" not in unasked.stdout
    assert f"Changes since {OLD}" in page
    assert "~ component hip-runtime: pin deb:libamdhip64-5=5.2.3-8 → deb:libamdhip64-5=5.2.4-1" in page
    assert "gate static-coverage passed → failed" in page

    md = cairn("matrix", "--from", str(repo), "--channel", "dev", "--format", "md", timeout=120)
    assert md.returncode == 0, md.stderr
    assert f"Changes since {OLD}, the release this channel served before: `{DIFF}`" in md.stdout


def test_publishing_the_same_release_again_keeps_what_it_named_and_signs_nothing(published) -> None:
    repo, keys, root = published["repo"], published["keys"], published["root"]
    before = {key: (repo / key).read_bytes() for key in ("channels/dev/matrix.json", DIFF, "metadata/timestamp.json")}
    report = publish(load_bundle(published["base"] / "new"), FileBackend(repo), keys, root)
    assert not report.signed and report.timestamp_version == published["report"].timestamp_version
    assert {key: (repo / key).read_bytes() for key in before} == before


def test_gate_results_recorded_later_are_written_into_the_diff(published, tmp_path) -> None:
    """A GPU host's signed verdict, recorded with ``cairn promote --gates``: the channel still names the release
    before, and the diff now shows the gate as it stands — beside the static gate that failed at build time, which
    the passing GPU verdict does not overturn (the cell stays held)."""
    from securesystemslib.signer import CryptoSigner

    from cairn.sign import attest, runners

    repo, keys, root = published["repo"], published["keys"], published["root"]
    digest = load_bundle(published["base"] / "new").cells[0].images[0].digest
    runner = CryptoSigner.generate_ed25519()  # a runner trusted for the gate (cairn keys runner / trust-runner)
    public = {"keyid": runner.public_key.keyid, **runner.public_key.to_dict()}
    runners.trust(keys.directory, root, keys.signer("targets"), public, "runner", ["gpu"], [])
    host = attest.Host("AMD Instinct MI250X", "gfx90a", "amdgpu-dkms 6.10.5", "5.15.0-119-generic", "6.4.1")
    verdict = attest.sign_statement(attest.gate_statement(
        gate="gpu", target="gfx90a", image="smoke", digest=digest, status="passed", reason="",
        evidence_sha256="0" * 64, evidence_name="gate.log", host=host), runner)
    report = promote(FileBackend(repo), keys, root, NEW, "dev", gate_results=[(tmp_path / "gate.intoto.json", verdict)])
    assert report.held == {f"{NEW}/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0": ["static-coverage: failed (static-coverage failed on gfx90a)"]}
    matrix = json.loads((repo / "channels" / "dev" / "matrix.json").read_text())
    assert matrix["release"]["previous"] == {"version": OLD, "diff": DIFF}
    [cell] = json.loads((repo / DIFF).read_text())["cells"]["changed"]
    assert cell["gates"] == [{"gate": "gpu", "from": "not-run", "to": "passed"},
                             {"gate": "static-coverage", "from": "passed", "to": "failed"}]
    assert cell["wheels"]


def test_a_page_a_killed_run_left_unsigned_is_not_what_the_diff_is_made_from(published) -> None:
    """A publish killed after writing the channel's new matrix but before signing it leaves the plain name ahead of
    the metadata; the next run diffs from the release the signed matrix names."""
    repo, keys, root = published["repo"], published["keys"], published["root"]
    (repo / "channels" / "dev" / "matrix.json").write_text("{ left by a killed run")
    later = write_sample_bundle(published["base"] / "later", version="5.2.5", families=("gfx90a",), seed="again")
    publish(load_bundle(later), FileBackend(repo), keys, root)
    matrix = json.loads((repo / "channels" / "dev" / "matrix.json").read_text())
    assert matrix["release"]["previous"] == {"version": NEW, "diff": "staging/5.2.5/diff-from-5.2.4.json"}


def test_a_diff_is_never_made_from_bytes_the_signed_targets_do_not_list(published) -> None:
    repo, keys, root = published["repo"], published["keys"], published["root"]
    sha = next(t["hashes"]["sha256"] for k, t in _targets(repo).items() if k == f"staging/{NEW}/release.json")
    record = repo / "staging" / NEW / f"{sha}.release.json"  # the signed copy a diff is read from
    record.write_bytes(record.read_bytes().replace(b"cairn-default", b"cairn-defaulx"))
    before = (repo / "channels" / "dev" / "matrix.json").read_bytes()
    later = write_sample_bundle(published["base"] / "later", version="5.2.5", families=("gfx90a",), seed="again")
    with pytest.raises(CairnError, match=re.escape(f"staging/{NEW}/release.json is not the file its signed targets list")):
        publish(load_bundle(later), FileBackend(repo), keys, root)
    assert (repo / "channels" / "dev" / "matrix.json").read_bytes() == before


@pytest.mark.parametrize("diff", ["../../../etc/passwd", f"staging/{NEW}/diff-from-5.2.0.json", "https://elsewhere.invalid/d.json"])
def test_a_matrix_whose_diff_is_not_its_own_key_is_refused_in_one_line(published, tmp_path, diff) -> None:
    matrix = json.loads((published["repo"] / "channels" / "dev" / "matrix.json").read_text())
    matrix["release"]["previous"]["diff"] = diff
    with pytest.raises(InputError, match=r"release\.previous\.diff"):
        parse_matrix(json.dumps(matrix), "matrix.json")
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(matrix))
    proc = cairn("matrix", "--from", str(path), "--format", "html", timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "release.previous.diff" in lines[0] and proc.stdout == "", proc.stderr


def test_the_page_in_headless_chromium_links_the_diff_it_names(published, tmp_path) -> None:
    from support.browser import chromium, dom

    repo, page = published["repo"], tmp_path / "matrix.html"
    proc = cairn("matrix", "--from", str(repo), "--channel", "dev", "--format", "html", "--out", str(page),
                 "--base-url", repo.as_uri(), timeout=120)  # a local test repository: named only when asked
    assert proc.returncode == 0, proc.stderr
    html = dom(page, "", tmp_path)
    link = re.search(r'<div id="changes"><p>Changes since ([^,]+),[^<]*<a href="([^"]+)">', html)
    assert link and link[1] == OLD and link[2] == f"{repo.as_uri()}/{DIFF}"
    assert json.loads(Path(link[2].removeprefix("file://")).read_text())["b"]["version"] == NEW  # the link opens the diff
    shot = tmp_path / "matrix-changes.png"
    assert chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,700", page.as_uri()).returncode == 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
