"""The copy-paste commands the matrix page offers for a cell: ``docker pull`` by digest and ``pip install``.

A command is printed only for something a user can really fetch. Images are named by the registry they are
published to: a build host pushes to a registry on a loopback address (``127.0.0.1:5000``), which means nothing
on anyone else's machine, so a loopback host is rewritten to the configured public registry (``--registry`` of
``cairn matrix`` or ``$CAIRN_PUBLIC_REGISTRY``) and, with none configured, the image is shown as published to a
local registry only, with no pull command. The pip command installs exactly the wheels the cell lists, pinned
``==`` from the cell's own index (the meta wheel ``rocm-sdk[<family>]`` standing for the SDK wheels it pins, or
``rocm-sdk[device-<gfx>]`` for the SDK alone: one target's code, see ``sdk_extra``).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urljoin

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from cairn.errors import CairnError
from cairn.matrix.model import Cell, ImageRef
from cairn.model.wheel_versions import extra_name

REGISTRY_ENV = "CAIRN_PUBLIC_REGISTRY"
_REGISTRY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._/-][a-z0-9]+)*)?$")
SDK = "rocm-sdk"  # the meta wheel; the SDK's own wheels are rocm-sdk-<part>


def registry_host(reference: str) -> str:
    """The registry host of an image reference (``127.0.0.1:5000/cairn/smoke:1`` → ``127.0.0.1:5000``), or ""
    for a Docker Hub short name (``cairn/smoke``): the first component names a host only with a ``.``, a ``:``
    or as ``localhost``, as Docker reads it."""
    first, sep, _ = reference.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        return first
    return ""


def is_loopback(host: str) -> bool:
    """Whether a registry host (with or without a port) is this machine: ``localhost``, ``127.x``, ``[::1]``."""
    name = _host_name(host)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_name(host: str) -> str:
    """``[::1]:5000`` → ``::1``, ``127.0.0.1:5000`` → ``127.0.0.1``, ``localhost`` → ``localhost``."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.split(":", 1)[0] if host.count(":") == 1 else host


def check_registry(name: str, where: str = "--registry") -> str:
    """A public registry name (``host[:port][/namespace]``) as given, or one line saying what is wrong with it."""
    value = name.strip().rstrip("/")
    if "://" in value or not _REGISTRY.match(value):
        raise CairnError(f"{where} {name!r} is not a registry name — give host[:port][/namespace], e.g. ghcr.io/my-org")
    if is_loopback(value.split("/", 1)[0]):
        raise CairnError(f"{where} {name!r} is a loopback address, which no user can pull from — give the public registry the images are published to")
    return value


def public_image(image: ImageRef, registry: str | None) -> str | None:
    """``<registry>/<repo>@sha256:…`` to pull, or None when the image is on a loopback registry and no public
    one is configured (it was published to a local registry only)."""
    pinned = image.pinned
    host = registry_host(pinned)
    if not host or not is_loopback(host):
        return pinned
    if not registry:
        return None
    return f"{registry}/{pinned[len(host) + 1:]}"


def local_image(image: ImageRef) -> str:
    """The image without its loopback host (``cairn/smoke@sha256:…``), for saying what is only local."""
    pinned = image.pinned
    host = registry_host(pinned)
    return pinned[len(host) + 1:] if host else pinned


RUNTIME_REPO = "cairn/rocm"  # the runtime image's repository (recipes/containers/runtime.toml; a test checks)


def repository(image: ImageRef) -> str:
    """An image's repository without its registry host and tag: ``127.0.0.1:5000/cairn/rocm:7.2.4-gfx1100`` →
    ``cairn/rocm``."""
    host = registry_host(image.reference)
    path = image.reference[len(host) + 1:] if host else image.reference
    return path.rsplit(":", 1)[0] if ":" in path.rsplit("/", 1)[-1] else path


def is_runtime(image: ImageRef) -> bool:
    """Whether an image is the release's runtime image (every framework image is built on it, and every cell of a
    target lists it beside its framework's own)."""
    repo = repository(image)
    return repo == RUNTIME_REPO or repo.endswith("/" + RUNTIME_REPO)


def own_images(cell: Cell) -> list[ImageRef]:
    """The images a cell's commands name: its framework's own, not the runtime image it is built on (the SDK's
    detail names that one); all of them when the cell has no other."""
    own = [i for i in cell.images if not is_runtime(i)]
    return own or list(cell.images)


def pull_commands(cell: Cell, registry: str | None) -> list[str]:
    """``docker pull`` by digest for every image of the cell's own a user can reach."""
    return [f"docker pull {ref}" for ref in (public_image(i, registry) for i in own_images(cell)) if ref]


# The GPU devices every ROCm container needs (KFD for compute, DRI render nodes), as AMD's container docs give them.
GPU_DEVICES = "--device /dev/kfd --device /dev/dri"
# How a framework's image is run, by canonical framework name: (docker options, arguments to the entrypoint). An
# engine serving a model publishes its port and mounts the model directory; anything else opens a shell.
RUN: dict[str, tuple[str, str]] = {
    # llama-server is the image's entrypoint, listening on 0.0.0.0:8080 (recipes/containers/llama-cpp.toml)
    "llama-cpp-python": ('-p 8080:8080 -v "$HOME/models:/models"', "-m /models/model.gguf"),
}


def run_commands(cell: Cell, registry: str | None) -> list[str]:
    """``docker run`` of every image of the cell a user can reach, by digest, with the GPU devices (and, for an
    engine, its port and a model volume: ``RUN``)."""
    options, arguments = RUN.get(canonicalize_name(cell.framework.name), ("-it", ""))
    return [" ".join(p for p in ("docker run --rm", GPU_DEVICES, options, ref, arguments) if p)
            for ref in (public_image(i, registry) for i in own_images(cell)) if ref]


def python_range(cell: Cell) -> str:
    """The Pythons the cell's own wheels install on, as the wheels say (``Requires-Python`` and the interpreter
    tags of their file names), not the Python of the cell's image: "" when the cell lists no wheel of its own."""
    name = canonicalize_name(cell.framework.name)
    own = [w for w in cell.wheels if wheel_project(w.filename)[0] == name] or \
          [w for w in cell.wheels if wheel_project(w.filename)[0] and not is_sdk(wheel_project(w.filename)[0])]
    if not own:
        return ""
    specs = sorted({w.requires_python for w in own if w.requires_python})
    tags = sorted({t.interpreter for w in own for t in parse_wheel_filename(w.filename)[3]})
    return f"Requires-Python {', '.join(specs) or 'not stated'} ({', '.join(tags)} wheel{'s' if len(own) > 1 else ''})"


def pip_command(cell: Cell, base_url: str | None) -> str | None:
    """``pip install --index-url <index> …`` for the cell's wheels, or None (no wheels, or no URL to say where).

    ``base_url`` is the repository root the cell's relative ``index_url`` hangs off (http(s) or file).
    """
    if not cell.wheels or not cell.index_url:
        return None
    index = urljoin(base_url, cell.index_url) if base_url else cell.index_url
    if "://" not in index:
        return None
    pins: list[str] = []
    names = {name: version for name, version in (wheel_project(w.filename) for w in cell.wheels) if name}
    if SDK in names:
        others = {n: v for n, v in names.items() if not is_sdk(n)}
        pins.append(f'"{SDK}[{sdk_extra(cell, names, bool(others))}]=={names[SDK]}"')
        names = others
    pins += [f'"{name}=={version}"' for name, version in sorted(names.items())]
    return f"pip install --index-url {index} {' '.join(pins)}" if pins else None


def sdk_extra(cell: Cell, names: dict[str, str], with_wheels_of_family: bool) -> str:
    """``device-<gfx>`` — the cell's target's code alone — when the release has that device wheel and either the
    SDK is all the cell installs or the cell's index is the target's own; else the family. A framework or engine
    wheel is built for the family and requires ``rocm-sdk[<family>]`` itself: on the family's index naming the
    device extra beside it would fetch both payloads, which install the same files; on the target's own index
    that requirement is the device wheel too (cairn.wheels.sdk.build_target_meta_wheel)."""
    device = f"{SDK}-device-{cell.gfx_target}"
    own_index = names.get(SDK, "").endswith(f"+{cell.gfx_target}")  # the target's rocm-sdk: its family extra is the device
    if (own_index or not with_wheels_of_family) and canonicalize_name(device) in names:
        return f"device-{cell.gfx_target}"
    return extra_name(cell.family)


def is_sdk(project: str) -> bool:
    """Whether a (canonical) project name is one of the SDK's wheels, which every cell of a family lists."""
    return project == SDK or project.startswith(SDK + "-")


def wheel_project(filename: str) -> tuple[str, str]:
    """(canonical project name, version) of a wheel file name; ("", "") for a name that is not a wheel's."""
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return "", ""
    return canonicalize_name(name), str(version)
