"""Local services a build needs when the host lacks them: a private Docker Engine and an OCI registry.

API for other stages and tests::

    state = current()            # ServicesState | None (None when not started or down)
    state, started = start()     # idempotent: starts only what is not running
    client = docker_client()     # docker.DockerClient for the services' engine (or $DOCKER_HOST)
"""

from cairn.services.daemons import start, stop
from cairn.services.engine import docker_client, engine_host, registry_address
from cairn.services.state import ServicesState, current, read_state, services_dir

__all__ = [
    "ServicesState",
    "current",
    "docker_client",
    "engine_host",
    "read_state",
    "registry_address",
    "services_dir",
    "start",
    "stop",
]
