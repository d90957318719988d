"""Real artifacts nobody here wrote, fetched once into ``$CAIRN_TEST_CACHE`` (default ``~/.cache/cairn-test``).

Versions are pinned so the facts the tests check stay true. When a download fails the test is skipped on a
developer machine but FAILS under CI (``support.requirements.need``): CI must never pass by not running the real-artifact tests.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.requirements import need

CACHE = Path(os.environ.get("CAIRN_TEST_CACHE", "~/.cache/cairn-test")).expanduser()
DEBS = {  # package -> (version, library inside)
    "librocrand1": ("5.3.3-4", "usr/lib/x86_64-linux-gnu/librocrand.so.1.1"),
    "librocsparse0": ("5.3.0+dfsg-2", "usr/lib/x86_64-linux-gnu/librocsparse.so.0.1"),
    "libamdhip64-5": ("5.2.3-8", "usr/lib/x86_64-linux-gnu/libamdhip64.so.5.2.21153"),
}
PLUGIN = "jax-rocm7-plugin"
PLUGIN_VERSIONS = ("0.10.2", "0.9.1")  # 0.10.2: exact targets; 0.9.1: generic targets (gfx11-generic, …)


def unavailable(why: str) -> None:
    need(False, f"real artifact unavailable: {why}")


def _run(cmd: list[str], cwd: Path) -> None:
    try:
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        unavailable(f"{' '.join(cmd[:3])}: {detail.strip()[-300:]}")


def debian_package(package: str) -> Path:
    """The pinned ``.deb`` file, downloaded with apt-get on first use."""
    version, _ = DEBS[package]
    folder = CACHE / "debs"
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"{package}_{version.replace(':', '%3a')}_*.deb"
    found = sorted(folder.glob(pattern))
    if not found:
        _run(["apt-get", "download", f"{package}={version}"], folder)
        found = sorted(folder.glob(pattern))
    if not found:
        unavailable(f"apt-get download {package}={version} produced no file")
    return found[0]


def debian_library(package: str) -> Path:
    """The library of a pinned Debian package, unpacked with dpkg-deb."""
    version, member = DEBS[package]
    root = CACHE / "unpacked" / f"{package}_{version}"
    library = root / member
    if not library.is_file():
        root.mkdir(parents=True, exist_ok=True)
        _run(["dpkg-deb", "-x", str(debian_package(package)), str(root)], CACHE)
    return library


def plugin_wheel(version: str = PLUGIN_VERSIONS[0]) -> Path:
    """The JAX ROCm 7 plugin wheel for CPython 3.11 (CCOB v3 zstd bundles)."""
    name = PLUGIN
    folder = CACHE / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"{name.replace('-', '_')}-{version}-cp311-*.whl"
    found = sorted(folder.glob(pattern))
    if not found:
        _run(["python", "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
              "--platform", "manylinux_2_27_x86_64", f"{name}=={version}", "-d", str(folder)], folder)
        found = sorted(folder.glob(pattern))
    if not found:
        unavailable(f"pip download {name}=={version} produced no cp311 wheel")
    return found[0]


# Debian experimental's ROCm 7.2 packages: fetched straight from the archive pool (the host's apt knows only
# bookworm), each pinned by the sha256 the suite's signed Packages.xz lists for it.
POOL_DEBS = {  # package -> (version, pool path, sha256)
    "librocblas5": ("7.2.4-1~exp1", "pool/main/r/rocblas/librocblas5_7.2.4-1~exp1_amd64.deb",
                    "d7b0bdb3ca744edc42894c0774c0f4d2341acb42190808dc49251c0d1319b685"),
    "libroctx64-4": ("7.2.4-1~exp1", "pool/main/r/roctracer/libroctx64-4_7.2.4-1~exp1_amd64.deb",
                     "a5e7dc76192e02a02dd4592762e394acfc800e2c956fb79ef7b0d01569455399"),
}


def pool_package(package: str) -> Path:
    """The pinned ``.deb`` from the host's Debian archive pool, verified by sha256 (downloaded once)."""
    import hashlib

    from cairn.errors import CairnError
    from cairn.remote.url import download
    from cairn.sources.debian import resolve_mirror

    _, pool_path, sha256 = POOL_DEBS[package]
    folder = CACHE / "debs"
    folder.mkdir(parents=True, exist_ok=True)
    deb = folder / pool_path.rsplit("/", 1)[1]
    if not deb.is_file():
        try:
            download(f"{resolve_mirror('host')}/{pool_path}", deb, timeout=900)
        except CairnError as exc:
            unavailable(str(exc))
    digest = hashlib.sha256()
    with open(deb, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != sha256:
        deb.unlink()
        pytest.fail(f"{deb.name}: sha256 {digest.hexdigest()} is not the pinned {sha256}")
    return deb


def pool_tree(package: str) -> Path:
    """The pinned pool package unpacked with dpkg-deb (once)."""
    version, _, _ = POOL_DEBS[package]
    root = CACHE / "unpacked" / f"{package}_{version}"
    done = root / ".unpacked"
    if not done.is_file():
        root.mkdir(parents=True, exist_ok=True)
        _run(["dpkg-deb", "-x", str(pool_package(package)), str(root)], CACHE)
        done.touch()
    return root
