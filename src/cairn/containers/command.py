"""``cairn image diff A B [--json]``, ``cairn image list [--store DIR] [--json]``, ``cairn image dockerfile``.

``diff`` takes two OCI layouts (or two store trees holding ``oci/``) and names the first layer and file
that differ; exit 1 when they differ. ``list`` shows every image of the store's last build with its
digest, tags and size, and a blocked image as blocked with its reason (``--json``: ``"blocked": reason``). ``dockerfile IMAGE@TARGET`` prints the rendered Dockerfile: the one kept with a
built image, or — for an image this release cannot build — the one it would build, rendered from the
plan and the store (parent digest, wheels of the index), headed by why it is blocked (exit 1).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cairn.cli_options import add_json, add_store
from cairn.containers.diff import diff_layouts, summary_line
from cairn.errors import CairnError, InputError, did_you_mean
from cairn.model.json_reader import load_object
from cairn.paths import describe_store
from cairn.plan.ids import parse_action_id
from cairn.plan.planner import Pipeline
from cairn.store.report import read_actions


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="image_command", required=True)
    diff = sub.add_parser("diff", help="name the layer and file where two image builds differ")
    diff.add_argument("a", type=Path)
    diff.add_argument("b", type=Path)
    add_json(diff)
    dockerfile = sub.add_parser("dockerfile", help="the rendered Dockerfile of IMAGE@TARGET (built or blocked)")
    dockerfile.add_argument("image", help="e.g. runtime@gfx90a, sglang@gfx90a")
    dockerfile.add_argument("manifest", nargs="?", help="release manifest (default: the default release)")
    add_store(dockerfile)
    listing = sub.add_parser("list", help="images of the store's last build")
    add_store(listing)
    add_json(listing)


def _layout(path: Path) -> Path:
    for candidate in (path, path / "oci"):
        if (candidate / "index.json").is_file():
            return candidate
    raise InputError(path, "not an OCI layout", "give a directory with index.json or a store tree with oci/")


def images(store: Path) -> list[dict]:
    """Every image of the store's last build: a built one with its record (``image.json``), a blocked one — at
    planning, or by its linkage check when it ran (``blocked.json``, no image) — as ``{"blocked": reason}``, so
    one blocked image lists as blocked instead of stopping the listing with exit 2."""
    # lazy: cairn.audit, elftools, cairn.remote, 103 ms at start-up (python -X importtime)
    from cairn.containers.linkage import BLOCKED

    # lazy: cairn.model, 8 ms at start-up (python -X importtime)
    from cairn.model.records import IMAGE_FILE, ImageRecord

    found = []
    for action_id, info in sorted(read_actions(store).items()):
        ref = parse_action_id(action_id)
        if ref.kind != "image":
            continue
        name, target = ref.name, ref.where
        tree = store / "trees" / info.output if info.output else None
        if tree is not None and (tree / BLOCKED).is_file():
            marker = load_object(tree / BLOCKED, "blocked-image record", f"rebuild it (cairn build --only {action_id})")
            found.append({"name": name, "target": str(marker.get("target") or target), "blocked": str(marker.get("reason", "")),
                          "tree": str(tree)})
            continue
        if tree is None:
            if info.status == "blocked":
                found.append({"name": name, "target": target, "blocked": info.detail})
            continue
        record = ImageRecord.read(tree / IMAGE_FILE, f"rebuild it (cairn build --only {action_id})")
        found.append({**record.to_json(), "tree": str(tree)})
    return found


def show_dockerfile(image: str, manifest_arg: str | None, store: Path, pipeline: Pipeline) -> int:
    # lazy: jinja2, packaging, cairn.containers, 21 ms at start-up (python -X importtime)
    from cairn.containers import wheels as index_wheels
    from cairn.containers.render import render_dockerfile

    # lazy: cairn.remote, cairn.model, cairn.sources, 46 ms at start-up (python -X importtime)
    from cairn.model.records import PUSH_FILE, PushRecord
    from cairn.plan.prepare import load, make_plan

    name, _, target = image.partition("@")
    manifest, registry = load(manifest_arg)
    family = next((f for f in manifest.release.families if target in registry.expand(f)), "")
    if not target or not family:
        targets = [t for f in manifest.release.families for t in registry.expand(f)]
        hint = did_you_mean(target, targets, "targets") if target else f"write IMAGE@TARGET, e.g. runtime@{targets[0]}"
        raise InputError(image, f"no target '{target}' in the release's families", hint)
    actions = make_plan(manifest, registry, [family], stages=pipeline.stages).by_id()
    action = actions.get(f"image:{name}@{target}")
    if action is None:
        raise InputError(image, "the plan has no such image", "see `cairn plan` for the image:* actions")

    outputs = {k: v.output for k, v in read_actions(store, missing_ok=True).items() if v.output}
    if outputs.get(action.id) and (store / "trees" / outputs[action.id] / "Dockerfile").is_file():
        print((store / "trees" / outputs[action.id] / "Dockerfile").read_text(), end="")
        return 0
    inputs = action.inputs
    parent = inputs["parent"]
    push = store / "trees" / str(outputs.get(parent)) / PUSH_FILE
    pushed = PushRecord.read(push, f"rebuild it (cairn build --only {parent})") if outputs.get(parent) and push.is_file() else None
    wheels = []
    for project in inputs["wheels"]:
        try:
            wheels.append(index_wheels.resolve(store / "trees" / str(outputs.get(inputs["index"])), family, project,
                                               inputs.get("python", ""))[0].to_json())
        except (CairnError, OSError):
            wheels.append({"filename": f"{project} (not in {inputs['index'] or 'the index'})", "sha256": "—"})
    text = render_dockerfile(inputs, pushed.repo if pushed and not pushed.blocked else f"<repo of {parent}>",
                             pushed.digest if pushed and not pushed.blocked else f"<digest of {parent}>", wheels)
    status = f"BLOCKED: {action.blocked}" if action.blocked else "not built yet in this store"
    print(f"# {status}\n" + text, end="")
    return 1


TAKES_PIPELINE = True


def run(args: argparse.Namespace, pipeline: Pipeline) -> int:
    console = Console()
    if args.image_command == "diff":
        report = diff_layouts(_layout(args.a), _layout(args.b))
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True, default=str))
        else:
            console.print(summary_line(report))
            for item in report["differences"]:
                console.print(f"{item['where']}: {str(item.get('a'))[:80]} ≠ {str(item.get('b'))[:80]}")
                for f in item.get("files", [])[:10]:
                    console.print(f"  {item['where']}: {f['path']}: {', '.join(f['differs'])}")
        return 0 if report["identical"] else 1
    if args.image_command == "dockerfile":
        return show_dockerfile(args.image, args.manifest, args.store, pipeline)
    found = images(args.store)
    if args.json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return 0

    table = Table(title=f"images — {escape(describe_store(args.store))}", title_justify="left")
    for column in ("image", "target", "digest", "tags", "MB"):
        table.add_column(column, overflow="fold")
    for r in found:
        if "blocked" in r:
            table.add_row(escape(r["name"]), escape(str(r.get("target", ""))), "[red]blocked[/]", escape(r["blocked"]), "")
            continue
        size = sum(x["size"] for x in r["layers"]) / 1e6
        table.add_row(r["name"], str(r.get("target", "")), r["digest"], ", ".join(map(str, r["tags"])), f"{size:.1f}")
    console.print(table)
    return 0
