"""`cairn services start|status|stop` runs a real private dockerd and registry in its own directory."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from cairn.cli import COMMANDS, main
from cairn.services.daemons import free_port, loopback_address, storage_driver
from support import need_tool

COMMANDS.setdefault("services", ("cairn.services.command", "private Docker Engine and registry"))


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.registry
def test_start_status_stop(capsys: pytest.CaptureFixture[str]) -> None:
    need_tool("dockerd", "docker.io")
    need_tool("docker-registry")
    with tempfile.TemporaryDirectory(prefix="cs-", dir="/tmp") as tmp:  # short: unix socket paths are limited
        directory = Path(tmp)
        fixed = f"127.0.0.1:{free_port()}"  # as a release engineer fixes it, so pushes' records match across starts
        assert main(["services", "start", "--dir", str(directory), "--registry", fixed, "--json"]) == 0
        state = json.loads(capsys.readouterr().out)
        assert state["started"] == ["dockerd", "registry"]
        assert state["docker_host"] == f"unix://{directory}/docker.sock"
        assert state["registry"] == fixed
        try:
            # layers stored once (overlay2) wherever overlayfs mounts, as on this host and CI; vfs only where not
            import docker

            driver = docker.DockerClient(base_url=state["docker_host"]).info()["Driver"]
            assert driver == storage_driver(directory) and driver in ("overlay2", "vfs")
            assert main(["services", "start", "--dir", str(directory)]) == 0
            assert "nothing (already running)" in capsys.readouterr().out
            # another address while the registry runs: one line, and nothing restarted
            other = f"127.0.0.1:{free_port()}"
            assert main(["services", "start", "--dir", str(directory), "--registry", other]) == 2
            err = capsys.readouterr().err
            assert f"already runs at {fixed}, not {other}" in err and "Traceback" not in err
            assert main(["services", "status", "--dir", str(directory)]) == 0
            out = capsys.readouterr().out
            assert "dockerd: running" in out and "registry: running" in out
            # a container on the host's network, as an image build runs: the engine binds a namespace for it
            client = docker.DockerClient(base_url=state["docker_host"])
            client.api.import_image_from_data(_true_rootfs(), repository="cairn-true", tag="1")
            client.containers.run("cairn-true:1", "/bin/true", network_mode="host", remove=True)
        finally:
            assert main(["services", "stop", "--dir", str(directory)]) == 0
        assert "stopped: registry, dockerd" in capsys.readouterr().out
        assert main(["services", "status", "--dir", str(directory)]) == 1
        assert "not started" in capsys.readouterr().out
        left = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                if line.split()[1].startswith(f"{directory}/")]
        assert left == []  # nothing the engine mounted outlives it, so its directory can be removed whole


def _true_rootfs() -> bytes:
    """A root filesystem holding /bin/true and the libraries it loads, as a tar: an image with no registry."""
    import io
    import tarfile

    files = {"bin/true": "/usr/bin/true", "lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
             "lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2"}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, source in files.items():
            tar.add(os.path.realpath(source), arcname=name)
    return out.getvalue()


def test_the_storage_driver_can_be_chosen(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAIRN_DOCKER_STORAGE_DRIVER", "vfs")
    assert storage_driver(tmp_path) == "vfs"
    monkeypatch.delenv("CAIRN_DOCKER_STORAGE_DRIVER")
    assert storage_driver(tmp_path) in ("overlay2", "vfs") and not (tmp_path / "overlay-probe").exists()


def test_a_registry_address_is_loopback_with_a_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert loopback_address("127.0.0.1:5000") == "127.0.0.1:5000"
    assert loopback_address("localhost:5000") == "localhost:5000"
    for bad in ("0.0.0.0:5000", "registry.example:5000", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000"):
        with pytest.raises(Exception, match="give a loopback address with a port"):
            loopback_address(bad)
    with tempfile.TemporaryDirectory(prefix="cs-", dir="/tmp") as tmp:  # refused before anything starts
        assert main(["services", "start", "--dir", tmp, "--registry", "0.0.0.0:5000"]) == 2
        assert "give a loopback address" in capsys.readouterr().err
        assert sorted(p.name for p in Path(tmp).iterdir()) == []
