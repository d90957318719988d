"""llama.cpp on the matrix as a cell of its own per gfx target (issue 37 §2).

The planner gives an engine packaged for a family cells of their own (its wheel and its requirements go to them,
not to every cell of the family); the bundle keeps, of the family's partial libraries, only those the engine's own
ELFs load (DT_NEEDED recorded by the engine's package); a publish stages the engine's cell, signs its image record
and names, in every matrix, the public repository URL and registry — never the build host's ``file://`` or its
loopback registry.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CairnError
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.prepare import make_plan
from cairn.plan.probe import Host
from cairn.publish import plan as bundle_plan
from cairn.publish.command import public_url
from cairn.publish.run import _engine_needs, _needed
from cairn.publish.sample import write_sample_bundle
from cairn.sign.keys import init_keys, make_root
from cairn.stages import STAGES
from support import ROOT, cairn

PUBLIC_URL = "https://cairn.invalid/repo/"
REGISTRY = "registry.cairn.invalid/team"


def test_an_engine_packaged_for_a_family_has_cells_of_its_own() -> None:
    """With every action runnable, each family ships llama-cpp-python beside the smoke kernels; its wheel and its
    run-time requirements belong to its cells (numpy cp314 stays everyone's: JAX mirrors it too); its image
    is matched to them by the image's framework."""
    registry = load_registry()
    manifest = load_manifest(ROOT / "manifests" / "releases" / "default.toml", registry)
    host = Host(tools=frozenset({"git", "pip", "patchelf", "apt-get", "dpkg-deb"}))
    actions = make_plan(manifest, registry, ["gfx110X-dgpu", "gfx1151"], host=host, stages=STAGES).by_id()
    context = SimpleNamespace(actions=actions, manifest=manifest, families=("gfx110X-dgpu", "gfx1151"), registry=registry)
    everything = list(actions)  # as a host that can run them all would have it (this one reads no Debian archive)
    frameworks = bundle_plan._frameworks(context, everything)  # type: ignore[arg-type]
    names = {name: version for name, version in frameworks["gfx110X-dgpu"]}
    assert names["llama-cpp-python"].startswith("0.3.36+rocm.7.2.4") and names["cairn-smoke"].startswith("0.1.0+rocm.7.2.4")
    assert dict(frameworks["gfx1151"])["llama-cpp-python"] == names["llama-cpp-python"]  # every family builds it
    wheels = bundle_plan._wheel_frameworks(context, everything)  # type: ignore[arg-type]
    assert wheels["package:llama-cpp-python@gfx110X-dgpu"] == "llama-cpp-python"
    assert wheels["mirror:jinja2-3.1.6-py3-none-any.whl"] == "llama-cpp-python"
    assert "mirror:numpy-2.4.6-cp314-cp314-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl" not in wheels
    assert bundle_plan._image_frameworks(context)["llama-cpp"] == "llama-cpp-python"  # type: ignore[arg-type]


def test_an_engine_cell_is_partial_only_for_libraries_its_binaries_load(tmp_path: Path) -> None:
    report = tmp_path / "engine" / "report.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"part": "engine", "needed": ["libamdhip64.so.7", "libc.so.6", "libhipblas.so.3", "librocblas.so.5"]}))
    ctx = SimpleNamespace(deps={"package:llama-cpp-python@gfx1151": report.parent})
    needs = _engine_needs(ctx, "llama-cpp-python", "gfx1151")  # type: ignore[arg-type]
    assert needs is not None
    family = ["hipsparselt kernel files", "libhipsparselt.so.0", "librccl.so.1", "rocblas kernel files"]
    assert [p for p in family if _needed(p, needs)] == ["rocblas kernel files"]
    assert not [p for p in family[:3] if _needed(p, needs)]  # llama.cpp never loads hipSPARSELt or RCCL: passed, not partial
    # anything else (a framework, an engine packaged before needs were recorded) keeps the family's partial list
    assert _engine_needs(ctx, "cairn-smoke", "gfx1151") is None  # type: ignore[arg-type]
    report.write_text(json.dumps({"part": "engine"}))
    assert _engine_needs(ctx, "llama-cpp-python", "gfx1151") is None  # type: ignore[arg-type]


def test_the_public_url_of_a_destination() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CAIRN_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")}
    code = ("from cairn.publish.command import public_url as u;"
            "print(u(None, 's3://cairn-bucket/releases'), u(None, 's3://cairn-bucket'), repr(u(None, 'file:///srv/repo')))")
    run = lambda extra: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **extra}, check=True)  # noqa: E731
    aws = run({"AWS_REGION": "eu-west-1"}).stdout.split()
    assert aws == ["https://cairn-bucket.s3.eu-west-1.amazonaws.com/releases/", "https://cairn-bucket.s3.eu-west-1.amazonaws.com/", "''"]
    own = run({"CAIRN_S3_ENDPOINT": "http://127.0.0.1:9000"}).stdout.split()
    assert own[:2] == ["http://127.0.0.1:9000/cairn-bucket/releases/", "http://127.0.0.1:9000/cairn-bucket/"]
    assert public_url("https://cdn.cairn.invalid/r", "file:///x") == "https://cdn.cairn.invalid/r/"
    with pytest.raises(CairnError, match="--public-url 'file:///srv/repo' is not an http"):
        public_url("file:///srv/repo", "file:///srv/repo")


def _cairn(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``cairn`` with this test's TUF cache and no public registry from the caller's environment."""
    env = {**os.environ, "CAIRN_ROOT": str(ROOT), "CAIRN_TUF_CACHE": str(tmp / "tuf")}
    env.pop("CAIRN_PUBLIC_REGISTRY", None)
    return cairn(*args, env=env)


def test_publish_stages_and_signs_the_engine_cell_and_names_the_public_url_and_registry(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "keys")
    (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.6.0", families=("gfx1100", "gfx90a"), engine=("gfx1100",))
    repo = tmp_path / "repo"
    done = _cairn("publish", str(bundle), "--to", repo.as_uri(), "--keys", str(keys.directory), "--channel", "dev", "--json",
                  "--public-url", PUBLIC_URL, "--registry", REGISTRY, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "5.6.0/gfx1100/debian-12/py3.11/llama-cpp-python-0.3.36+rocm.5.6.0" in report["promoted"]
    assert any("/cairn/llama-cpp@sha256:" in ref for ref in report["images"])  # handed to cosign with the release's images

    staged = json.loads((repo / "staging" / "5.6.0" / "release.json").read_text())
    (engine,) = [c for c in staged["cells"] if c["framework"]["name"] == "llama-cpp-python"]
    (image,) = engine["images"]
    assert image["reference"].startswith("127.0.0.1:5000/cairn/llama-cpp:") and image["key"] == "images/5.6.0/gfx1100-1.json"
    assert (repo / f"{image['key']}.intoto.jsonl").is_file()  # the image record's provenance, a signed target
    assert [Path(w).name for w in engine["wheels"]] == ["llama_cpp_python-0.3.36+rocm.5.6.0-py3-none-linux_x86_64.whl"]
    (smoke,) = [c for c in staged["cells"] if c["gfx_target"] == "gfx1100" and c["framework"]["name"] == "cairn-smoke"]
    assert not any("llama" in w for w in smoke["wheels"])  # the engine's wheel rides in no other cell

    for where in ("staging/5.6.0/matrix.json", "channels/dev/matrix.json"):
        text = (repo / where).read_text()
        assert "file://" not in text and "127.0.0.1" not in text, where
        matrix = json.loads(text)
        assert (matrix["release"]["base_url"], matrix["release"]["registry"]) == (PUBLIC_URL, REGISTRY)
        assert all(c["index_url"].startswith(PUBLIC_URL) for c in matrix["cells"])
        (cell,) = [c for c in matrix["cells"] if c["framework"]["name"] == "llama-cpp-python"]
        assert cell["images"][0]["reference"] == f"{REGISTRY}/cairn/llama-cpp:5.6.0-gfx1100"
        assert cell["images"][0]["digest"] == image["digest"]  # the same bytes: its signature and gates still name them
        assert cell["wheels"][0]["requires_python"] == ">=3.11"

    page = _cairn("matrix", "--from", str(repo), "--format", "html", tmp=tmp_path)  # no --base-url: the published one
    assert page.returncode == 0, page.stderr
    assert "file://" not in page.stdout and "127.0.0.1" not in page.stdout
    assert re.search(rf'pip install --index-url {re.escape(PUBLIC_URL)}channels/dev/simple/gfx1100/ &quot;llama-cpp-python==', page.stdout)
    assert f"docker pull {REGISTRY}/cairn/llama-cpp@{image['digest']}" in page.stdout

    # a file:// destination names no public URL by default: the matrix says nothing rather than the build host's disk
    plain = _cairn("publish", str(write_sample_bundle(tmp_path / "b2", version="5.6.1", families=("gfx90a",))), "--to",
                   (tmp_path / "repo2").as_uri(), "--keys", str(keys.directory), "--json", tmp=tmp_path)
    assert plain.returncode == 0, plain.stderr
    text = (tmp_path / "repo2" / "channels" / "dev" / "matrix.json").read_text()
    assert "file://" not in text and "base_url" not in json.loads(text)["release"]
    bad = _cairn("publish", str(bundle), "--to", (tmp_path / "repo3").as_uri(), "--keys", str(keys.directory),
                 "--public-url", "ftp://x", tmp=tmp_path)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "--public-url 'ftp://x' is not an http(s):// URL" in bad.stderr
    assert not (tmp_path / "repo3" / "channels").exists()


def test_promote_names_the_public_url_and_registry_too(tmp_path: Path) -> None:
    keys = init_keys(tmp_path / "keys")
    (keys.directory / "root.json").write_bytes(make_root(keys).to_bytes(JSONSerializer(compact=False)))
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.6.2", families=("gfx1100",), engine=("gfx1100",))
    repo = tmp_path / "repo"
    staged = _cairn("publish", str(bundle), "--to", repo.as_uri(), "--keys", str(keys.directory), "--stage-only", tmp=tmp_path)
    assert staged.returncode == 0, staged.stderr
    promoted = _cairn("promote", "--version", "5.6.2", "--channel", "dev", "--to", repo.as_uri(), "--keys", str(keys.directory),
                      "--public-url", PUBLIC_URL, "--registry", REGISTRY, tmp=tmp_path)
    assert promoted.returncode == 0, promoted.stderr
    text = (repo / "channels" / "dev" / "matrix.json").read_text()
    matrix = json.loads(text)
    assert (matrix["release"]["base_url"], matrix["release"]["registry"]) == (PUBLIC_URL, REGISTRY)
    assert "file://" not in text and "127.0.0.1" not in text
    assert {c["framework"]["name"] for c in matrix["cells"]} == {"cairn-smoke", "llama-cpp-python"}
