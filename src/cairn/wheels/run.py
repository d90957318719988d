"""The wheels stage's runners: write a package's wheel, a family's index, fetch a pinned sdist.

``cairn.wheels.plan`` decides each action's exact inputs; ``run_package`` dispatches on the inputs'
``part`` to the module that writes that kind of wheel (cairn.wheels.sdk, frameworks, engine), and
``run_index`` collects a family's wheels into its simple index.
"""

from __future__ import annotations

import json
from pathlib import Path

from cairn.errors import CairnError
from cairn.execute.runners import ActionContext
from cairn.sources.pypi import download_pinned
from cairn.wheels import closure, device, engine, frameworks, graft, index, sdk, variants
from cairn.wheels.wheelfile import read_metadata


def run_package(ctx: ActionContext) -> None:
    inputs = dict(ctx.action.inputs)
    part = inputs["part"]
    if part == "meta":
        sdk.build_meta_wheel(ctx.out, inputs)
        return
    if part == "meta-target":
        sdk.build_target_meta_wheel(ctx.out, inputs)
        return
    if part == "hip-extension":
        frameworks.run_hip_extension(ctx)
        return
    if part == "framework":
        frameworks.run_source(ctx)
        return
    if part == "engine":
        engine.run_engine_wheel(ctx)
        return
    if part == "device":
        device.build_device_wheel(ctx.out, ctx.deps[f"package:rocm-sdk-libraries@{inputs['family']}"], inputs, ctx.log)
        return
    tree = ctx.deps["assemble:sdk"]
    owned = sdk.expansion_paths(tree_path for dep, tree_path in ctx.deps.items() if dep.startswith("build:"))
    core = ctx.deps.get("package:rocm-sdk-core")
    inherited = {}
    if core is not None and (core / "report.json").is_file():
        inherited = {soname: entry["file"] for soname, entry in
                     json.loads((core / "report.json").read_text()).get("grafted", {}).items()}
    with sdk.scratch_dir(ctx.out) as unpacked:
        debs = []
        for pin in inputs.get("grafts", []):
            found = sorted(ctx.deps[f"fetch:deb:{pin['package']}"].glob("*.deb"))
            if len(found) != 1:
                raise CairnError(f"{ctx.action.id}: fetch:deb:{pin['package']} holds {len(found)} .deb files, expected one")
            debs.append((pin, found[0]))
        available = graft.unpack(debs, Path(unpacked), ctx.log)
        sdk.build_sdk_wheel(ctx.out, part, tree, inputs, ctx.log, expansion_owned=owned,
                            family=inputs.get("family", ""), targets=tuple(inputs.get("targets", ())),
                            provided=sdk.provided_by(core) if core else (), grafts=available, inherited=inherited)


def run_index(ctx: ActionContext) -> None:
    """Collect the family's wheels from package/mirror outputs; mirrors only where the audit covers the family."""
    family = ctx.action.inputs["family"]
    wheels = []
    skipped = []
    for dep in sorted(ctx.deps):
        tree = ctx.deps[dep]
        report = json.loads((tree / "report.json").read_text()) if (tree / "report.json").is_file() else {}
        if report.get("part") == "mirror" and not report["audit"]["families"].get(family, {}).get("covered"):
            skipped.append({"action": dep, "reason": f"audit: does not cover every target of {family}"})
            continue
        wheels += sorted((tree / "wheels").glob("*.whl"))
    indexed = index.write_index(wheels, ctx.out, family)
    # the index installs by itself: every requirement of every wheel, for each Python it claims, from it alone
    served = [closure.Served.from_headers(variants.plain_filename(w.name), read_metadata(w))
              for w in {w.name: w for w in wheels}.values()]
    claims = [closure.Claim(c["python"], tuple(c["roots"]), c["every"], tuple(c.get("unchecked", ()))) for c in ctx.action.inputs["claims"]]
    closure.check(family, served, claims)
    summary = {"schema": "cairn.index/v1", "family": family, "files": [i.filename for i in indexed], "skipped": skipped}
    (ctx.out / family / "index-report.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def run_fetch_sdist(ctx: ActionContext) -> None:
    """One pinned sdist from pip's configured index, its sha256 checked before anything unpacks or builds it."""
    fields = ctx.action.inputs["source"]["pypi"]
    download_pinned(fields["name"], fields["filename"], fields["sha256"], ctx.out, ctx.log, pinned_by="the recipe")


# the action kinds this stage adds, and what runs each (declared in cairn.stages)
RUNNERS = {
    "package": run_package,
    "mirror": frameworks.run_mirror,
    "index": run_index,
    "fetch-sdist": run_fetch_sdist,
}
