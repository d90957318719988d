"""Image references as ``cairn audit`` inputs: ``registry/name:tag``, ``docker://…``, ``docker-daemon:name:tag``.

People hold images by name (a registry or their Docker Engine), not as OCI layouts on disk, so an audit that
only read layouts made them run ``skopeo copy`` first. Here skopeo (already a Cairn dependency) copies the
image into a temporary OCI layout, the existing layout audit reads it (layers applied, whiteouts honoured),
and the binaries are shown under the reference the user typed. The layout is deleted afterwards.

A word is a reference only when it is no existing path and either names a transport (``docker://``,
``docker-daemon:``) or has a registry host (``host.domain/…``, ``host:port/…``, ``localhost/…``) or a
``:tag``/``@sha256:`` on a ``name/name`` — so a mistyped file name still reads "no such file".
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cairn import proc
from cairn.errors import InputError

DAEMON = "docker-daemon:"
DOCKER = "docker://"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"{_COMPONENT}(?:/{_COMPONENT})*"
_HOST = r"(?:localhost|\[[0-9a-fA-F:]+\]|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)(?::\d+)?"
_REFERENCE = re.compile(rf"^(?:(?P<host>{_HOST})/)?(?P<name>{_NAME})(?::(?P<tag>[\w][\w.-]{{0,127}}))?(?:@(?P<digest>sha256:[0-9a-f]{{64}}))?$")
_LOOPBACK = ("localhost", "127.", "[::1]")


def is_reference(text: str) -> bool:
    """Whether ``text`` names an image rather than a file (see the module docstring for the rule)."""
    if text.startswith((DAEMON, DOCKER)):
        return True
    if text.startswith(("/", ".", "~")) or Path(text).exists():
        return False
    match = _REFERENCE.match(text)
    if not match or "/" not in text:
        return False
    host = match["host"] or ""
    registry_host = bool(host) and ("." in host or ":" in host or host == "localhost")
    return registry_host or bool(match["tag"] or match["digest"])


def skopeo_source(reference: str) -> str:
    """The skopeo transport string: ``docker://ref`` for a registry, ``docker-daemon:name:tag`` (``:latest``
    when no tag or digest is given, as the engine itself assumes)."""
    if reference.startswith(DAEMON):
        name = reference[len(DAEMON):]
        last = name.rsplit("/", 1)[-1]
        return reference if (":" in last or "@" in last) else f"{reference}:latest"
    return reference if reference.startswith(DOCKER) else DOCKER + reference


def _loopback(source: str) -> bool:
    """A registry on this machine (the private one of ``cairn services``) speaks plain HTTP."""
    return source.startswith(DOCKER) and source[len(DOCKER):].startswith(_LOOPBACK)


def _daemon_host() -> str:
    """The engine ``docker-daemon:`` reads from: ``$DOCKER_HOST`` as docker itself uses it (``cairn services
    start`` prints the line that exports it for its private engine); "" leaves skopeo's default socket. The
    audit does not read the services' state itself: it sits beside ``cairn.services``, not above it."""
    return os.environ.get("DOCKER_HOST", "")


def _skopeo_error(output: str) -> str:
    """The sentence skopeo's fatal log line carries (``msg="…"``), else its last line."""
    found = re.findall(r'msg="((?:[^"\\]|\\.)*)"', output)
    text = found[-1] if found else (output.strip().splitlines() or ["skopeo failed without a message"])[-1]
    return text.replace('\\"', '"')


@contextmanager
def fetched(reference: str) -> Iterator[Path]:
    """A temporary OCI layout holding the image ``reference`` (deleted on exit); InputError in one line when
    the image cannot be read."""
    skopeo = proc.require_tool("skopeo", "skopeo")
    source = skopeo_source(reference)
    cmd = [skopeo, "copy", "--quiet"]
    if source.startswith(DAEMON):
        host = _daemon_host()
        if host:
            cmd += ["--src-daemon-host", host]
    elif _loopback(source):
        cmd.append("--src-tls-verify=false")
    work = Path(tempfile.mkdtemp(prefix="cairn-audit-image-"))
    layout = work / "layout"
    try:
        done = proc.run([*cmd, source, f"oci:{layout}:image"], check=False, timeout=3600)
        if done.returncode != 0:
            raise InputError(reference, f"cannot read the image: {_skopeo_error(done.stderr or done.stdout)}",
                             "check the registry, name and tag (docker-daemon:NAME:TAG for the local Docker Engine), "
                             "or give an OCI layout directory")
        yield layout
    finally:
        shutil.rmtree(work, ignore_errors=True)
