"""End to end: the default release's wheels in a per-family index, installed by real pip from HTTP.

The release is built once per session into the test cache (``$CAIRN_TEST_CACHE/wheels-store``) for one
family, with the framework the default release publishes (SGLang from its sdist; the mirrored JAX wheels
belong to the ROCm 7 release and are tested in test_jax_rocm7.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from cairn.execute.executor import execute
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.prepare import make_plan
from cairn.stages import RUNNERS, STAGES
from cairn.store.local import LocalStore
from support import ROOT, need_tool

FAMILY = "gfx90a"
FRAMEWORKS = '\n[frameworks.sglang]\nrecipe = "sglang"\nversion = "0.5.10.post1"\n'
SDK = "5.2.3.dev1700000000"
REPRO = ("package:rocm-sdk-core", "package:rocm-sdk", f"package:cairn-smoke@{FAMILY}", "package:sglang")

pytestmark = [pytest.mark.slow, pytest.mark.network]


def release_manifest(tmp: Path) -> Path:
    path = tmp / "default-with-frameworks.toml"
    text = (ROOT / "manifests" / "releases" / "rocm-5.2.3.toml").read_text()
    path.write_text(text if "[frameworks.sglang]" in text else text + FRAMEWORKS)
    return path


def build(manifest: Path, store: LocalStore):
    registry = load_registry()
    plan = make_plan(load_manifest(manifest, registry), registry, [FAMILY], stages=STAGES)
    store.lock()
    try:
        report = execute(plan, store, runners=RUNNERS, jobs=2, only={f"index:{FAMILY}"})
    finally:
        store.unlock()
    failed = {a: o.detail for a, o in report.outcomes.items() if o.status in ("failed", "blocked", "skipped")}
    assert not failed, failed
    return report


@pytest.fixture(scope="session")
def built(cache_dir, tmp_path_factory):
    for tool, package in (("hipcc", "hipcc"), ("patchelf", "patchelf"), ("dpkg-deb", "dpkg"), ("apt-get", "apt")):
        need_tool(tool, package)
    manifest = release_manifest(tmp_path_factory.mktemp("manifest"))
    store = LocalStore(cache_dir / "wheels-store")
    report = build(manifest, store)
    return manifest, store, report


@pytest.fixture(scope="session")
def index_root(built) -> Path:
    _manifest, store, report = built
    return store.tree(report.output(f"index:{FAMILY}"))


@pytest.fixture(scope="session")
def server(index_root):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", index_root],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(50):
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"{url}/{FAMILY}/simple/", timeout=1).read()
            break
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_index_has_every_wheel_of_the_family(index_root):
    files = sorted(p.name for p in (index_root / FAMILY / "files").glob("*.whl"))
    assert files == [
        # every tag auditwheel's policy gives the binaries, with bookworm's libLLVM-15, libnuma … grafted into core
        "cairn_smoke-0.1.0+rocm.5.2.3.dev.1700000000-py3-none-manylinux_2_17_x86_64.whl",
        f"rocm_sdk-{SDK}-py3-none-any.whl",
        f"rocm_sdk_core-{SDK}-py3-none-manylinux_2_36_x86_64.whl",
        f"rocm_sdk_devel-{SDK}-py3-none-any.whl",
        f"rocm_sdk_device-{SDK}-py3-none-manylinux_2_34_x86_64-{FAMILY}.whl",  # the PEP 825 variant of the one below
        f"rocm_sdk_device_{FAMILY}-{SDK}-py3-none-manylinux_2_34_x86_64.whl",
        f"rocm_sdk_libraries_{FAMILY}-{SDK}-py3-none-manylinux_2_34_x86_64.whl",
        "sglang-0.5.10.post1+rocm.5.2.3.dev.1700000000-py3-none-any.whl",
    ]


def test_pages_hash_every_link_and_metadata(index_root):
    simple = index_root / FAMILY / "simple"
    for page in simple.glob("*/index.v1.json"):
        data = json.loads(page.read_text())
        assert data["meta"]["api-version"] == "1.1" and data["versions"]
        html = (page.parent / "index.html").read_text()
        for entry in data["files"]:
            wheel = (page.parent / entry["url"]).resolve()
            assert entry["hashes"]["sha256"] == _sha(wheel) and entry["size"] == wheel.stat().st_size
            if entry["filename"].endswith("-variants.json"):  # PEP 825: linked like a file, no metadata of its own
                assert "core-metadata" not in entry and json.loads(wheel.read_text())["variants"] == {
                    FAMILY: {"amd": {"gfx_arch": [FAMILY]}}}
                assert f'href="../../files/{entry["filename"]}#sha256={entry["hashes"]["sha256"]}"' in html
                continue
            sidecar = Path(f"{wheel}.metadata")
            assert entry["core-metadata"]["sha256"] == _sha(sidecar)
            with zipfile.ZipFile(wheel) as archive:
                name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
                assert archive.read(name) == sidecar.read_bytes()
            assert f'href="../../files/{entry["filename"]}#sha256={entry["hashes"]["sha256"]}"' in html
            assert f'data-core-metadata="sha256={entry["core-metadata"]["sha256"]}"' in html


def test_publish_plan_records_content_types(index_root):
    objects = json.loads((index_root / FAMILY / "publish.json").read_text())["objects"]
    types = {o["key"]: o["content_type"] for o in objects}
    assert types["simple/"] == "text/html; charset=utf-8"
    assert types["simple/rocm-sdk/"] == "text/html; charset=utf-8"
    assert types["simple/rocm-sdk/index.v1.json"] == "application/vnd.pypi.simple.v1+json"
    assert [o["kind"] for o in objects][-1] == "page" and objects[-1]["key"] == "simple/"
    assert objects[0]["kind"] == "wheel"


def test_pip_installs_exact_pins_and_rocm_sdk_test_passes(server, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"} | {"PIP_CONFIG_FILE": os.devnull}
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--no-cache-dir", "--index-url", f"{server}/{FAMILY}/simple",
                    f"rocm-sdk[{FAMILY}]", "cairn-smoke"], check=True, env=env)
    listed = json.loads(subprocess.run([*pip, "list", "--format", "json"], capture_output=True, text=True, env=env).stdout)
    versions = {p["name"]: p["version"] for p in listed}
    assert versions["rocm-sdk"] == versions["rocm-sdk-core"] == versions[f"rocm-sdk-libraries-{FAMILY}"] == SDK
    assert versions["cairn-smoke"] == "0.1.0+rocm.5.2.3.dev.1700000000"
    test = subprocess.run([venv / "bin" / "python", "-m", "rocm_sdk", "test"], capture_output=True, text=True, env=env, cwd="/")
    assert test.returncode == 0, test.stdout + test.stderr
    assert f"family={FAMILY} targets={FAMILY}" in test.stdout
    # the SDK's 9 libraries and the ones grafted beside them (libLLVM-15, libnuma … under mangled names), all loaded
    loaded = re.search(r"libraries: (\d+) of (\d+) loaded from", test.stdout)
    assert loaded and loaded[1] == loaded[2] and int(loaded[1]) > 9, test.stdout
    assert re.search(r"ok +libnuma-[0-9a-f]{8}\.so\.1\n", test.stdout), test.stdout
    assert "device: none — no GPU visible to HIP" in test.stdout
    smoke = subprocess.run([venv / "bin" / "python", "-c", "import cairn_smoke; print(cairn_smoke.saxpy(2.0, [1, 2], [10, 20], cpu=True), cairn_smoke.targets(), cairn_smoke.device_count())"],
                           capture_output=True, text=True, env=env, cwd="/")
    assert smoke.stdout.split("\n")[0] == f"[12.0, 24.0] ('{FAMILY}',) 0", smoke.stderr


def test_rebuild_is_byte_identical_under_other_umask_and_cwd(built, tmp_path):
    manifest, store, first = built
    for action in REPRO:
        (store.root / "ac" / f"{first.outcomes[action].key}.json").unlink()
    old_umask, old_cwd = os.umask(0o077), os.getcwd()
    os.chdir(tmp_path)
    try:
        second = build(manifest, store)
    finally:
        os.umask(old_umask)
        os.chdir(old_cwd)
    for action in REPRO:
        assert second.outcomes[action].status == "ran"
        assert second.outcomes[action].output == first.outcomes[action].output, action
