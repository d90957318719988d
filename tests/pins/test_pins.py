"""Pins that outlive the archive: suite-pinned debs, the source mirror, `cairn pins check|refresh`.

The archive is the real one (Debian's sid and experimental on the archive this host reaches); "archive
loss" is simulated by pointing Cairn at an archive URL that answers nothing (CAIRN_DEBIAN_MIRROR).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.errors import CairnError
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.planner import plan_release
from cairn.plan.probe import Host
from cairn.sources import debian
from cairn.sources.debversion import compare
from cairn.sources.fetch import fetch_deb_from_suite
from support import ROOT, cairn

MANIFEST = ROOT / "manifests" / "releases" / "default.toml"
GONE = "http://127.0.0.1:9"  # the discard port: nothing answers, like an archive that is gone


def test_debian_version_order() -> None:
    assert compare("7.2.4-1~exp1", "7.2.4-1") < 0
    assert compare("7.2.4-1~exp1+b1", "7.2.4-1~exp1") > 0
    assert compare("1:0.7.0-1", "7.2.4-1") > 0
    assert compare("5.2.3+dfsg-1", "5.2.3-1") > 0
    assert compare("2.4.134-3", "2.4.134-3") == 0
    assert compare("6.4.3-2", "7.2.4-1~exp1") < 0


def test_packages_index_parse_keeps_declared_gpu_targets() -> None:
    text = ("Package: librocblas5\nVersion: 7.2.4-1~exp1\nFilename: pool/main/r/rocblas/x.deb\nSize: 10\n"
            "SHA256: " + "a" * 64 + "\nX-Rocm-Gpu-Architecture: gfx942 gfx1100\n\n"
            "Package: librocblas5\nVersion: 6.4.4-1\nFilename: pool/main/r/rocblas/y.deb\nSize: 9\nSHA256: " + "b" * 64 + "\n")
    entries = debian.parse_packages(text)["librocblas5"]
    assert [e.version for e in entries] == ["7.2.4-1~exp1", "6.4.4-1"]
    assert entries[0].gpu_archs == ("gfx942", "gfx1100") and entries[1].gpu_archs == ()
    assert debian.newest(entries).version == "7.2.4-1~exp1"


def _archive(root: Path, packages: str, *, list_plain: bool = True) -> str:
    """A one-suite archive (sid, amd64) under ``root``; its InRelease lists Packages.xz and, if asked, Packages."""
    import hashlib
    import lzma

    folder = root / "dists" / "sid" / "main" / "binary-amd64"
    folder.mkdir(parents=True)
    plain = packages.encode()
    (folder / "Packages.xz").write_bytes(lzma.compress(plain))
    listed = [("main/binary-amd64/Packages", plain)] if list_plain else []
    listed.append(("main/binary-amd64/Packages.xz", (folder / "Packages.xz").read_bytes()))
    lines = "".join(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}\n" for name, data in listed)
    (root / "dists" / "sid" / "InRelease").write_text(f"Suite: sid\nSHA256:\n{lines}")
    return root.as_uri()


def test_a_cached_index_the_signed_release_does_not_name_is_never_used(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The decompressed Packages kept in the cache is checked against the digest the signed InRelease lists for
    it on every read: edited, it is made again from Packages.xz, and the entries are the archive's."""
    monkeypatch.setattr(debian, "KEYRING", tmp_path / "no-keyring")  # the stanzas are ours, so is the InRelease
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    good, evil = "a" * 64, "e" * 64
    text = (f"Package: librocblas5\nVersion: 7.2.4-1\nFilename: pool/x.deb\nSize: 10\nSHA256: {good}\n\n"
            "Package: rocm-smi\nVersion: 7.2.0-1\nFilename: pool/y.deb\nSize: 9\nDescription: no digest\n")
    mirror = _archive(tmp_path / "archive", text)
    debian._suite_index.cache_clear()
    try:
        index = debian.suite_index("sid", mirror)
        assert [e.sha256 for e in index["librocblas5"]] == [good]
        assert "rocm-smi" not in index and index.get("rocm-smi", []) == [] and list(index) == ["librocblas5"]
        (kept,) = (tmp_path / "cache").rglob("Packages")
        assert kept.read_text() == text
        kept.write_text(text.replace(good, evil))  # same size, another deb's digest
        debian._suite_index.cache_clear()
        assert [e.sha256 for e in debian.suite_index("sid", mirror)["librocblas5"]] == [good]
        assert kept.read_text() == text  # made again from the signed Packages.xz

        other = _archive(tmp_path / "older", text, list_plain=False)  # an InRelease naming only Packages.xz
        debian._suite_index.cache_clear()
        assert [e.sha256 for e in debian.suite_index("sid", other)["librocblas5"]] == [good]
        assert len(list((tmp_path / "cache").rglob("Packages"))) == 1  # nothing the signature cannot vouch for is kept
    finally:
        debian._suite_index.cache_clear()


def _stale_copy(tmp_path: Path) -> tuple[Path, str, str]:
    """The release manifest with rocm-core pinned to a version experimental does not serve."""
    text = MANIFEST.read_text()
    match = re.search(r'package = "librocm-core1", version = "([^"]+)", sha256 = "([0-9a-f]{64})"', text)
    assert match
    stale = text.replace(match[0], f'package = "librocm-core1", version = "7.2.3-1~exp1", sha256 = "{"0" * 64}"')
    path = tmp_path / "stale.toml"
    path.write_text(stale)
    return path, match[1], match[2]


@pytest.mark.network
def test_pins_check_against_the_real_archive() -> None:
    result = cairn("pins", "check", str(MANIFEST), "--json", cwd=ROOT, timeout=600)
    report = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["ok"] and len(report["pins"]) == 36 + 18  # the components' debs and the 18 the SDK wheels graft
    by_package = {p["package"]: p for p in report["pins"]}
    assert by_package["libllvm22"]["component"] == "graft:libllvm22" and by_package["libllvm22"]["status"] == "current"
    assert by_package["librocblas5"]["status"] == "current"
    # the archive's own label for rocBLAS: the targets Debian says it built
    assert {"gfx942", "gfx1100", "gfx1151", "gfx1201"} <= set(by_package["librocblas5"]["declared_targets"])
    assert by_package["libhipsparselt0"]["declared_targets"] == ["gfx942", "gfx950"]


@pytest.mark.network
def test_stale_pin_is_reported_and_refreshed_with_a_diff(tmp_path: Path) -> None:
    path, current, sha256 = _stale_copy(tmp_path)
    check = cairn("pins", "check", str(path), cwd=ROOT, timeout=600)
    assert check.returncode == 1
    assert f"stale     rocm-core                librocm-core1=7.2.3-1~exp1 (experimental) — experimental offers {current}" in check.stdout
    assert f"cairn pins refresh {path}" in check.stderr
    refresh = cairn("pins", "refresh", str(path), cwd=ROOT, timeout=600)
    assert refresh.returncode == 0, refresh.stderr
    assert '-source.deb = { package = "librocm-core1", version = "7.2.3-1~exp1"' in refresh.stdout
    assert f'+source.deb = {{ package = "librocm-core1", version = "{current}", sha256 = "{sha256}"' in refresh.stdout
    assert path.read_text() == MANIFEST.read_text()  # exactly the released pins again, comments and all
    assert cairn("pins", "check", str(path), cwd=ROOT, timeout=600).returncode == 0


@pytest.mark.network
def test_plan_names_a_pin_the_archive_dropped(tmp_path: Path) -> None:
    path, current, _ = _stale_copy(tmp_path)
    manifest = load_manifest(path, load_registry())
    host = Host(tools=frozenset({"mmdebstrap"}),
                suite_versions={"experimental": {"librocm-core1": (current, "7.1.0-1~exp1")}})
    plan = plan_release(manifest, load_registry(), host, ("gfx1151",), stages=()).by_id()
    assert plan["fetch:deb:librocm-core1"].blocked == (
        "rocm-core: pinned librocm-core1=7.2.3-1~exp1 is no longer served by experimental and no mirror holds it; "
        f"experimental now offers {current} — run: cairn pins refresh MANIFEST")
    # the same pin held by the source mirror plans (and fetches) without the archive
    mirrored = Host(tools=frozenset({"mmdebstrap"}), mirrored=frozenset({"0" * 64}))
    assert not plan_release(manifest, load_registry(), mirrored, ("gfx1151",), stages=()).by_id()["fetch:deb:librocm-core1"].blocked


@pytest.mark.network
def test_pins_survive_losing_the_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetch once (the store keeps it by sha256), lose the archive: a second machine still builds from the mirror."""
    source = dict(load_manifest(MANIFEST, load_registry()).components[[
        c.name for c in load_manifest(MANIFEST, load_registry()).components].index("rocm-core")].source.fields)
    first, second, third = (tmp_path / n for n in ("first", "second", "third"))
    for folder in (first, second, third):
        (folder / "out").mkdir(parents=True)
    log = io.StringIO()
    fetch_deb_from_suite(source, first / "out", log, store_mirror=first)
    assert (first / "sources" / "sha256" / source["sha256"]).is_file()

    monkeypatch.setenv("CAIRN_DEBIAN_MIRROR", GONE)
    monkeypatch.setenv("CAIRN_SOURCE_MIRROR", first.as_uri())
    fetch_deb_from_suite(source, second / "out", log, store_mirror=second)
    assert f"from mirror {first.as_uri()}/sources/sha256/{source['sha256']}" in log.getvalue()
    assert [p.read_bytes() for p in (second / "out").iterdir()] == [p.read_bytes() for p in (first / "out").iterdir()]

    monkeypatch.delenv("CAIRN_SOURCE_MIRROR")
    with pytest.raises(CairnError, match=rf"cannot read {GONE}/dists/experimental/InRelease"):
        fetch_deb_from_suite(source, third / "out", log, store_mirror=third)
    assert not list((third / "out").iterdir())  # nothing half-written


@pytest.mark.network
def test_a_mirror_copy_with_other_bytes_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = load_manifest(MANIFEST, load_registry())
    source = dict(next(c for c in manifest.components if c.name == "rocm-core").source.fields)
    bad = tmp_path / "bad" / "sources" / "sha256" / source["sha256"]
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not the pinned deb")
    (tmp_path / "out").mkdir()
    monkeypatch.setenv("CAIRN_SOURCE_MIRROR", (tmp_path / "bad").as_uri())
    log = io.StringIO()
    fetch_deb_from_suite(source, tmp_path / "out", log)  # falls through to the archive
    assert "unusable" in log.getvalue() and "+ download" in log.getvalue()


@pytest.mark.network
def test_the_published_release_is_the_source_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deb a release was built from is published with it, signed, at ``sources/sha256/<digest>``: with the
    archive gone and a fresh store, the published repository alone still serves the pin."""
    from tuf.api.serialization.json import JSONSerializer

    from cairn.matrix.bundle import write_bundle_json
    from cairn.publish.sample import write_sample_bundle
    from cairn.sign.keys import init_keys, make_root

    source = dict(next(c for c in load_manifest(MANIFEST, load_registry()).components if c.name == "rocm-core").source.fields)
    (tmp_path / "fetched").mkdir()
    fetch_deb_from_suite(source, tmp_path / "fetched", io.StringIO())
    (deb,) = (tmp_path / "fetched").iterdir()

    bundle = write_sample_bundle(tmp_path / "bundle", version="7.2.4", families=("gfx1151",))
    data = json.loads((bundle / "bundle.json").read_text())
    data.pop("schema")
    key = f"sources/sha256/{source['sha256']}"
    (bundle / "files" / key).parent.mkdir(parents=True)
    (bundle / "files" / key).write_bytes(deb.read_bytes())
    data["artifacts"].append({"path": key, "kind": "source", "sha256": source["sha256"], "recipe": "fetch:deb:librocm-core1",
                              "content_type": "application/vnd.debian.binary-package"})
    write_bundle_json(bundle, data)
    keys = init_keys(tmp_path / "keys")
    (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
    repo = tmp_path / "repo"
    env = {"CAIRN_TUF_CACHE": str(tmp_path / "tuf")}
    published = subprocess.run([sys.executable, "-m", "cairn.cli", "publish", str(bundle), "--to", repo.as_uri(),
                                "--keys", str(keys.directory), "--channel", "dev"], capture_output=True, text=True,
                               env={**os.environ, **env}, timeout=300)
    assert published.returncode == 0, published.stderr
    assert (repo / key).read_bytes() == deb.read_bytes()
    verified = subprocess.run([sys.executable, "-m", "cairn.cli", "verify", str(repo / key), "--repo", str(repo),
                               "--root", str(keys.directory / "root.json")], capture_output=True, text=True,
                              env={**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf2")}, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr  # signed like every other target

    monkeypatch.setenv("CAIRN_DEBIAN_MIRROR", GONE)
    monkeypatch.setenv("CAIRN_SOURCE_MIRROR", repo.as_uri())
    (tmp_path / "fresh" / "out").mkdir(parents=True)
    log = io.StringIO()
    fetch_deb_from_suite(source, tmp_path / "fresh" / "out", log, store_mirror=tmp_path / "fresh")
    assert f"from mirror {repo.as_uri()}/{key}" in log.getvalue()
    assert [p.read_bytes() for p in (tmp_path / "fresh" / "out").iterdir()] == [deb.read_bytes()]
