"""``cairn split PATH --target T --out DEST [--exact] [--json]``: keep only the device code that runs on one target
(``--exact``: only the code objects T names).

PATH is one ELF file (``.so``) or an install tree. Exit codes: 0 written, 2 bad input (nothing written).
The JSON document is ``SplitReport.to_json()`` for a file, ``TreeSplitReport.to_json()`` for a tree
(docs/audit.md, "Splitting per target").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cairn.audit.split import SplitReport, split_file
from cairn.audit.split_tree import TreeSplitReport, split_tree
from cairn.cli_options import add_json


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="ELF file with a .hip_fatbin, or an install tree")
    parser.add_argument("--target", required=True, metavar="T", help="device target ID to keep, e.g. gfx1100 or gfx90a:xnack-")
    parser.add_argument("--exact", action="store_true",
                        help="keep only the code objects --target names (gfx1151 alone, not also a gfx11-generic entry)")
    parser.add_argument("--out", required=True, metavar="DEST", help="file (or existing directory) for a file; new directory for a tree")
    add_json(parser, "print the report as JSON")


def run(args: argparse.Namespace) -> int:
    path = Path(args.path)
    report: SplitReport | TreeSplitReport
    report = split_tree(path, args.out, args.target, exact=args.exact) if path.is_dir() \
        else split_file(path, args.out, args.target, exact=args.exact)
    if args.json:
        print(json.dumps(report.to_json(), sort_keys=True, separators=(",", ":")))
    elif isinstance(report, TreeSplitReport):
        for library in report.libraries:
            _show_file(library)
        print(f"data files: {len(report.dropped)} of other targets dropped, {report.kept_data} kept; "
              f"{report.copied} other files copied")
        print(f"tree: {_mb(report.bytes_before)} -> {_mb(report.bytes_after)} in {report.seconds:.1f} s -> {report.dest}")
    else:
        _show_file(report)
    return 0


def _show_file(report: SplitReport) -> None:
    out = sys.stdout
    out.write(f"{report.dest} (from {report.source}, {len(report.bundles)} bundles, {report.seconds:.1f} s)\n")
    out.write(f"  targets before: {' '.join(report.targets_before) or '-'}\n")
    out.write(f"  targets after:  {' '.join(report.targets_after) or '-'}\n")
    out.write(f"  device code in .hip_fatbin: {_mb(report.device_bytes_before)} -> {_mb(report.device_bytes_after)} "
              f"(file {report.file_size_before} -> {report.file_size} bytes, {report.layout}"
              + (f": {report.layout_note}" if report.layout_note else "") + ")\n")
    if report.host_only_bundles:
        shown = ", ".join(f"#{i}" for i in report.host_only_bundles[:8])
        more = f" +{len(report.host_only_bundles) - 8}" if len(report.host_only_bundles) > 8 else ""
        out.write(f"  note: bundles {shown}{more} had no code for {report.target} and keep only their host entry\n")


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
