"""Before a framework image is built: does every DT_NEEDED of its wheels' native code resolve in the image?

A framework image is its parent (the runtime image: base OS + the release's core SDK) plus wheels from the
family index. ``linkage:<image>@<family>`` lays those wheels' files over the parent image's filesystem
exactly where pip installs them, with the environment the image will have, and resolves every DT_NEEDED
of every ELF file they add the way the static gate (and ld.so) does: RUNPATH with $ORIGIN, LD_LIBRARY_PATH,
/etc/ld.so.conf.d, the default directories.

When a library is missing — JAX 0.10.0's ROCm 7 pjrt links rocprofiler-sdk and roctracer, which the
release's ROCm 7.2.4 does not ship — the image is *blocked*, naming the sonames: the image action writes
``blocked.json`` with the reason instead of building 2 GB that cannot load, its push and gates pass the
reason on (every gate of the image records "not-run: image blocked: …"), and the matrix shows it in the
image's cells. This is decided when the action runs, not when the plan is made: the sonames are facts of
the fetched bytes, which planning never reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cairn import digest
from cairn.audit.imagefs import ImageFS, image_env, unresolved
from cairn.containers import wheels as index_wheels
from cairn.execute.runners import ActionContext
from cairn.formats.oci import read_image
from cairn.plan.graph import Action

LAYOUT = 1
BLOCKED = "blocked.json"
REPORT = "linkage.json"


def code_digest() -> str:
    """sha256 of the code that decides a verdict (this module, the static gate's resolver, the image reader):
    a cached verdict is reused only while it is unchanged."""
    return digest.stage_code_digest("linkage")


def plan_linkage(image: str, family: str, rocm: str, parent_image: str, index: str, wheels: list[str],
                 env: dict[str, str], site: str, python: str) -> Action:
    """``linkage:<image>@<family>``: once per family — every target's runtime image has the same files. ``python``:
    the image's Python, which picks a project's file where the index serves one per Python (numpy, for the
    engine's requirements)."""
    action_id = f"linkage:{image}@{family}"
    return Action(action_id, "linkage", {"layout": LAYOUT, "code": code_digest(), "image": image, "family": family, "rocm": rocm,
                                         "parent_image": parent_image, "index": index, "wheels": list(wheels),
                                         "env": dict(sorted(env.items())), "site": site, "python": python},
                  (parent_image, index), family=family)


def check(parent_layout: Path, wheels: list[Path], env: dict[str, str], site: str,
          cache: Path | None = None) -> tuple[list[tuple[str, str]], int]:
    """(unresolved (path, soname) pairs, ELF files checked) for ``wheels`` installed over the parent image;
    ``cache``: where layer scans are kept (``cairn.audit.layers``)."""
    manifest, config, _ = read_image(parent_layout)
    fs = ImageFS.from_layout(parent_layout, manifest, cache)
    added: list[str] = []
    for wheel in wheels:
        added += fs.add_wheel(wheel, site)
    elves = fs.elf_files()  # once: it sorts every node of the image, and a framework's wheels add thousands of files
    checked = sum(1 for p in added if p in elves)
    return unresolved(fs, {**image_env(config), **env}, added), checked


def reason(missing: list[tuple[str, str]], rocm: str, site: str) -> str:
    """One line a user can act on: which sonames, needed by which files, are not in the image."""
    sonames = sorted({lib for _, lib in missing})
    by_file: dict[str, list[str]] = {}
    for path, lib in missing:
        by_file.setdefault(path.removeprefix(site + "/"), []).append(lib)
    files = "; ".join(f"{path} needs {', '.join(libs)}" for path, libs in sorted(by_file.items()))
    return (f"{len(sonames)} libraries its wheels link are not in the release's ROCm {rocm} image: "
            f"{', '.join(sonames)} ({files})")


def run_linkage(ctx: ActionContext) -> None:
    inputs = ctx.action.inputs
    paths = []
    for project in inputs["wheels"]:
        _pinned, path = index_wheels.resolve(ctx.deps[inputs["index"]], inputs["family"], project, inputs["python"])
        paths.append(path)
    missing, checked = check(ctx.deps[inputs["parent_image"]] / "oci", paths, inputs["env"], inputs["site"], ctx.layer_scans)
    record = {"schema": "cairn.linkage/v1", "image": inputs["image"], "family": inputs["family"],
              "elf_files_checked": checked, "unresolved": [{"file": f, "needs": lib} for f, lib in missing],
              "missing_sonames": sorted({lib for _, lib in missing}),
              "blocked": reason(missing, inputs["rocm"], inputs["site"]) if missing else ""}
    ctx.log.write(f"linkage: {checked} ELF files of {len(paths)} wheels; "
                  + (record["blocked"] if missing else "every DT_NEEDED resolves") + "\n")
    (ctx.out / REPORT).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def blocked_by(linkage_tree: Path) -> str:
    """The linkage action's verdict: "" when the image can be built, else why not."""
    return str(json.loads((linkage_tree / REPORT).read_text()).get("blocked", ""))


def image_blocked(image_tree: Path) -> str:
    """Why an image action built no image ("" when it built one)."""
    marker = image_tree / BLOCKED
    return str(json.loads(marker.read_text())["reason"]) if marker.is_file() else ""


def write_blocked(out: Path, record: dict[str, Any]) -> None:
    (out / BLOCKED).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
