"""``cairn check [MANIFEST...] [--json]``: validate manifests (all of ``manifests/releases`` by default).

Prints one line per manifest; the first problem in a bad one is ``file:line:col: what — fix``, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cairn.cli_options import add_json
from cairn.errors import InputError
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.paths import releases_dir


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifests", nargs="*", type=Path, help="manifest files (default: manifests/releases/*.toml)")
    add_json(parser, "machine-readable output")


def run(args: argparse.Namespace) -> int:
    registry = load_registry()
    paths = args.manifests or sorted(releases_dir().glob("*.toml"))
    results = []
    for path in paths:
        try:
            manifest = load_manifest(path, registry)
        except InputError as exc:
            results.append({"manifest": str(path), "ok": False, "error": str(exc)})
            continue
        results.append({"manifest": str(path), "ok": True, "release": manifest.release.name,
                        "version": manifest.release.version, "components": len(manifest.components),
                        "sha256": manifest.digest})
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            if r["ok"]:
                print(f"ok   {r['manifest']}: {r['release']} {r['version']}, {r['components']} components")
            else:
                print(r["error"], file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 2
