"""``cairn image diff A B [--json]`` and ``cairn image list [--store DIR] [--json]``.

``diff`` takes two OCI layouts (or two store trees holding ``oci/``) and names the first layer and file
that differ; exit 1 when they differ. ``list`` shows every image of the store's last build with its
digest, tags and size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cairn.containers.diff import diff_layouts, summary_line
from cairn.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="image_command", required=True)
    diff = sub.add_parser("diff", help="name the layer and file where two image builds differ")
    diff.add_argument("a", type=Path)
    diff.add_argument("b", type=Path)
    diff.add_argument("--json", action="store_true")
    listing = sub.add_parser("list", help="images of the store's last build")
    listing.add_argument("--store", type=Path, default=Path(".cairn"))
    listing.add_argument("--json", action="store_true")


def _layout(path: Path) -> Path:
    for candidate in (path, path / "oci"):
        if (candidate / "index.json").is_file():
            return candidate
    raise InputError(path, "not an OCI layout", "give a directory with index.json or a store tree with oci/")


def images(store: Path) -> list[dict]:
    build = json.loads((store / "last-build.json").read_text())
    found = []
    for action_id, info in sorted(build["actions"].items()):
        if action_id.startswith("image:") and info.get("output"):
            record = json.loads((store / "trees" / info["output"] / "image.json").read_text())
            record["tree"] = str(store / "trees" / info["output"])
            found.append(record)
    return found


def run(args: argparse.Namespace) -> int:
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
    found = images(args.store)
    if args.json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return 0
    table = Table(title="images")
    for column in ("image", "target", "digest", "tags", "MB"):
        table.add_column(column, overflow="fold")
    for r in found:
        size = sum(x["size"] for x in r["layers"]) / 1e6
        table.add_row(r["name"], r.get("target", ""), r["digest"], ", ".join(r["tags"]), f"{size:.1f}")
    console.print(table)
    return 0
