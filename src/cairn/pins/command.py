"""``cairn pins check|refresh MANIFEST [--json]`` and ``cairn pins lock RECIPE``.

``check`` compares every suite-pinned deb with the archive (exit 1 when a pin is stale, gone or mismatched);
``refresh`` rewrites stale pins to what the suite serves now and prints the diff for review; ``lock`` records
the full package set of a rootfs recipe (base image, build image).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cairn.cli_options import add_json
from cairn.errors import CairnError, InputError
from cairn.model.image_recipes import load_base
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.pins.model import check_pins
from cairn.pins.refresh import refresh_manifest
from cairn.plan.prepare import resolve_manifest_path
from cairn.sources.debian import suite_index


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["check", "refresh", "lock"], help="what to do")
    parser.add_argument("path", nargs="?", type=Path, help="manifest (check, refresh) or rootfs recipe (lock)")
    add_json(parser, "machine-readable output")


def run(args: argparse.Namespace) -> int:
    if args.action == "lock":
        return _lock(args)
    path = resolve_manifest_path(str(args.path) if args.path else None)
    registry = load_registry()
    manifest = load_manifest(path, registry)
    pins = check_pins(manifest, suite_index)
    if args.action == "check":
        return _report(path, pins, args.json)
    mismatched = [p for p in pins if p.status == "mismatch"]
    if mismatched:
        first = mismatched[0]
        raise CairnError(f"{first.package}={first.pinned} in {first.suite} has sha256 {first.offered_sha256[:12]}…, "
                         f"the manifest pins {first.sha256[:12]}… — the archive changed a published version; "
                         "find out why before re-pinning")
    gone = [p for p in pins if p.status == "gone"]
    if gone:
        raise CairnError(f"{gone[0].package} is no longer served by {gone[0].suite}: replace component "
                         f"{gone[0].component} by hand")

    stale = [p for p in pins if p.status == "stale"]
    diff = refresh_manifest(path, stale, lambda text: load_manifest(path, registry, text=text))
    if args.json:
        print(json.dumps({"manifest": str(path), "refreshed": [p.to_json() for p in stale], "diff": diff}, indent=2))
    else:
        print(diff or f"{path}: every pin is current")
    return 0


def _report(path: Path, pins: list, as_json: bool) -> int:  # type: ignore[type-arg]
    bad = [p for p in pins if p.status != "current"]
    if as_json:
        print(json.dumps({"manifest": str(path), "pins": [p.to_json() for p in pins], "ok": not bad}, indent=2))
        return 1 if bad else 0
    for pin in pins:
        line = f"{pin.status:9} {pin.component:24} {pin.package}={pin.pinned} ({pin.suite})"
        if pin.status != "current":
            line += f" — {pin.suite} offers {pin.offered or 'nothing'}"
        print(line)
    counts = {s: sum(p.status == s for p in pins) for s in ("current", "stale", "gone", "mismatch")}
    print(f"{path}: {len(pins)} deb pins — " + ", ".join(f"{n} {s}" for s, n in counts.items() if n), file=sys.stderr)
    if bad:
        print(f"propose new pins: cairn pins refresh {path}", file=sys.stderr)
    return 1 if bad else 0


def _lock(args: argparse.Namespace) -> int:
    # lazy: cairn.model, cairn.pins, cairn.containers, 15 ms at start-up (python -X importtime)
    from cairn.pins.lock import resolve, write_lock

    if args.path is None or args.path.suffix != ".toml":
        raise InputError(args.path or "RECIPE", "lock takes a rootfs recipe", "e.g. cairn pins lock recipes/containers/base.toml")
    recipe = load_base(args.path.parent.resolve(), args.path.stem)
    packages = resolve(recipe, sys.stderr)
    lock, added, removed = write_lock(args.path, packages)
    if args.json:
        print(json.dumps({"lock": str(lock), "packages": len(packages), "added": added, "removed": removed}, indent=2))
    else:
        print(f"{lock}: {len(packages)} packages ({len(added)} added, {len(removed)} removed)")
        for entry in added:
            print(f"+ {entry}")
        for entry in removed:
            print(f"- {entry}")
    return 0
