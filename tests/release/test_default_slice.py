"""The default release (ROCm 7.2.4) for one family, end to end as `nox -s build` does it for all of them:
pinned debs, the build image, the kernels compiled in it, wheels cut to the family, runtime and smoke images on
the sid base, their gates, a signed publish and the matrix — for Strix Halo (gfx1151), whose libraries are
partial (RCCL and hipSPARSELt carry no gfx1151 code), so the partial path is exercised for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cairn.audit import audit_file, audit_paths
from support import ROOT, SLICE_RECORD, cairn

FAMILY = TARGET = "gfx1151"
# a host with glibc 2.43 (Debian sid), what the slice's wheels need: pip takes a platform literally, so every
# manylinux tag such a host accepts is named
HOST_PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(43, 16, -1)]
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.registry, pytest.mark.network]


@pytest.fixture(scope="module")
def store(default_slice: Path) -> Path:
    return default_slice


def actions(store: Path) -> dict:
    return json.loads((store / SLICE_RECORD).read_text())["actions"]


def tree(store: Path, action: str) -> Path:
    return store / "trees" / actions(store)[action]["output"]


def test_the_libraries_wheel_carries_gfx1151_code_and_names_what_it_lacks(store: Path, tmp_path: Path) -> None:
    report = json.loads((tree(store, f"package:rocm-sdk-libraries@{FAMILY}") / "report.json").read_text())
    # hipSPARSELt is built for gfx942/gfx950 only and RCCL without gfx1151: named, the family still ships
    assert report["audit"]["partial"] == {TARGET: ["lib/libhipsparselt.so.0", "lib/librccl.so.1", "lib/hipsparselt/library/"]}
    (wheel,) = (tree(store, f"package:rocm-sdk-libraries@{FAMILY}") / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (tmp_path / "librocblas.so.5").write_bytes(zf.read("_rocm_sdk_libraries/lib/librocblas.so.5"))
        names = zf.namelist()
    audit = audit_file(tmp_path / "librocblas.so.5")
    assert audit.complete_targets == (TARGET,)  # only Strix Halo's code objects are left in rocBLAS
    kernels = [n for n in names if "/rocblas/" in n and n.endswith((".co", ".hsaco", ".dat"))]
    assert any("gfx1151" in n for n in kernels)
    assert not [n for n in kernels if "gfx942" in n or "gfx1100" in n or "gfx90a" in n]  # other targets' kernels left out
    assert not [n for n in names if n.endswith(".a")]


def test_images_pass_their_gates_and_the_partial_libraries_are_named(store: Path) -> None:
    done = actions(store)
    for gate in ("static-coverage", "in-container"):
        for image in ("runtime", "smoke"):
            assert done[f"gate:{gate}:{image}@{TARGET}"]["status"] == "ran"
    static = json.loads((tree(store, f"gate:static-coverage:runtime@{TARGET}") / "gate.json").read_text())
    assert static["status"] == "passed"
    assert "partial — the release's libhipsparselt.so.0, librccl.so.1 were built without gfx1151 code" in static["reason"]
    assert static["evidence"]["coverage"]["device_binaries"] > 5  # real device code: the family's math libraries
    gpu = json.loads((tree(store, f"gate:gpu:runtime@{TARGET}") / "gate.json").read_text())
    if not os.path.exists("/dev/kfd"):
        assert (gpu["status"], gpu["reason"]) == ("not-run", "not run: no AMD GPU on this host")
    smoke = json.loads((tree(store, f"gate:in-container:smoke@{TARGET}") / "gate.json").read_text())["evidence"]
    assert smoke["cairn-smoke --cpu"]["report"]["cpu"] == {"gemm": True, "reduce_sum": True, "saxpy": True}


def test_publish_verify_and_the_matrix_name_the_product_and_the_partial_cell(store: Path) -> None:
    repo = store / "publish"
    published = cairn("publish", "--dev-keys", "--store", str(store), "--to", repo.as_uri(), "--json", cwd=ROOT, timeout=3600)
    assert published.returncode == 0, published.stderr[-3000:]
    root = store / "keys" / "dev" / "root.json"
    verified = cairn("verify", str(repo), "--root", str(root), env={**os.environ, "CAIRN_TUF_CACHE": str(store / "tuf")}, cwd=ROOT, timeout=3600)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    matrix = json.loads((repo / "channels" / "dev" / "matrix.json").read_text())
    cells = [c for c in matrix["cells"] if c["gfx_target"] == TARGET]
    assert cells and all("Strix Halo (Ryzen AI Max+ 395)" in c["products"] for c in cells)
    family = ["hipsparselt kernel files", "libhipsparselt.so.0", "librccl.so.1"]
    assert all(c["partial"] == family for c in cells if c["framework"]["name"] != "llama-cpp-python")
    # llama.cpp's own ELFs load neither hipSPARSELt nor RCCL (their DT_NEEDED): its cell is not partial for them
    assert all(c["partial"] == [] for c in cells if c["framework"]["name"] == "llama-cpp-python")
    assert matrix["release"]["version"] == "7.2.4"
    sources = list((repo / "sources" / "sha256").iterdir())
    assert len(sources) >= 30  # every pinned .deb of the release, published as its source mirror


def test_pip_resolves_the_device_extra_to_the_one_target_wheel(store: Path, tmp_path: Path) -> None:
    """``rocm-sdk[device-gfx1151]`` from the family index: pip picks the core wheel and gfx1151's device wheel,
    exactly pinned, and nothing of the family wheel; that wheel's rocBLAS holds Strix Halo's code alone."""
    (wheel,) = (tree(store, f"package:rocm-sdk-device@{TARGET}") / "wheels").glob(f"rocm_sdk_device_{TARGET}-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (tmp_path / "librocblas.so.5").write_bytes(zf.read("_rocm_sdk_libraries/lib/librocblas.so.5"))
    assert audit_file(tmp_path / "librocblas.so.5").complete_targets == (TARGET,)
    simple = tree(store, f"index:{FAMILY}") / FAMILY / "simple"
    report = tmp_path / "report.json"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    # for a host whose glibc the wheels' tags admit (RCCL keeps the device wheel at manylinux_2_42; this one is 2.36)
    resolved = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                               "--disable-pip-version-check", "--report", str(report), "--index-url", simple.as_uri(),
                               *(a for p in HOST_PLATFORMS for a in ("--platform", p)), "--only-binary=:all:",
                               "--target", str(tmp_path / "for-sid"), f"rocm-sdk[device-{TARGET}]"],
                              capture_output=True, text=True, env=env)
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    picked = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    version = picked["rocm-sdk"]
    assert picked == {"rocm-sdk": version, "rocm-sdk-core": version, f"rocm-sdk-device-{TARGET}": version}


@pytest.mark.s3
def test_from_s3_pip_and_uv_install_the_extension_with_gfx1151_code_alone(store: Path, tmp_path: Path) -> None:
    """The slice published to moto and read over HTTP with no credentials, as a Strix Halo user would: pip and
    uv install ``cairn-smoke`` (built for the family, requiring ``rocm-sdk[gfx1151]``) from ``simple/gfx1151/``
    and get the SDK with gfx1151's code alone. gfx1151 is a family of one target, so its index is already that
    target's (a family of several also has an index per target: tests/wheels/test_target_index.py). AMD's variant
    provider picks gfx1151's device wheel from the same index; a project the index lacks is a 404."""
    import urllib.error
    import urllib.request

    from support.s3 import env, install_anonymously
    from support.servers import moto_s3
    from support.wheels import select

    assert not any(a.startswith("package:rocm-sdk@") for a in actions(store))  # no target index for one target
    with moto_s3("cairn-slice") as s3:
        environ = env(s3, tmp_path)
        published = cairn("publish", "--dev-keys", "--store", str(store), "--to", "s3://cairn-slice/rel", env=environ, cwd=ROOT, timeout=3600)
        assert published.returncode == 0, published.stderr[-3000:]
        index = f"{s3['endpoint']}/cairn-slice/rel/channels/dev/simple/{FAMILY}/"
        # uv, on this host (Debian 12, glibc 2.36), refuses: the libraries wheel's tag asks for glibc 2.42 (RCCL)
        refused = install_anonymously("uv", index, "cairn-smoke", tmp_path / "uv", environ, tmp_path / "uv-cache")
        assert refused.returncode != 0 and "platform" in refused.stderr, refused.stderr[-2000:]
        assert not list((tmp_path / "uv").glob("*.dist-info")) if (tmp_path / "uv").exists() else True
        for tool in ("pip",):  # pip, for a host whose glibc the tags admit (uv here knows no tag past 2_40)
            target = tmp_path / tool
            done = install_anonymously(tool, index, "cairn-smoke", target, environ, tmp_path / "uv-cache",
                                       platforms=HOST_PLATFORMS)
            assert done.returncode == 0, f"{tool}: {done.stderr[-2000:]}"
            installed = sorted(p.name.split("-")[0] for p in target.glob("*.dist-info"))
            assert installed == ["cairn_smoke", "rocm_sdk", "rocm_sdk_core", f"rocm_sdk_libraries_{FAMILY}"], tool
            devices = {b.path: b.complete_targets for b in audit_paths([target / "_rocm_sdk_libraries"]).binaries if b.bundles}
            assert devices and all(t in ((TARGET,), ()) for t in devices.values()), devices
            shutil.rmtree(target)  # a libraries wheel unpacked is hundreds of MB
        with urllib.request.urlopen(index + "rocm-sdk-device/", timeout=30) as page:
            linked = [a.split('href="', 1)[1].split("#", 1)[0] for a in page.read().decode().split("<a ")[1:]
                      if "variants.json" in a]
        assert len(linked) == 1, linked
        variants = tmp_path / "variants.json"
        with urllib.request.urlopen(index + "rocm-sdk-device/" + linked[0], timeout=30) as answer:
            variants.write_bytes(answer.read())
        assert select(variants, TARGET) == [TARGET]
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(index + "no-such-project/", timeout=30)
        assert missing.value.code == 404
