"""Each kind of release input read into one ``ReleaseView``: what that input can tell, and nothing it cannot.

A release manifest knows its pins, families and targets but nothing that was built; a bundle knows its
cells, wheels, images, gate results and the pins it was built from; a published repository knows its cells
with wheels, images and gate results (``staging/<version>/matrix.json``) and, when a Cairn that records them
published it, the pins (``staging/<version>/release.json``). A facet the input does not carry is ``None``, and
the comparison says it could not compare it rather than guessing.

Nothing here checks signatures: ``cairn verify`` does. A repository is read as it lies on disk or in the bucket.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.errors import InputError
from cairn.names import name_problem

if TYPE_CHECKING:
    from cairn.matrix.model import Matrix

# PEP 427 file name: the identity of a wheel across releases is its project and tags, without the version
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl$")


@dataclass(frozen=True)
class CellView:
    """One shippable cell without its release version, so the same cell of two releases lines up."""

    framework_version: str
    wheels: dict[str, tuple[str, str]]  # project-tags -> (file name, sha256)
    images: dict[str, str]  # image repository (tag dropped) -> digest
    gates: dict[str, str]  # gate -> passed | failed | not-run


@dataclass(frozen=True)
class ReleaseView:
    kind: str  # manifest | bundle | repository
    label: str  # what the user typed
    facts: dict[str, str]  # name, version, channel, manifest_sha256, and for manifests base_os, toolchain, python
    components: dict[str, dict[str, str]] | None = None  # name -> {"pin": identity, "version": version (manifests)}
    frameworks: dict[str, dict[str, str]] | None = None  # name -> {"version", "pin"}
    families: tuple[str, ...] | None = None
    targets: tuple[str, ...] | None = None
    required_gates: dict[str, tuple[str, ...]] | None = None
    cells: dict[str, CellView] | None = None  # gfx_target/os/pyX/framework -> cell


def open_view(arg: str) -> ReleaseView:
    """``arg`` is a bundle directory, a published repository (``DIR`` or ``s3://bucket/prefix``, either with
    ``@VERSION``), or a manifest path or release name."""
    if arg.startswith("s3://"):
        return _s3_repository(arg)
    path = Path(arg)
    version = ""
    if not path.exists() and "@" in arg:
        head, version = arg.rsplit("@", 1)
        if Path(head).is_dir():
            path = Path(head)
    if path.is_dir():
        if (path / "bundle.json").is_file():
            return _bundle(path, arg)
        if (path / "staging").is_dir():
            return _repository(path, version, arg)
        raise InputError(path, "is neither a release bundle (no bundle.json) nor a published repository (no staging/)",
                         "give a bundle directory, a repository directory (DIR or DIR@VERSION) or a release manifest")
    return _manifest(arg)


def _manifest(arg: str) -> ReleaseView:
    # lazy: cairn.model, cairn.remote, cairn.formats, 110 ms at start-up (python -X importtime)
    from cairn.plan.prepare import load

    manifest, registry = load(arg)
    rel = manifest.release
    facts = {"name": rel.name, "version": rel.version, "channel": rel.channel, "manifest_sha256": manifest.digest,
             "base_os": rel.base_os, "toolchain": rel.toolchain or "(host)", "python": ", ".join(rel.python)}
    components = {c.name: {"version": c.version, "pin": c.source.identity if not c.pin_unknown else f"unknown: {c.pin_unknown}"}
                  for c in manifest.components}
    frameworks = {f.name: {"version": f.version, "pin": f.source.identity if f.source else f"unknown: {f.pin_unknown}"}
                  for f in manifest.frameworks}
    return ReleaseView("manifest", arg, facts, components, frameworks, tuple(rel.families), manifest.targets(registry),
                       {ch: tuple(g) for ch, g in manifest.gates.items()})


def _bundle(root: Path, arg: str) -> ReleaseView:
    # lazy: cairn.matrix, cairn.remote, cairn.model, 69 ms at start-up (python -X importtime)
    from cairn.matrix.bundle import load_bundle

    bundle = load_bundle(root)
    facts = {"name": bundle.release, "version": bundle.version, "channel": bundle.channel, "manifest_sha256": bundle.manifest_sha256}
    cells: dict[str, CellView] = {}
    for cell in bundle.cells:
        wheels = [(a.name, a.sha256) for a in bundle.artifacts_for(cell) if a.kind == "wheel"]
        images = [(i.reference, i.digest) for i in cell.images]
        gates = {g.gate: g.status for g in bundle.gates_for(cell)}
        cells[_cell_key(cell.gfx_target, cell.os, cell.python, cell.framework)] = _cell_view(cell.framework_version, wheels, images, gates)
    return ReleaseView("bundle", arg, facts, components={name: {"pin": pin} for name, pin in bundle.facts.pins},
                       required_gates=dict(bundle.required_gates), cells=cells)


def _repository(root: Path, version: str, arg: str) -> ReleaseView:
    # lazy: cairn.remote, cairn.matrix, cairn.model, 64 ms at start-up (python -X importtime)
    from cairn.matrix.model import load_matrix

    staged = sorted(p.parent.name for p in (root / "staging").glob("*/matrix.json"))
    version = _pick(str(root), staged, version)
    record = root / "staging" / version / "release.json"
    view = _matrix_view(load_matrix(root / "staging" / version / "matrix.json"), arg)
    return _with_pins(view, record.read_bytes() if record.is_file() else None, str(record))


def _s3_repository(arg: str) -> ReleaseView:
    """A repository in S3 (endpoint from ``$CAIRN_S3_ENDPOINT``, as for publishing): one LIST, one GET."""
    # lazy: cairn.remote, cairn.matrix, cairn.model, 63 ms at start-up (python -X importtime)
    from cairn.matrix.model import parse_matrix
    from cairn.remote.backend import open_backend

    url, _, version = arg.partition("@")
    backend = open_backend(url)
    staged = sorted(key.split("/")[1] for key in backend.list("staging/") if re.fullmatch(r"staging/[^/]+/matrix\.json", key))
    version = _pick(url, staged, version)
    where = f"{url}/staging/{version}/matrix.json"
    view = _matrix_view(parse_matrix(backend.get(f"staging/{version}/matrix.json") or b"", where, "republish the release"), arg)
    return _with_pins(view, backend.get(f"staging/{version}/release.json"), f"{url}/staging/{version}/release.json")


def staged_view(record: dict[str, Any], gates: dict[str, Any], label: str) -> ReleaseView:
    """A staged release as ``cairn publish`` keeps it (``staging/<version>/release.json`` and ``gates.json``, as
    dicts): the cells of its staging matrix, and its pins — what the repository view of it reads."""
    # lazy: cairn.remote, cairn.matrix, cairn.model, 67 ms at start-up (python -X importtime)
    from cairn.matrix.build import build_matrix

    rel = record["release"]
    matrix = build_matrix(record, record["cells"], gates, rel["channel"], f"staging/{rel['version']}")
    return _pins_of(_matrix_view(matrix, label), record)


def _with_pins(view: ReleaseView, raw: bytes | None, where: str) -> ReleaseView:
    """``view`` with the pins of the staging record ``raw`` (``None``: no record, the pins are not compared)."""
    if raw is None:
        return view
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise InputError(where, f"is not JSON ({exc})", "republish the release") from None
    return _pins_of(view, record)


def _pins_of(view: ReleaseView, record: Any) -> ReleaseView:
    rel = record.get("release") if isinstance(record, dict) else None
    pins = rel.get("pins") if isinstance(rel, dict) else None
    if not isinstance(pins, dict):  # published before staging records kept the pins
        return view
    return replace(view, components={str(name): {"pin": str(pin)} for name, pin in sorted(pins.items())})


def _pick(where: str, staged: list[str], version: str) -> str:
    """The staged release to read: the one named, or the only one."""
    if version:
        if name_problem(version) or version not in staged:
            raise InputError(where, f"has no staged release {version!r}", f"staged: {', '.join(staged) or 'none'}")
        return version
    if len(staged) == 1:
        return staged[0]
    raise InputError(where, f"holds {len(staged)} staged releases ({', '.join(staged) or 'none'})", f"name one as {where}@VERSION")


def _matrix_view(matrix: Matrix, arg: str) -> ReleaseView:
    rel = matrix.release
    facts = {"name": rel.name, "version": rel.version, "channel": rel.channel, "manifest_sha256": rel.manifest_sha256}
    cells = {_cell_key(c.gfx_target, c.os, c.python, c.framework.name): _cell_view(
        c.framework.version, [(w.filename, w.sha256) for w in c.wheels], [(i.reference, i.digest) for i in c.images],
        {g.gate: g.status for g in c.gates}) for c in matrix.cells}
    return ReleaseView("repository", arg, facts, required_gates=dict(rel.required_gates), cells=cells)


def _cell_key(gfx_target: str, os_name: str, python: str, framework: str) -> str:
    return f"{gfx_target}/{os_name}/py{python}/{framework}"


def _cell_view(framework_version: str, wheels: list[tuple[str, str]], images: list[tuple[str, str]],
               gates: dict[str, str]) -> CellView:
    by_wheel: dict[str, tuple[str, str]] = {}
    for filename, sha in wheels:
        match = _WHEEL.match(filename)
        by_wheel[f"{match['name']}-{match['tags']}" if match else filename] = (filename, sha)
    by_image: dict[str, str] = {}
    for reference, digest in images:
        repo = _repository_of(reference)
        name, n = repo, 2
        while name in by_image:  # two images of one repository in a cell: keep them apart by position
            name, n = f"{repo} #{n}", n + 1
        by_image[name] = digest
    return CellView(framework_version, by_wheel, by_image, dict(gates))


def _repository_of(reference: str) -> str:
    """``host:port/repo:tag`` → ``host:port/repo`` (a port is not a tag: only a colon after the last slash is)."""
    reference = reference.split("@", 1)[0]
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    return reference[:colon] if colon > slash else reference
