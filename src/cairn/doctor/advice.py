"""Which validated artifact fits this host: the newest matrix cell whose gates passed for its GPU.

The published compatibility matrix (``cairn.matrix``) has one cell per release × gfx target × OS ×
Python × framework. For the host's real target (never the one ``HSA_OVERRIDE_GFX_VERSION`` impersonates),
kernel, driver and Python, the advice picks the newest cell that passed the gates its channel requires
and prints the image by digest and the pip command. When nothing fits it says why, and names the nearest
cells (same target with a failed gate or an unsupported kernel, or targets sharing a generic ISA).

Matrices come from a path, a directory holding ``matrix.json``, ``file://``, ``http(s)://`` or ``s3://``.
Verification against the TUF root (``cairn verify``) runs when that module exists; otherwise the advice
says "unverified".
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

from packaging.version import InvalidVersion, Version

from cairn.errors import CairnError, InputError, UrlError
from cairn.matrix.commands import public_image
from cairn.matrix.model import load_matrix
from cairn.remote.url import download, exists
from cairn.sign.verify import load_pinned_root, verify_file

CHANNEL_RANK = {"stable": 3, "prerelease": 2, "nightly": 1, "dev": 0}


@dataclass(frozen=True)
class LoadedMatrix:
    """A matrix plus where it came from (relative index URLs resolve against ``base``) and its trust."""

    matrix: Any  # cairn.matrix.model.Matrix
    source: str
    base: str
    verified: bool
    verify_note: str


@dataclass(frozen=True)
class Pick:
    framework: str
    cell_id: str
    release: str
    channel: str
    image: str  # repo@sha256:…, "" when the cell has no image
    pip: str  # full pip command, "" when the cell's Python differs from the host's
    verified: bool
    target: str = ""  # the GPU target the cell is for


@dataclass(frozen=True)
class Nearest:
    """For a target with no build: the build of the same ISA generation it can run, unsupported.

    ``override`` is the exact line that makes the runtime load that build's code (empty when the build is the
    generic target itself, whose code objects run on every member without one)."""

    target: str  # the build's target: gfx1030, gfx1100 or a generic such as gfx11-generic
    generic: str  # the ISA generation both belong to
    override: str  # "HSA_OVERRIDE_GFX_VERSION=11.0.0" (or _<node> on a host with several GPUs); "" for a generic build
    picks: tuple[Pick, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "generic": self.generic, "override": self.override, "supported": False,
                "install": list(install_commands(Advice("ok", "", self.picks)).get(self.target, ()))}


@dataclass(frozen=True)
class Advice:
    status: str  # "ok", "none", "no-gpu", "no-matrix", "refused" (the release's matrix did not verify)
    summary: str
    picks: tuple[Pick, ...] = ()
    reasons: tuple[str, ...] = field(default_factory=tuple)
    sources: tuple[str, ...] = ()
    per_target: tuple[Advice, ...] = ()  # one advice per GPU target on the host
    target: str = ""  # set on a per-target advice
    nearest: Nearest | None = None  # a target with no build: the same-generation build it can run (unsupported)

    @property
    def each(self) -> tuple[Advice, ...]:
        """The advice line by line: one per GPU target."""
        return self.per_target or (self,)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "summary": self.summary,
            "picks": [p.__dict__ for p in self.picks],
            "reasons": list(self.reasons),
            "matrices": list(self.sources),
            "gpus": [{"target": a.target, "status": a.status, "summary": a.summary,
                      "install": list(install_commands(a).get(a.target, ())),
                      "nearest": a.nearest.to_json() if a.nearest else None} for a in self.per_target],
        }


# -- loading ------------------------------------------------------------------------------------------------
def load(source: str) -> LoadedMatrix:
    """Fetch, verify against the pinned TUF root (``cairn verify``) and parse one matrix document.

    ``source`` may also be a published repository directory: its best channel's matrix is used. Relative
    index URLs resolve against the repository root (the ancestor holding ``metadata/timestamp.json``).
    """
    local, url = _fetch(source)
    repo = _repository_root(url)
    verified, note = verify(repo, local) if repo else (False, "unverified: not inside a signed Cairn repository")
    base = repo or url.rsplit("/", 1)[0] + "/"
    return LoadedMatrix(load_matrix(local), source, base, verified, note)


def _fetch(source: str) -> tuple[Path, str]:
    """A local copy of the matrix and the URL it was read from."""
    parsed = urlparse(source)
    if parsed.scheme in ("http", "https", "s3"):
        handle, local = tempfile.mkstemp(prefix="cairn-matrix-", suffix=".json")
        os.close(handle)
        try:
            download(source, Path(local))  # the user's matrix URL
        except UrlError as exc:
            Path(local).unlink(missing_ok=True)
            if parsed.scheme == "s3":
                raise InputError(source, f"cannot fetch the matrix ({exc.detail})",
                                 "check the bucket, key and $CAIRN_S3_ENDPOINT (or AWS_ENDPOINT_URL)") from None
            raise InputError(source, f"cannot read the matrix ({exc.detail})", "check the URL") from None
        return Path(local), source
    path = Path(parsed.path if parsed.scheme == "file" else source)
    if path.is_dir():
        path = _matrix_in(path)
    return path, path.resolve().as_uri()


def _matrix_in(directory: Path) -> Path:
    """``matrix.json`` in a directory, or the most stable channel's matrix of a repository root."""
    if (directory / "matrix.json").is_file():
        return directory / "matrix.json"
    for channel in sorted(CHANNEL_RANK, key=CHANNEL_RANK.__getitem__, reverse=True):
        candidate = directory / "channels" / channel / "matrix.json"
        if candidate.is_file():
            return candidate
    staged = sorted(directory.glob("staging/*/matrix.json"))
    if staged:
        return staged[-1]
    raise InputError(directory, "no matrix.json here (nor channels/*/matrix.json)", "pass the matrix file or the repository root")


def _repository_root(url: str) -> str:
    """The nearest ancestor URL that holds TUF ``metadata/timestamp.json``; "" when none (or s3://)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("file", "http", "https"):
        return ""
    parts = url.split("/")
    for cut in range(len(parts) - 1, max(len(parts) - 5, 3), -1):
        candidate = "/".join(parts[:cut]) + "/"
        if exists(candidate + "metadata/timestamp.json", timeout=10):
            return candidate
    return ""


def verify(repository: str, local: Path) -> tuple[bool, str]:
    """``cairn verify``: the matrix must be a signed target of its repository under the pinned root.

    A tampered matrix is refused (InputError). No pinned root on this machine means "unverified", said
    plainly, because the doctor must still help on a host that never configured trust.
    """
    try:
        root = load_pinned_root()
    except CairnError as exc:
        return False, f"unverified: {exc}"
    try:
        target = verify_file(repository, root, local)
    except CairnError as exc:
        raise InputError(local, f"the matrix failed verification: {exc}", "do not use it; fetch it again from the release") from None
    return True, f"verified: signed target {target} of {repository}"


# -- choosing -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostFacts:
    """The host facts a cell must fit (all optional: an unknown fact does not exclude a cell)."""

    target: str | None
    kernel: str = ""
    driver: str = ""  # DKMS amdgpu version; "" for an in-tree driver
    python: str = ""
    installed: tuple[str, ...] = ()  # framework names installed on the host, preferred in the advice
    others: tuple[str, ...] = ()  # the other GPU targets of a host with several kinds of GPU
    nodes: tuple[tuple[str, int], ...] = ()  # (real target, KFD node) of every GPU, for per-node override lines

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.target, *self.others) if self.target else ()


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def rejection(cell: Any, matrix: Any, host: HostFacts) -> str:
    """Why a cell of the host's target does not fit; "" when it does."""
    blocking = cell.blocking(matrix.required_gates(cell.channel))
    if blocking:
        gate = blocking[0]
        return f"gate {gate.gate} {gate.status}" + (f" ({gate.reason})" if gate.reason else "")
    req = cell.requirements
    if host.kernel and (req.kernel.minimum or req.kernel.below) and not req.kernel.contains(host.kernel):
        return f"kernel {host.kernel} outside {req.kernel}"
    if host.driver and (req.driver.minimum or req.driver.below) and not req.driver.contains(host.driver):
        return f"{req.driver_name} {host.driver} outside {req.driver}"
    return ""


NO_MATRIX = "no compatibility matrix given — pass --matrix PATH|URL (or set CAIRN_MATRIX)"


def advise(loaded: list[LoadedMatrix], host: HostFacts, registry: Any,
           missing: tuple[str, str] = ("no-matrix", NO_MATRIX)) -> Advice:
    """The advice for every GPU target on the host (one advice each, in ``per_target``).

    ``missing`` is the status and the one line saying why no matrix was loaded, when none was.
    """
    sources = tuple(f"{m.source} ({m.verify_note})" for m in loaded)
    if not loaded:
        return Advice(*missing)
    releases = ", ".join(sorted({m.matrix.release.version for m in loaded}, key=_version))
    if host.target is None:
        known = sorted({c.gfx_target for m in loaded for c in m.matrix.cells})
        return Advice("no-gpu", f"no AMD GPU here, so no artifact fits; {releases} covers {', '.join(known) or 'nothing'}",
                      sources=sources)
    each = tuple(_advise_target(loaded, replace(host, target=t, others=tuple(o for o in host.targets if o != t)), registry,
                                releases, sources) for t in host.targets)
    if len(each) == 1:
        return replace(each[0], per_target=each)
    status = next((a.status for a in each if a.status != "ok"), "ok")
    return Advice(status, "; ".join(a.summary for a in each), tuple(p for a in each for p in a.picks),
                  tuple(r for a in each for r in a.reasons), sources, each)


def _advise_target(loaded: list[LoadedMatrix], host: HostFacts, registry: Any, releases: str,
                   sources: tuple[str, ...]) -> Advice:
    assert host.target is not None  # advise() handles a host without a GPU
    fits: list[tuple[LoadedMatrix, Any]] = []
    reasons: list[str] = []
    for item in loaded:
        for cell in item.matrix.for_target(host.target):
            why = rejection(cell, item.matrix, host)
            if why:
                reasons.append(f"{cell.id}: {why}")
            else:
                fits.append((item, cell))
    if not fits:
        nearest = None if reasons else nearest_build(loaded, host, registry)
        return Advice("none", _none_summary(loaded, host, registry, releases, reasons, nearest), reasons=tuple(reasons),
                      sources=sources, target=host.target, nearest=nearest)

    def rank(pair: tuple[LoadedMatrix, Any]) -> tuple:
        cell = pair[1]
        return (cell.python == host.python, _version(cell.release), CHANNEL_RANK.get(cell.channel, -1))

    best: dict[str, tuple[LoadedMatrix, Any]] = {}
    for pair in sorted(fits, key=rank, reverse=True):
        best.setdefault(pair[1].framework.name, pair)
    order = sorted(best, key=lambda name: (name not in host.installed, name))
    siblings = set(host.targets) - {host.target}
    picks = tuple(_pick(*best[name], host, shares_family=bool(siblings & _members(registry, best[name][1].family)))
                  for name in order[:3])
    top = picks[0]
    trust = "verified" if top.verified else "unverified"
    summary = f"{host.target}: cairn {top.release} ({top.channel}, {trust}) passed its gates for this host"
    return Advice("ok", summary, picks, tuple(reasons), sources, target=host.target)


def install_commands(advice: Advice) -> dict[str, tuple[str, ...]]:
    """The exact commands the advice gives for each GPU target: image pulls by digest, then pip lines."""
    out: dict[str, list[str]] = {}
    for pick in advice.picks:
        lines = out.setdefault(pick.target, [])
        lines += [line for line in (f"docker pull {pick.image}" if pick.image else "", pick.pip) if line and line not in lines]
    return {target: tuple(lines) for target, lines in out.items()}


def _pick(item: LoadedMatrix, cell: Any, host: HostFacts, shares_family: bool = False) -> Pick:
    # an image on a loopback registry is pullable only where $CAIRN_PUBLIC_REGISTRY names its public home
    public = public_image(cell.images[0], os.environ.get("CAIRN_PUBLIC_REGISTRY") or None) if cell.images else None
    image = public or ""
    pip = ""
    if cell.index_url and (not host.python or cell.python == host.python):
        index = urljoin(item.base, family_index(cell) if shares_family else cell.index_url)
        pip = f"pip install --index-url {index} '{cell.framework.name}=={cell.framework.version}'"
    return Pick(cell.framework.name, cell.id, cell.release, cell.channel, image, pip, item.verified, cell.gfx_target)


def _members(registry: Any, family: str) -> set[str]:
    """The targets of a family the matrix names; none for a family this registry does not know."""
    try:
        return set(registry.expand(family))
    except KeyError:
        return set()


def family_index(cell: Any) -> str:
    """The family's index in place of a cell's target index (``…/simple/gfx1100/`` → ``…/simple/gfx110X-dgpu/``).

    A target's own index installs that target's device code alone; a host with another GPU of the same family
    needs the family's payload, or one of its GPUs has no code to run (and the two targets' device wheels
    install the same files, so installing from both indexes is no answer)."""
    head, _, last = cell.index_url.rstrip("/").rpartition("/")
    if last != cell.gfx_target or cell.family == cell.gfx_target:
        return cell.index_url
    return f"{head}/{cell.family}/" if head else f"{cell.family}/"


def override_line(host: HostFacts, version: str) -> str:
    """The exact override for the host's GPUs of ``host.target``: the global variable on a one-GPU host, else
    one ``HSA_OVERRIDE_GFX_VERSION_<node>`` per GPU of that target (the global one would act on every GPU)."""
    nodes = [node for target, node in host.nodes if target == host.target]
    if len(host.nodes) <= 1 or not nodes:
        return f"HSA_OVERRIDE_GFX_VERSION={version}"
    return " ".join(f"HSA_OVERRIDE_GFX_VERSION_{node}={version}" for node in nodes)


def nearest_build(loaded: list[LoadedMatrix], host: HostFacts, registry: Any) -> Nearest | None:
    """The build of the host target's ISA generation (its LLVM generic target) that fits this host, or None.

    The generic build itself comes first (its code runs on every member, no override). Otherwise the member
    with the lowest gfx_target_version: the generation's base target (gfx1030, gfx1100), the one the
    override is commonly set to (gfx1031/1032/1034 → 10.3.0; gfx1103/1150/1152 → 11.0.0)."""
    target = registry.targets.get(host.target) if host.target else None
    generic = registry.generics.get(target.generic) if target and target.generic else None
    if generic is None:
        return None
    fitting: dict[str, list[tuple[LoadedMatrix, Any]]] = {}
    others: dict[str, list[tuple[LoadedMatrix, Any]]] = {}  # cells of the generation this host's kernel or driver rules out
    for item in loaded:
        for cell in item.matrix.cells:
            member = cell.gfx_target == generic.name or cell.gfx_target in generic.members
            if member and cell.gfx_target != host.target:
                (others if rejection(cell, item.matrix, host) else fitting).setdefault(cell.gfx_target, []).append((item, cell))
    fitting = fitting or others  # a ruled-out cell still names the generation's build; its commands say which
    if not fitting:
        return None

    def order(name: str) -> tuple[int, int]:
        return (0, 0) if name == generic.name else (1, registry.targets[name].kfd_version if name in registry.targets else 1 << 30)

    chosen = min(fitting, key=order)
    best = max(fitting[chosen], key=lambda pair: (pair[1].python == host.python, _version(pair[1].release),
                                                   CHANNEL_RANK.get(pair[1].channel, -1)))
    override = "" if chosen == generic.name else override_line(host, registry.targets[chosen].override_version)
    return Nearest(chosen, generic.name, override, (_pick(*best, host),))


def _none_summary(loaded: list[LoadedMatrix], host: HostFacts, registry: Any, releases: str, reasons: list[str],
                  nearest: Nearest | None = None) -> str:
    target = host.target or "?"
    if reasons:
        return f"{target}: every cell in {releases} is ruled out for this host — {reasons[0]}"
    head = f"{target} has no validated image or wheel in {releases}"
    if nearest and nearest.override:
        return (f"{head}; nearest: {nearest.target} (same {nearest.generic} ISA generation), unsupported: "
                f"run its build with {nearest.override}")
    if nearest:
        return f"{head}; nearest: the {nearest.target} build, whose code runs on {target} (not validated on it, unsupported)"
    others = sorted({c.gfx_target for m in loaded for c in m.matrix.cells})
    return f"{head}, nor any build of its ISA generation; it has: {', '.join(others) or 'nothing'}"
