"""What this host can do: tools, toolchain targets, reachable source hosts, apt's package versions.

The planner is pure; it takes a ``Host`` snapshot as input so plans are testable and so a blocked action
says exactly which missing capability blocks it. ``probe_host`` is the only code here that touches the
system, and it asks only cheap questions (which, a version flag, one TCP connect per git/archive host).
"""

from __future__ import annotations

import re
import shutil
import socket
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from cairn.errors import CairnError
from cairn.proc import run

HOST_DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")


@dataclass(frozen=True)
class Host:
    """A snapshot of host capabilities the planner consults."""

    tools: frozenset[str] = frozenset()
    hipcc_version: str = ""  # e.g. "5.2.3 (clang 15.0.6)"; empty when hipcc is missing
    hip_targets: frozenset[str] = frozenset()  # processors the host toolchain + device libs can compile
    reachable_hosts: frozenset[str] = frozenset()
    apt_versions: dict[str, frozenset[str]] = field(default_factory=dict)  # package -> versions apt can fetch
    mmdebstrap_version: str = ""
    patchelf_version: str = ""  # part of every wheel's key: patchelf rewrites what the wheels ship
    docker_host: str = ""  # the private Docker Engine (cairn services), "" when none runs
    registry: str = ""  # the local OCI registry, "" when none runs
    registry_id: str = ""  # changes whenever the registry's storage is new
    suite_versions: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)  # suite -> package -> versions
    mirrored: frozenset[str] = frozenset()  # sha256 of every input the store's source mirror holds


def _version_of(cmd: list[str]) -> str:
    try:  # without HIP_PLATFORM Debian's hipcc reports (and targets) nvcc
        return run(cmd, env={"HIP_PLATFORM": "amd"}, check=False, timeout=20).stdout
    except (OSError, CairnError):
        return ""


def hipcc_version() -> str:
    """``HIP version 5.2.21153 / clang 15.0.6`` style string used in action keys ("" if absent)."""
    if not shutil.which("hipcc"):
        return ""
    text = _version_of(["hipcc", "--version"])
    hip = re.search(r"HIP version:\s*(\S+)", text)
    clang = re.search(r"clang version\s*(\S+)", text)
    return f"hip {hip.group(1) if hip else '?'}; clang {clang.group(1) if clang else '?'}"


def compilable_targets(device_libs: Path = HOST_DEVICE_LIBS) -> frozenset[str]:
    """Processors whose ISA-version bitcode the device libraries ship: without it hipcc cannot link.

    ``oclc_isa_version_90a.bc`` → ``gfx90a``. This is the real reason ROCm 5.2's toolchain cannot build
    gfx942 or RDNA3: its device libraries predate them.
    """
    if not device_libs.is_dir():
        return frozenset()
    found = set()
    for path in device_libs.glob("oclc_isa_version_*.bc"):
        found.add("gfx" + path.stem.rsplit("_", 1)[1])
    return frozenset(found)


def _reachable(host: str, port: int = 443, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def apt_versions(packages: Iterable[str]) -> dict[str, frozenset[str]]:
    """Versions apt can download for each package (one ``apt-cache show`` call for all)."""
    names = sorted(set(packages))
    if not names or not shutil.which("apt-cache"):
        return {}
    proc = run(["apt-cache", "show", *names], check=False)
    found: dict[str, set[str]] = {}
    package = ""
    for line in proc.stdout.splitlines():
        if line.startswith("Package: "):
            package = line.split(": ", 1)[1]
        elif line.startswith("Version: ") and package:
            found.setdefault(package, set()).add(line.split(": ", 1)[1])
    return {name: frozenset(found.get(name, ())) for name in names}


def suite_versions(suite_pins: Iterable[tuple[str, str]]) -> dict[str, dict[str, tuple[str, ...]]]:
    """For each (suite, package): the versions the suite serves now, read from its signed index.

    A suite that cannot be read (no network to the archive) is left out: its pins then build only from the
    source mirror, and the plan says so."""
    # lazy: cairn.remote, cairn.sources, email, 50 ms at start-up (python -X importtime)
    from cairn.sources.debian import suite_index

    wanted: dict[str, set[str]] = {}
    for suite, package in suite_pins:
        wanted.setdefault(suite, set()).add(package)
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for suite, packages in sorted(wanted.items()):
        try:
            index = suite_index(suite)
        except CairnError:
            continue
        found[suite] = {p: tuple(e.version for e in index.get(p, [])) for p in sorted(packages)}
    return found


def mirrored(store: Path | None, wanted: Iterable[str]) -> frozenset[str]:
    """Which of the ``wanted`` sha256s a source mirror holds: the store's own, then ``$CAIRN_SOURCE_MIRROR``."""
    # lazy: cairn.remote, cairn.sources, email, 58 ms at start-up (python -X importtime)
    from cairn.remote.url import exists
    from cairn.sources.fetch import mirror_key, source_mirrors

    bases = source_mirrors(store)
    return frozenset(d for d in set(wanted) if any(exists(f"{b.rstrip('/')}/{mirror_key(d)}") for b in bases))


def probe_host(urls: Iterable[str] = (), deb_packages: Iterable[str] = (), suite_pins: Iterable[tuple[str, str]] = (),
               store: Path | None = None, mirror_wanted: Iterable[str] = ()) -> Host:
    """Probe tools, hipcc, device-lib targets, the hosts of ``urls`` (in parallel) and apt versions."""
    tools = frozenset(t for t in ("git", "apt-get", "dpkg-deb", "hipcc", "cmake", "patchelf", "docker", "pip", "mmdebstrap")
                      if shutil.which(t))
    endpoints: dict[str, int] = {}
    for url in urls:
        parsed = urlparse(url)
        if parsed.scheme in ("http", "https") and parsed.hostname:
            endpoints.setdefault(parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80))
    hosts = sorted(endpoints)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = pool.map(lambda h: _reachable(h, endpoints[h]), hosts)
        reachable = frozenset(h for h, ok in zip(hosts, results, strict=True) if ok)
    return Host(
        tools=tools,
        hipcc_version=hipcc_version(),
        hip_targets=compilable_targets() if "hipcc" in tools else frozenset(),
        reachable_hosts=reachable,
        apt_versions=apt_versions(deb_packages),
        suite_versions=suite_versions(suite_pins),
        mirrored=mirrored(store, mirror_wanted),
        mmdebstrap_version=_version_of(["mmdebstrap", "--version"]).strip() if "mmdebstrap" in tools else "",
        patchelf_version=_version_of(["patchelf", "--version"]).strip() if "patchelf" in tools else "",
        **_services(),
    )


def _services() -> dict[str, str]:
    """Where the private Docker Engine and registry listen (``cairn services``), as the planner sees them."""
    # lazy: cairn.remote, xml, ssl, 71 ms at start-up (python -X importtime)
    from cairn.services import engine_host, registry_address

    registry, registry_id = registry_address()
    return {"docker_host": engine_host(), "registry": registry, "registry_id": registry_id}
