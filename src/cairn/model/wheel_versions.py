"""Wheel versions that sort the way users upgrade.

SDK wheels (``rocm-sdk*``) carry the release version with a PEP 440 pre or dev segment per channel, so a
nightly sorts below the release candidate, which sorts below the final release:

=========== ================================ ====================
channel     version                          example
=========== ================================ ====================
stable      ``X.Y.Z``                        ``7.14.0``
prerelease  ``X.Y.ZrcN`` (N from manifest)   ``7.14.0rc2``
nightly     ``X.Y.ZaYYYYMMDD`` (date of SDE) ``7.14.0a20260715``
dev         ``X.Y.Z.devN`` (N = SDE)         ``7.14.0.dev1784073600``
=========== ================================ ====================

Framework wheels keep upstream's public version and carry the SDK in the local segment, one *numeric*
segment per version part: ``2.12.0+rocm.10.1.0`` > ``2.12.0+rocm.7.14.0`` because PEP 440 compares local
segments one by one and numbers compare numerically (``rocm10.1.0`` vs ``rocm7.14.0`` compares the strings
``rocm10`` and ``rocm7``, which is AMD's sort bug #7183). Pre-release SDKs append their channel
(``+rocm.7.14.0.a.20260715``); each channel publishes its own index and every framework wheel pins
``rocm-sdk-core==`` exactly, so the resolver never has to order a nightly against a final of the same SDK.
"""

from __future__ import annotations

import re
import time

from packaging.utils import canonicalize_name
from packaging.version import Version

from cairn.errors import InputError


def sdk_version(release_version: str, channel: str, source_date_epoch: int) -> str:
    """The PEP 440 version every SDK wheel of a release carries."""
    version = Version(release_version)
    base = version.base_version
    if channel == "stable":
        if version.pre or version.dev is not None:
            raise InputError("[release].version", f"stable release version '{release_version}' has a pre/dev segment",
                             f"use '{base}' or channel = \"prerelease\"")
        return base
    if channel == "prerelease":
        if version.pre and version.pre[0] == "rc":
            return f"{base}rc{version.pre[1]}"
        return f"{base}rc1"
    if channel == "nightly":
        return f"{base}a{time.strftime('%Y%m%d', time.gmtime(source_date_epoch))}"
    if channel == "dev":
        return f"{base}.dev{source_date_epoch}"
    raise InputError("[release].channel", f"unknown channel '{channel}'", "use dev, nightly, prerelease or stable")


def rocm_local(sdk: str) -> str:
    """The local label naming an SDK version: ``7.14.0`` → ``rocm.7.14.0``; ``7.14.0a20260715`` → ``rocm.7.14.0.a.20260715``."""
    version = Version(sdk)
    parts = ["rocm", *(str(n) for n in version.release)]
    if version.pre:
        parts += [version.pre[0], str(version.pre[1])]
    if version.dev is not None:
        parts += ["dev", str(version.dev)]
    return ".".join(parts)


def framework_version(upstream: str, sdk: str) -> str:
    """Upstream's version with the SDK in the local segment (any upstream local label is replaced)."""
    public = Version(upstream).public
    return f"{public}+{rocm_local(sdk)}"


def sdk_of(version: str) -> str | None:
    """Inverse of ``framework_version``: the SDK version a framework wheel was built for (None if not ours)."""
    local = Version(version).local or ""
    match = re.fullmatch(r"rocm\.(\d+)\.(\d+)\.(\d+)(?:\.(a|rc)\.(\d+)|\.dev\.(\d+))?", local)
    if not match:
        return None
    major, minor, micro, pre, pre_n, dev = match.groups()
    text = f"{major}.{minor}.{micro}"
    if pre:
        text += f"{pre}{pre_n}"
    if dev:
        text += f".dev{dev}"
    return text


def extra_name(family: str) -> str:
    """PEP 685 normalized extra for a family (``gfx94X-dcgpu`` → ``gfx94x-dcgpu``)."""
    return canonicalize_name(family)


def dist_name(project: str) -> str:
    """The file-name form of a project name (PEP 427/503): ``rocm-sdk-core`` → ``rocm_sdk_core``."""
    return canonicalize_name(project).replace("-", "_")


_NAMED_MAJOR = re.compile(r"(?:^|-)rocm-?(\d+)(?:-|$)")
_LOCAL_MAJOR = re.compile(r"^rocm[.]?(\d+)(?:[.]|$)")


def rocm_major(project: str, version: str) -> int | None:
    """The ROCm major a wheel says it is built for — in its name (``jax-rocm7-plugin``, ``cupy-rocm-7-0``) or its
    local version (``+rocm.7.2.4``, ``+rocm7.0.2``) — or None when it names none (``jax``, ``onnxruntime-rocm``)."""
    named = _NAMED_MAJOR.search(canonicalize_name(project))
    if named:
        return int(named.group(1))
    try:
        local = Version(version).local or ""
    except ValueError:
        return None
    match = _LOCAL_MAJOR.match(local)
    return int(match.group(1)) if match else None
