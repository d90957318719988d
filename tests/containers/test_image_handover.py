"""Images handed from one CI job to the next through the shared action cache, not through a registry.

On hosted runners every job has its own Docker Engine and an empty registry at the same address
(``localhost:5000``), so a push cached by an earlier job — same key, since the registry's identity is its
address — names an image this job's registry has never seen. Each "runner" here is a separate process with
its own store and HOME, a registry with fresh storage at one fixed address, and the shared engine stripped of
every image from that address; the one thing they share is the moto S3 action cache. A job that builds on a
parent image, or gates an image, must find it pushed again from the store (same digest) — never a
"manifest unknown" from the registry.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import need_module
from support.servers import (
    archive_release,
    cache_writer_env,
    free_port,
    moto_s3,
    registry_at,
    serve_directory,
)

docker = need_module("docker")

BUCKET = "cairn-handover"
pytestmark = [pytest.mark.s3, pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


def _forget(client, address: str) -> None:  # type: ignore[no-untyped-def]
    """Untag every image the engine holds from ``address`` (a fresh runner's engine has none of them)."""
    for image in client.images.list():
        names = (image.attrs.get("RepoTags") or []) + (image.attrs.get("RepoDigests") or [])
        for name in names:
            if name.startswith(f"{address}/"):
                client.api.remove_image(name, force=True)


def _job(tmp_path: Path, name: str, *, manifest: Path, endpoint: str, docker_host: str, address: str,
         only: tuple[str, ...]) -> tuple[int, dict, Path]:
    """``cairn build --only …`` on a runner of its own; returns (exit code, the --json report, the store)."""
    cwd = tmp_path / "runners" / name
    (cwd / "home").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "CAIRN_REGISTRY", "CAIRN_CACHE")}
    env.update({"HOME": str(cwd / "home"), "CAIRN_SERVICES_DIR": str(tmp_path / "no-services"),
                "DOCKER_HOST": docker_host, "CAIRN_REGISTRY": address, "CAIRN_S3_ENDPOINT": endpoint,
                "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                "CAIRN_S3_RETRY_SECONDS": "5", **cache_writer_env(tmp_path / "cache-writer")})
    argv = [sys.executable, "-m", "cairn.cli", "build", str(manifest), "--store", "store", "--json",
            "--cache", f"s3://{BUCKET}/handover"]
    for action in only:
        argv += ["--only", action]
    with registry_at(address, tmp_path / "registries" / name):
        _forget(docker.DockerClient(base_url=docker_host), address)
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["actions"], cwd / "store"


def _log(outcome: dict) -> str:
    return Path(outcome["log"]).read_text() if outcome.get("log") else ""


def test_a_job_builds_on_and_gates_images_another_job_pushed_to_its_own_registry(tmp_path, services) -> None:
    www = tmp_path / "www"
    www.mkdir()
    with serve_directory(www) as base, moto_s3(BUCKET) as s3:
        manifest = archive_release(tmp_path, www, base, name="handover", families=("gfx1151",))
        address = f"127.0.0.1:{free_port()}"
        run = functools.partial(_job, tmp_path, manifest=manifest, endpoint=s3["endpoint"],
                                docker_host=services.docker_host, address=address)

        code, first, _ = run("base", only=("push:base",))
        assert code == 0 and first["image:base"]["status"] == "ran" and first["push:base"]["status"] == "ran", first

        # the runtime image is built FROM the base image, which this runner's registry does not hold
        code, second, store = run("runtime", only=("push:runtime@gfx1151",))
        assert code == 0, second
        assert second["image:base"]["status"] == "cached" and second["push:base"]["status"] == "cached"
        assert second["image:runtime@gfx1151"]["status"] == "ran"
        assert "pushing it again from the store" in _log(second["image:runtime@gfx1151"])
        image = json.loads((store / "trees" / second["image:runtime@gfx1151"]["output"] / "image.json").read_text())

        # the gates run the image in a container pulled from a third runner's (empty) registry
        code, third, store = run("gates", only=("gate:static-coverage:runtime@gfx1151",
                                                       "gate:in-container:runtime@gfx1151"))
        assert third["image:runtime@gfx1151"]["status"] == "cached" and third["push:runtime@gfx1151"]["status"] == "cached"
        assert not [a for a, o in third.items() if a.startswith(("image:", "push:")) and o["status"] == "ran"]
        assert third["gate:static-coverage:runtime@gfx1151"]["status"] == "ran"
        # this release's SDK is three text files: the in-container check fails, and says so from inside the
        # container — the image was pulled and ran, by the digest the second runner built
        gate = third["gate:in-container:runtime@gfx1151"]
        assert code == 1 and gate["status"] == "failed", third
        assert "no shared libraries found under the SDK wheels" in gate["detail"], gate["detail"]
        assert image["digest"][:19] in gate["detail"] and "manifest unknown" not in gate["detail"]
        assert "pushing it again from the store" in _log(gate)
