"""``cairn targets [FAMILY] [--json]``: show the registry, so nobody has to read targets.toml by hand."""

from __future__ import annotations

import argparse
import json

from cairn.cli_options import add_json
from cairn.errors import InputError
from cairn.model.targets import load_registry


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("family", nargs="?", help="a family or target to expand")
    add_json(parser, "machine-readable output")


def run(args: argparse.Namespace) -> int:
    registry = load_registry()
    if args.family:
        try:
            members = registry.expand(args.family)
        except KeyError as exc:
            raise InputError("targets", str(exc.args[0])) from None
        rows = [registry.targets[t] for t in members]
    else:
        rows = list(registry.targets.values())
    if args.json:
        print(json.dumps([
            {"name": t.name, "products": list(t.products), "families": list(registry.families_of(t.name)),
             "features": list(t.features), "generic": t.generic, "kfd_version": t.kfd_version,
             "exclude_projects": list(t.exclude_projects)}
            for t in rows
        ], indent=2))
        return 0
    for t in rows:
        fams = ", ".join(registry.families_of(t.name)[1:])
        print(f"{t.name:<8} {', '.join(t.products)[:48]:<48} {fams}")
    return 0
