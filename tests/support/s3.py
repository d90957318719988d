"""What the S3 tests share: the environment a ``cairn`` run gets to reach moto, and the ``s3`` and ``keys``
fixtures (registered by the root conftest; a module that needs another bucket or scope defines its own).

The ``s3`` fixture serves the bucket named by the requesting module's ``BUCKET``, one server per module: each
module gets its own server and keys, as when every module defined the two fixtures itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.sign.keys import init_keys, make_root
from support.paths import ROOT
from support.requirements import need_module
from support.servers import moto_s3


def aws_env(endpoint: str, environ: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``environ`` (default: this process's) pointed at the moto server at ``endpoint`` with its test credentials."""
    return {**(os.environ if environ is None else environ), "CAIRN_S3_ENDPOINT": endpoint,
            "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1", **extra}


def env(s3: Mapping[str, Any], tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``cairn publish``/``verify`` run against ``s3``: its own TUF cache under ``tmp_path``,
    this checkout as its root."""
    return aws_env(s3["endpoint"], CAIRN_TUF_CACHE=str(tmp_path / "tuf-cache"), CAIRN_ROOT=str(ROOT), **extra)


@pytest.fixture(scope="module")
def s3(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A moto S3 server for the module, holding its (private) bucket ``BUCKET``."""
    with moto_s3(request.module.BUCKET) as server:
        yield server


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh key set for the module, its root metadata written as ``root.json`` beside the keys."""
    keyset = init_keys(tmp_path_factory.mktemp("keys") / "k")
    (keyset.directory / "root.json").write_bytes(make_root(keyset).to_bytes(JSONSerializer(compact=False)))
    return keyset.directory


def no_credentials(environ: dict[str, str]) -> dict[str, str]:
    """The environment of a user who has no AWS account: nothing could sign a request."""
    return {k: v for k, v in environ.items() if not k.startswith("AWS_")}


def install_anonymously(tool: str, index: str, requirement: str, target: Path, environ: dict[str, str],
                        cache: Path, platforms: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``pip install`` or ``uv pip install`` of ``requirement`` from ``index`` into ``target``, as a user with no
    credentials and no configured index would run it. ``platforms`` (pip only): install for those platform tags
    (``manylinux_2_43_x86_64`` …) instead of this host's, as on a host with that glibc."""
    anonymous = {k: v for k, v in no_credentials(environ).items() if not k.startswith(("PIP_", "UV_"))}
    for_platform = [*(a for p in platforms for a in ("--platform", p)), "--only-binary=:all:"] if platforms else []
    command = ([sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--target", str(target), *for_platform]
               if tool == "pip" else
               [need_module("uv").find_uv_bin(), "pip", "install", "--no-config", "--python", sys.executable,
                "--target", str(target), "--cache-dir", str(cache)])
    return subprocess.run([*command, "--index-url", index, requirement], env=anonymous, capture_output=True,
                          text=True, timeout=900)



def point_at(monkeypatch: pytest.MonkeyPatch, endpoint: str, **extra: str) -> None:
    """This process's environment (``aws_env``) pointed at the moto server at ``endpoint``, for a test that calls
    the S3 code in-process; ``monkeypatch`` restores it."""
    for name, value in aws_env(endpoint, {}, **extra).items():
        monkeypatch.setenv(name, value)
