"""Run a build script in the release's build image: no network, fixed mounts, and optionally the compiler cache.

The one place both compile kinds (``cmake`` and ``hip``) start their container, so the rules are the same for
both: ``--network none``, the script as the only command, and with a compiler cache the egress proxy's socket
mounted and sccache's settings in the environment — its credentials named on the command line without their
values, so neither the log nor the process list shows them (the Docker client passes them from its own
environment).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import IO

from cairn.execute.compiler_cache import EGRESS_IN_IMAGE, CompilerCache
from cairn.execute.egress import egress_proxy
from cairn.proc import require_tool, run


def run_in_build_image(image: str, script: str, *, env: Mapping[str, str], mounts: Sequence[str],
                       targets: Sequence[str], log: IO[str], timeout: float, workdir: str = "",
                       compiler_cache: CompilerCache | None = None) -> None:
    # lazy: cairn.remote, cairn.services, email, 46 ms at start-up (python -X importtime)
    from cairn.services import engine_host

    docker = require_tool("docker", "docker.io")
    client_env = {"DOCKER_HOST": engine_host()}
    plain = dict(env)
    named: list[str] = []
    if compiler_cache is None:
        _docker_run(docker, image, script, plain, named, mounts, workdir, client_env, log, timeout)
        return
    cache_plain, secret = compiler_cache.container_env(image, targets)
    plain.update(cache_plain)
    named = sorted(secret)
    with egress_proxy(compiler_cache.allows) as proxy:
        _docker_run(docker, image, script, plain, named, [*mounts, "-v", f"{proxy.directory}:{EGRESS_IN_IMAGE}"],
                    workdir, {**client_env, **secret}, log, timeout)
        log.write(f"# compiler cache: {proxy.forwarded} connection(s) to {compiler_cache.endpoint or 'AWS S3'}"
                  + (f"; refused: {', '.join(sorted(set(proxy.refused)))}" if proxy.refused else "") + "\n")


def _docker_run(docker: str, image: str, script: str, plain: Mapping[str, str], named: Sequence[str],
                mounts: Sequence[str], workdir: str, client_env: Mapping[str, str], log: IO[str], timeout: float) -> None:
    env_args = [arg for key in sorted(plain) for arg in ("-e", f"{key}={plain[key]}")]
    env_args += [arg for key in named for arg in ("-e", key)]
    where = ["-w", workdir] if workdir else []
    # --init and die_with_parent: when cairn dies (Ctrl-C, SIGTERM, a killed CI job), the docker client gets
    # SIGTERM and forwards it to the container's init, which ends the script, and the container goes with it —
    # a compile must not keep two cores busy for an hour after the build that started it is gone
    run([docker, "run", "--rm", "--init", "--network", "none", *env_args, *mounts, *where, image, "sh", "-c", script],
        env=client_env, log=log, timeout=timeout, die_with_parent=True)
