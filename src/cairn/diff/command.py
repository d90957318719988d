"""``cairn diff A B [--json]``: compare two releases.

Each of A and B is a release manifest (path or name, e.g. ``default``), a release bundle directory, or a
published repository, a directory or ``s3://bucket/prefix`` (``@VERSION`` when it stages more than one). Only what
both inputs record is compared; the rest is listed as not compared. Exit 0 whether or not they differ
(``identical`` in the JSON says which); bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json

from cairn.cli_options import add_json
from cairn.diff.compare import compare
from cairn.diff.views import open_view
from cairn.matrix.diff_text import render


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the older release: manifest (path or name), bundle dir, or repository DIR|s3://B/P[@VERSION]")
    parser.add_argument("b", metavar="B", help="the newer release, same forms")
    add_json(parser, "print the comparison as JSON (schema cairn.diff/v1)")


def run(args: argparse.Namespace) -> int:
    diff = compare(open_view(args.a), open_view(args.b))
    if args.json:
        print(json.dumps(diff, indent=2, ensure_ascii=False))
    else:
        print("\n".join(render(diff)))
    return 0
