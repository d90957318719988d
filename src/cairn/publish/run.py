"""The bundle stage's runner: collect the release bundle from the trees of the actions it depends on.

``cairn.publish.plan`` decides what the bundle holds (and records, with its reason, everything this host
could not build or check); ``run_bundle`` links every wheel, Dockerfile and pinned .deb into the output,
writes one gate result per planned or required gate, and the ``bundle.json`` that ``cairn publish`` signs.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cairn.digest import file_sha256
from cairn.execute.runners import ActionContext
from cairn.matrix.bundle import write_bundle_json
from cairn.model.gate_result import GateResult
from cairn.model.records import REPORT_FILE, PushRecord, WheelReport
from cairn.names import safe_name
from cairn.plan.ids import parse_action_id, parse_gate_id
from cairn.publish.plan import ACTION_ID
from cairn.wheels.sdk import partial_name


def run_bundle(ctx: ActionContext) -> None:
    """Collect wheels, Dockerfiles, image digests and gate results from the dependency trees into a bundle."""
    inputs = ctx.action.inputs
    out: Path = ctx.out
    rel = inputs["release"]
    recipe_of = _wheel_recipes(ctx)
    artifacts: list[dict[str, Any]] = []
    for fam, targets in sorted(inputs["families"].items()):
        index = ctx.deps.get(f"index:{fam}")
        if index is None:
            ctx.log.write(f"{fam}: no index ({inputs['not_built'].get(f'index:{fam}', 'not planned')}); no wheels\n")
            continue
        for wheel in sorted((index / fam / "files").glob("*.whl")):
            dest = out / "files" / "wheels" / fam / wheel.name
            _link(wheel, dest)
            built_by = recipe_of.get(wheel.name, f"index:{fam}")
            # a device wheel belongs to its target's cells alone: another target's failed gate never holds it
            device = built_by.removeprefix("package:rocm-sdk-device@") if built_by.startswith("package:rocm-sdk-device@") else ""
            artifacts.append({"path": f"wheels/{fam}/{wheel.name}", "kind": "wheel", "family": fam,
                              "cells": [device] if device in targets else targets,
                              "recipe": built_by, "framework": inputs["wheel_frameworks"].get(built_by, ""),
                              **({"index": "family"} if built_by in _family_only(fam) else {})})
        artifacts += _target_metas(ctx, fam, targets, out)
    images: dict[str, list[dict[str, str]]] = {}
    for dep in sorted(ctx.deps):
        ref = parse_action_id(dep)
        if ref.kind != "push" or not ref.where:
            continue
        name, target = ref.name, ref.where
        push = PushRecord.read(ctx.deps[dep], f"rebuild it: cairn build --only {dep}")
        if push.blocked:  # no image was built; its gates say why (not-run: image blocked: …)
            continue
        tag = push.tags[0] if push.tags else ""
        reference = f"{push.registry}/{push.repo}" + (f":{tag}" if tag else "")
        images.setdefault(target, []).append({"reference": reference, "digest": push.digest, "image": name})
        dockerfile = ctx.deps.get(f"image:{name}@{target}", Path("/nonexistent")) / "Dockerfile"
        if dockerfile.is_file():
            path = f"dockerfiles/{target}/{name}/Dockerfile"
            _link(dockerfile, out / "files" / path)
            artifacts.append({"path": path, "kind": "dockerfile", "family": push.target, "cells": [target],
                              "content_type": "text/plain; charset=utf-8", "recipe": f"recipes/containers/{name}.toml"})
    artifacts += _source_mirror(ctx, out)
    _write_gates(ctx, out / "gates", images)
    cells = []
    blocked = inputs.get("blocked_frameworks", {})
    for fam, targets in sorted(inputs["families"].items()):
        frameworks = inputs["frameworks"].get(fam) or [["rocm-sdk", rel["version"]]]
        partial = _partial(ctx, fam)
        frameworks = [*frameworks, *([name, b["version"]] for name, b in sorted(blocked.items()))]
        for target in targets:
            for python in rel["python"]:
                for project, version in frameworks:
                    needs = _engine_needs(ctx, project, fam)
                    cells.append({"gfx_target": target, "family": fam, "os": rel["base_os"], "python": python,
                                  "framework": project, "framework_version": version,
                                  "images": [{"reference": i["reference"], "digest": i["digest"]} for i in images.get(target, [])
                                             if inputs["image_frameworks"].get(i["image"], "") in ("", project)],
                                  "partial": [p for p in partial.get(target, []) if needs is None or _needed(p, needs)],
                                  "requirements": inputs["requirements"]})
    write_bundle_json(out, {
        "release": {k: rel[k] for k in ("name", "version", "channel", "source_date_epoch", "manifest_sha256", "required_gates")},
        "builder": {"id": "https://cairn.invalid/builder/local", "invocation": f"cairn build ({ACTION_ID})"},
        "pins": inputs["pins"],
        "not_built": inputs["not_built"],
        "artifacts": artifacts,
        "cells": cells,
    })
    ctx.log.write(f"bundle: {len(artifacts)} artifact(s), {len(cells)} cell(s), "
                  f"{len(list((out / 'gates').glob('*.json')))} gate result(s)\n")


def _family_only(family: str) -> tuple[str, str]:
    """The wheels a target's own index serves in another form: the plain meta wheel (replaced there by the
    target's ``rocm-sdk``) and the family's libraries wheel (its family extra installs the device wheel)."""
    return ("package:rocm-sdk", f"package:rocm-sdk-libraries@{family}")


def _target_metas(ctx: ActionContext, family: str, targets: list[str], out: Path) -> list[dict[str, Any]]:
    """``rocm-sdk <release>+<gfx>`` of each target that has one, for that target's own index alone."""
    found = []
    for target in targets:
        meta = f"package:rocm-sdk@{target}"
        tree = ctx.deps.get(meta)
        # a target of two of the release's families has its own index for the first of them only
        if tree is None or WheelReport.read(tree, f"rebuild it: cairn build --only {meta}").family != family:
            continue
        for wheel in sorted((tree / "wheels").glob("*.whl")):
            _link(wheel, out / "files" / "wheels" / family / wheel.name)
            found.append({"path": f"wheels/{family}/{wheel.name}", "kind": "wheel", "family": family, "cells": [target],
                          "recipe": f"package:rocm-sdk@{target}", "index": "target"})
    return found


def _source_mirror(ctx: ActionContext, out: Path) -> list[dict[str, Any]]:
    """Every pinned .deb the release was built from, as ``sources/sha256/<digest>``: published and signed with
    the release, so a pin the archive no longer serves can still be fetched (``CAIRN_SOURCE_MIRROR``)."""
    found = []
    for dep in sorted(d for d in ctx.deps if d.startswith("fetch:deb:")):
        debs = sorted(ctx.deps[dep].glob("*.deb"))
        if len(debs) != 1:
            continue
        sha = file_sha256(debs[0])  # the fetch checked it against the pin; the name is what the bytes are
        path = f"sources/sha256/{sha}"
        _link(debs[0], out / "files" / path)
        found.append({"path": path, "kind": "source", "sha256": sha, "content_type": "application/vnd.debian.binary-package",
                      "recipe": dep})
    return found


def _partial(ctx: ActionContext, family: str) -> dict[str, list[str]]:
    """Target → the expansion libraries the family's libraries wheel ships without that target's code, as
    the wheel's own audit recorded them (a cell with any is *partial*: shown, never called complete)."""
    libraries = f"package:rocm-sdk-libraries@{family}"
    tree = ctx.deps.get(libraries)
    if tree is None or not (tree / REPORT_FILE).is_file():
        return {}
    partial = WheelReport.read(tree, f"rebuild it: cairn build --only {libraries}").partial()
    return {t: sorted(partial_name(p) for p in paths) for t, paths in sorted(partial.items())}


def _engine_needs(ctx: ActionContext, project: str, family: str) -> set[str] | None:
    """The sonames an engine's own ELFs list as DT_NEEDED (its package's report, ``cairn.wheels.engine``), or
    None for anything else — a framework or an engine packaged before the report recorded them: such a cell keeps
    every partial library of its family, since nothing says which of them it loads."""
    tree = ctx.deps.get(f"package:{project}@{family}")
    if tree is None or not (tree / "report.json").is_file():
        return None
    report = json.loads((tree / "report.json").read_text())
    return set(report["needed"]) if report.get("part") == "engine" and "needed" in report else None


def _needed(partial: str, needs: set[str]) -> bool:
    """Whether a partial entry (``librccl.so.1``, ``rocblas kernel files``: ``partial_name``) is a library the
    engine loads: its soname among the engine's DT_NEEDED, or, for kernel files, their library's."""
    if partial.endswith(" kernel files"):
        owner = partial.removesuffix(" kernel files").lower()
        return any(n.lower().startswith(f"lib{owner}.so") for n in needs)
    return partial in needs


def _wheel_recipes(ctx: ActionContext) -> dict[str, str]:
    """Wheel filename → the package action that built it (recorded as the provenance recipe)."""
    found = {}
    for dep, tree in ctx.deps.items():
        if dep.startswith(("package:", "mirror:")):
            for wheel in Path(tree).glob("wheels/*.whl"):
                found[wheel.name] = dep
    return found


def _write_gates(ctx: ActionContext, gates_dir: Path, images: dict[str, list[dict[str, str]]]) -> None:
    """One JSON per planned gate: its result (matched to cells by image digest), or ``not-run`` with the
    reason it could not run here (matched by gfx target and the image's framework)."""
    inputs = ctx.action.inputs
    frameworks = inputs["image_frameworks"]
    gates_dir.mkdir(parents=True, exist_ok=True)
    required = sorted({g for gs in inputs["release"]["required_gates"].values() for g in gs})
    seen: set[tuple[str, str, str]] = set()  # gate, target, framework
    for gate_id in inputs["planned_gates"]:
        ref = parse_gate_id(gate_id)
        gate, image, target = ref.gate, ref.image, ref.target
        seen.add((gate, target, frameworks.get(image, "")))
        tree = ctx.deps.get(gate_id)
        if tree is not None and (tree / "gate.json").is_file():
            result = GateResult.read(tree / "gate.json")
            if _write_cell_verdicts(gates_dir, result, image, target):
                continue
            status, reason = result.status, result.reason
            if status == "not-run" and not reason:
                reason = "not-run: the gate recorded no reason"
            record = {"gate": gate, "status": status, "reason": reason, "image_digest": result.digest,
                      "evidence": result.evidence}
            if not record["image_digest"]:  # an image blocked when it ran: matched to cells by target and framework
                record.update({"gfx_target": target, "framework": frameworks.get(image, "")})
        else:
            why = inputs["not_built"].get(gate_id, "no result")
            record = {"gate": gate, "status": "not-run", "reason": f"not-run: {why}", "gfx_target": target,
                      "framework": frameworks.get(image, ""), "image_digest": "", "evidence": {"image": image}}
        _write_json(gates_dir / f"{gate}--{image}@{target}.json", record)
    # an image the plan has but this host cannot build: every required gate is not run, with the reason
    for image_id in inputs["planned_images"]:
        image, target = parse_action_id(image_id).name, parse_action_id(image_id).where
        framework = frameworks.get(image, "")
        why = inputs["not_built"].get(image_id)
        if not why:
            continue
        for gate in required:
            if (gate, target, framework) not in seen:
                seen.add((gate, target, framework))
                _write_json(gates_dir / f"{gate}--{image}@{target}.json",
                            {"gate": gate, "status": "not-run", "reason": f"not-run: image not built: {why}",
                             "gfx_target": target, "framework": framework, "image_digest": ""})
    # a framework whose wheels cannot be had (no wheel for the release's Python): its cells' gates say why
    for name, why in sorted(inputs.get("blocked_frameworks", {}).items()):
        for targets in inputs["families"].values():
            for target in targets:
                for gate in required:
                    _write_json(gates_dir / f"{gate}--{name}@{target}.json",
                                {"gate": gate, "status": "not-run", "reason": f"not-run: {why['reason']}",
                                 "gfx_target": target, "framework": name, "image_digest": ""})
    for targets in inputs["families"].values():
        for target in targets:
            for gate in required:
                if not any(g == gate and t == target for g, t, _f in seen):
                    reason = _unplanned_reason(inputs, gate, target)
                    _write_json(gates_dir / f"{gate}--none@{target}.json",
                                {"gate": gate, "status": "not-run", "reason": reason, "gfx_target": target, "image_digest": ""})


def _write_cell_verdicts(gates_dir: Path, result: GateResult, image: str, target: str) -> bool:
    """A target-wide gate's verdict per cell (user-install: ``evidence["cells"]``, by framework), one record each,
    matched to that framework's cells of the target: the JAX cell's failure is not the llama.cpp cell's. False when
    the result has no such split (it is then one record for every cell of the target)."""
    cells = result.evidence.get("cells")
    if not isinstance(cells, dict) or not cells:
        return False
    for framework, verdict in sorted(cells.items()):
        runs = [r for r in result.evidence.get("runs", []) if r.get("cell") == verdict.get("cell")]
        _write_json(gates_dir / f"{result.gate}--{image}@{target}--{safe_name(framework, gates_dir, 'framework')}.json",
                    {"gate": result.gate, "status": verdict["status"], "reason": verdict["reason"], "image_digest": "",
                     "gfx_target": target, "framework": framework, "evidence": {"cell": verdict.get("cell", ""), "runs": runs}})
    return True


def _unplanned_reason(inputs: Mapping[str, Any], gate: str, target: str) -> str:
    """Why a required gate has no action for ``target`` — what the plan lacked, never a guess about the host
    (whether this host has a GPU matters only to a GPU gate that was planned, and that gate says so itself)."""
    images = sorted(i for i in inputs["planned_images"] if i.endswith(f"@{target}"))
    if not images:
        return f"not-run: no {gate} gate was planned for {target}: the plan has no image for {target}"
    listing = [i for i in images if gate in inputs.get("image_gates", {}).get(i, [])]
    names = ", ".join(parse_action_id(i).name for i in images)
    if not listing:
        return f"not-run: no {gate} gate was planned for {target}: no image recipe for it lists the {gate} gate ({names})"
    return f"not-run: no {gate} gate was planned for {target}: its images ({names}) are not pushed to a registry"


def _link(src: Path, dest: Path) -> None:
    """Hard-link a store file into the output (never modified; the store shares files), copy across devices."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


# the action kinds this stage adds, and what runs each (declared in cairn.stages)
RUNNERS = {
    "bundle": run_bundle,
}
