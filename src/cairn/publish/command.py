"""``cairn publish`` and ``cairn promote``: a release bundle to ``file://`` or ``s3://``, gated by channel."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from cairn.matrix.model import CHANNELS
from cairn.publish.backend import open_backend
from cairn.publish.bundle import load_bundle
from cairn.publish.publisher import load_root, promote, publish
from cairn.sign.keys import load_keys


def default_destination() -> str:
    """Without ``--to``: a local directory with exactly the bucket's layout (``.cairn/publish``)."""
    return os.environ.get("CAIRN_PUBLISH_TO") or Path(".cairn/publish").absolute().as_uri()


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", default=None, help="s3://bucket/prefix or file:///dir (default: .cairn/publish; endpoint from $CAIRN_S3_ENDPOINT)")
    parser.add_argument("--keys", type=Path, default=None, help="key directory (default ~/.config/cairn/keys or $CAIRN_KEYS)")
    parser.add_argument("--root", type=Path, default=None, help="signed root.json matching the keys (default: <keys>/root.json)")
    parser.add_argument("--channel", choices=CHANNELS, default=None)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="release bundle directory (bundle.json + files/ + gates/)")
    _common(parser)
    parser.add_argument("--stage-only", action="store_true", help="upload to staging/<version>/ and stop (promote later)")


def configure_promote(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", required=True, help="the staged release version to promote")
    parser.add_argument("--as", dest="as_version", default="", help="promote an rc as this final version (re-signs, never rebuilds)")
    _common(parser)


def _keys_and_root(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    keys = load_keys(args.keys)
    return keys, load_root(args.root or keys.directory / "root.json")


def _print(report, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    if as_json:
        print(json.dumps(report.to_dict(), indent=1, sort_keys=True))
        return
    print(f"{report.url}: release {report.version} → {report.channel or 'staging'} "
          f"({report.uploaded} uploaded, {report.skipped} already present, timestamp v{report.timestamp_version})")
    for cell in report.promoted:
        print(f"  promoted  {cell}")
    for cell, reasons in report.held.items():
        print(f"  held      {cell}: {'; '.join(reasons)}")


def run(args: argparse.Namespace) -> int:
    keys, root = _keys_and_root(args)
    bundle = load_bundle(args.bundle)
    backend = open_backend(args.to or default_destination())
    report = publish(bundle, backend, keys, root, channel=args.channel, stage_only=args.stage_only,
                     log=(lambda _: None) if args.json else print)
    _print(report, args.json)
    return 0


def run_promote(args: argparse.Namespace) -> int:
    keys, root = _keys_and_root(args)
    backend = open_backend(args.to or default_destination())
    report = promote(backend, keys, root, args.version, args.channel or "dev", as_version=args.as_version,
                     log=(lambda _: None) if args.json else print)
    _print(report, args.json)
    return 0
