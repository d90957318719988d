"""A compile's container ends with the ``cairn build`` that started it.

``cairn build`` compiles in the release's build image with ``docker run``; the docker client is a child of
Cairn, but the container is the engine's. Killed by Ctrl-C, SIGTERM or a CI job's timeout, a build that left
its container running would keep the machine's cores busy for as long as the compile takes (it did, here: two
llama.cpp compiles outlived their builds by 40 minutes). So the client dies with Cairn and the container's init
ends the script when the client does. Checked for real: a process starts a long script in the build image the
way a compile does, is sent SIGTERM, and the container must be gone shortly after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.registry]


def _running(image: str, env: dict[str, str]) -> list[str]:
    out = subprocess.run(["docker", "ps", "-q", "--filter", f"ancestor={image}"], capture_output=True, text=True,
                         env=env, check=True).stdout
    return out.split()


def test_a_compile_container_is_gone_soon_after_its_build_is_terminated(toolchain_image: str, tmp_path) -> None:
    from cairn.services import engine_host

    env = {**os.environ, "DOCKER_HOST": engine_host()}
    before = set(_running(toolchain_image, env))  # containers of other builds on this engine are not this test's
    script = textwrap.dedent(f"""
        import sys
        from cairn.execute.in_image import run_in_build_image
        with open({str(tmp_path / "log")!r}, "w") as log:
            run_in_build_image({toolchain_image!r}, "sleep 600", env={{}}, mounts=[], targets=[], log=log, timeout=900)
    """)
    build = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 120
        while not (started := set(_running(toolchain_image, env)) - before):
            assert build.poll() is None, (tmp_path / "log").read_text()
            assert time.monotonic() < deadline, "the container never started"
            time.sleep(0.5)
        build.send_signal(signal.SIGTERM)
        build.wait(timeout=30)
        deadline = time.monotonic() + 30
        while set(_running(toolchain_image, env)) & started and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not set(_running(toolchain_image, env)) & started, "the compile's container outlived the build that started it"
    finally:
        build.kill()
        for container in set(_running(toolchain_image, env)) - before:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, env=env)
