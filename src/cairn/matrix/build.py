"""The compatibility matrix of a staged release, built from its staging record and its gate results.

A staged release is two JSON documents in the repository: ``staging/<version>/release.json`` (every cell, the
files it ships) and ``staging/<version>/gates.json`` (each cell's gate results, keyed by ``cell_id``, plus the
verdicts reported after staging). The publisher reads and writes them as plain JSON; this module is what they
mean as matrix data: a cell's id, its gate results, verdicts merged in, and the ``Matrix`` a channel shows.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.errors import InputError
from cairn.matrix import model
from cairn.model.gate_result import SCHEMA, STATUSES

RECORDED = "recorded"  # gates.json key: image digest -> gate -> the verdict reported after staging (and who signed it)
_RANK = {"passed": 0, "not-run": 1, "failed": 2}


def cell_id(cell: dict[str, Any]) -> str:
    """``<release>/<gfx>/<os>/py<python>/<framework>-<version>``: a staged cell's key in gates.json and reports."""
    return f"{cell['release']}/{cell['gfx_target']}/{cell['os']}/py{cell['python']}/{cell['framework']['name']}-{cell['framework']['version']}"


def cell_gates(gates: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's gate results: its own (keyed by cell id), overridden by results recorded later for its target."""
    return {**gates.get(cell_id(cell), {}), **gates.get(cell["gfx_target"], {})}


def record_gates(stage: dict[str, Any], gates: dict[str, Any], results: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """``gates`` with verdicts reported after staging merged in (already verified: ``cairn.sign.runners.accept``).

    A verdict is for one image: it counts for every staged cell of its target whose images include that
    digest, and a gate passes for a cell only if it passed on every image of the cell (failed > not-run >
    passed; an image with no verdict yet is not-run). Refused, naming the file, with nothing changed: a verdict
    for an image this release did not stage (a gate run on other bytes proves nothing about these), for a gate
    no channel of the release requires, and any verdict but ``failed`` where the gate already failed — at build
    time or in an earlier verdict: a failure is never overturned; a fix is a new build, staged as a new version.
    """
    gates = json.loads(json.dumps(gates))
    recorded: dict[str, dict[str, dict[str, Any]]] = gates.setdefault(RECORDED, {})
    touched: set[tuple[str, str]] = set()  # (cell id, gate)
    version = stage["release"]["version"]
    required = sorted({g for gs in stage["release"].get("required_gates", {}).values() for g in gs})
    for path, result in results:
        fields = ("gate", "target", "digest", "status")
        if result.get("schema") != SCHEMA or not all(isinstance(result.get(k), str) and result[k] for k in fields):
            raise InputError(path, f"not a gate result ({SCHEMA} with {', '.join(fields)})",
                             "pass the signed verdict cairn gate --sign-with wrote on the host that ran the gate")
        gate, status = result["gate"], result["status"]
        if status not in STATUSES:
            raise InputError(path, f"gate status {status!r}", f"use one of {', '.join(STATUSES)}")
        if gate not in required:
            raise InputError(path, f"release {version} requires no {gate} gate (its channels require {', '.join(required) or 'none'})",
                             "pass only verdicts of gates the release requires")
        cells = [c for c in stage["cells"] if c["gfx_target"] == result["target"]
                 and result["digest"] in {i["digest"] for i in c["images"]}]
        if not cells:
            raise InputError(path, f"{gate} gate of {result['digest'][:19]}… ({result['target']}) is for an image "
                             f"release {version} did not stage", "run the gate on the staged image's digest")
        before = [(cell_id(c), cell_gates(gates, c).get(gate) or {}) for c in cells]
        before.append((f"{result['digest'][:19]}…", recorded.get(result["digest"], {}).get(gate) or {}))
        failed = next(((where, v) for where, v in before if v.get("status") == "failed"), None)
        if failed and status != "failed":
            where, verdict = failed
            raise InputError(path, f"{gate} gate of {where} failed ({verdict.get('reason') or 'no reason recorded'}); a {status} "
                             "verdict cannot overturn a failure", "fix the cause and stage a new build")
        entry = {"status": status, "reason": result.get("reason", "")}
        if isinstance(result.get("runner"), dict):  # who vouched for it, and the signed statement kept in the repository
            entry["runner"] = result["runner"]
        recorded.setdefault(result["digest"], {})[gate] = entry
        touched.update((cell_id(c), gate) for c in cells)
    for cell in stage["cells"]:
        cid = cell_id(cell)
        for gate in sorted(g for c, g in touched if c == cid):
            verdicts = [recorded.get(i["digest"], {}).get(gate) or
                        {"status": "not-run", "reason": f"no {gate} result recorded for {i['reference']}@{i['digest'][:19]}…"}
                        for i in cell["images"]]
            worst = max(verdicts, key=lambda v: _RANK[v["status"]])
            gates.setdefault(cid, {})[gate] = {"status": worst["status"], "reason": worst["reason"]}
    return gates


def build_matrix(stage: dict[str, Any], cells: list[dict[str, Any]], gates: dict[str, Any], channel: str,
                 index_prefix: str, previous: model.Previous | None = None, where: Published | None = None) -> model.Matrix:
    """The matrix of ``cells`` (staged cells, possibly with wheels left off) as ``channel`` shows them.

    ``index_prefix`` is where the pip index of these cells is (``staging/<version>`` or ``channels/<channel>``);
    every gate a channel of the release requires is listed for every cell, ``not-run`` where it has no result.
    ``previous``: a channel's matrix names the release the channel served before (``cairn.publish.changes``).
    ``where``: the public repository URL and registry the publish named; with a URL the cells' index URLs are
    absolute under it, with a registry an image pushed to a loopback one is named on it (what a user pulls).
    """
    where = where or Published()
    rel = stage["release"]
    out = []
    for c in cells:
        req = c["requirements"]
        index, wheels = page_of(stage, c)
        results = cell_gates(gates, c)
        required = {g for gs in rel["required_gates"].values() for g in gs}
        gate_list = [model.GateResult(g, results.get(g, {}).get("status", "not-run"), results.get(g, {}).get("reason", "")
                                      or ("" if g in results else "no result recorded")) for g in sorted(required | set(results))]
        out.append(model.Cell(
            release=rel["version"], channel=channel, gfx_target=c["gfx_target"], family=c["family"], products=tuple(c["products"]),
            os=c["os"], python=c["python"], framework=model.Framework(c["framework"]["name"], c["framework"]["version"]),
            index_url=f"{where.base_url}{index_prefix}/simple/{index}/",
            wheels=tuple(model.WheelFile(posixpath.basename(k), k, stage["files"][k]["sha256"], stage["files"][k]["size"],
                                         stage["files"][k].get("requires_python", "")) for k in wheels),
            images=tuple(_public(model.ImageRef(i["reference"], i["digest"]), where.registry) for i in c["images"]),
            gates=tuple(gate_list), partial=tuple(c.get("partial", ())),
            requirements=model.Requirements(model.VersionRange(**req["driver"]), model.VersionRange(**req["kernel"]), req["driver_name"]),
        ))
    release = model.Release(rel["name"], rel["version"], channel, rel["source_date_epoch"], rel.get("manifest_sha256", ""),
                            tuple((ch, tuple(g)) for ch, g in sorted(rel["required_gates"].items())), previous,
                            where.base_url, where.registry)
    return model.Matrix(release, tuple(out))


@dataclass(frozen=True)
class Published:
    """Where users fetch a published release from (``cairn publish``/``promote`` ``--public-url``, ``--registry``):
    the repository root over HTTP (``https://…/``, "" when there is none to name) and the registry the images were
    pushed to ("" = as the build pushed them)."""

    base_url: str = ""
    registry: str = ""


def _public(image: model.ImageRef, registry: str) -> model.ImageRef:
    """The image as published: a reference on a loopback registry (the build host's own) is named on ``registry``
    — the same digest, so its signature and every gate verdict still name these bytes."""
    # lazy: packaging, cairn.matrix, platform, 8 ms at start-up (python -X importtime)
    from cairn.matrix.commands import public_image

    if not registry:
        return image
    reference = public_image(model.ImageRef(image.reference, image.digest), registry)
    if reference is None or reference == image.pinned:
        return image
    tag = image.reference.rsplit(":", 1)[1] if model._has_tag(image.reference) else ""
    return model.ImageRef(reference.split("@", 1)[0] + (f":{tag}" if tag else ""), image.digest)


def page_of(stage: dict[str, Any], cell: dict[str, Any]) -> tuple[str, list[str]]:
    """The index a cell's wheels are installed from, and the wheels it lists for the cell.

    A target whose family wheels have a target-only ``rocm-sdk`` (``<release>+<gfx>``, cairn.wheels.sdk) has an
    index of its own, ``simple/<gfx>/``: there every wheel built for the family that requires
    ``rocm-sdk[<family>]`` resolves to the target's device wheel, so a user installs one target's code. The
    family's index lists the family's payload and the plain meta wheel, never a target's own.
    """
    files = stage["files"]
    own = any(files[k].get("index") == "target" for k in cell["wheels"])
    if own:
        return cell["gfx_target"], [k for k in cell["wheels"] if files[k].get("index") != "family"]
    return cell["family"], family_wheels(stage, cell)


def family_wheels(stage: dict[str, Any], cell: dict[str, Any]) -> list[str]:
    """A cell's wheels as its family's index lists them: everything but a target's own."""
    return [k for k in cell["wheels"] if stage["files"][k].get("index") != "target"]
