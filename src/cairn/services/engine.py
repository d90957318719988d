"""Which Docker Engine and registry a build talks to.

Order: the services started by ``cairn services start`` (their state file), then ``$DOCKER_HOST`` and
``$CAIRN_REGISTRY`` from the environment. Nothing else guesses: a build without either is blocked with
the command that fixes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cairn.errors import CairnError
from cairn.services.state import current, engine_ready

START_HINT = "run `cairn services start` (or export DOCKER_HOST and CAIRN_REGISTRY)"


def engine_host() -> str:
    """The ``DOCKER_HOST`` URL of a reachable engine, or "" when there is none."""
    state = current()
    if state:
        return state.docker_host
    env = os.environ.get("DOCKER_HOST", "")
    if env.startswith("unix://") and engine_ready(Path(env.removeprefix("unix://"))):
        return env
    return ""


def registry_address() -> tuple[str, str]:
    """(address, identity) of the registry images are pushed to, or ("", "") when there is none."""
    state = current()
    if state:
        return state.registry, state.registry_id
    env = os.environ.get("CAIRN_REGISTRY", "")
    return (env, f"env:{env}") if env else ("", "")


def docker_client(timeout: int = 1800) -> Any:
    """A ``docker.DockerClient`` for the engine; raises with the fix when none is reachable."""
    # lazy: docker, charset_normalizer, urllib3, 100 ms at start-up (python -X importtime)
    import docker

    host = engine_host()
    if not host:
        raise CairnError(f"no Docker Engine is running — {START_HINT}")
    return docker.DockerClient(base_url=host, timeout=timeout, version="auto")
