"""``cairn verify PATH|URL|IMAGE``: check a repository, a file or an image against the pinned TUF root."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cairn.cli_options import add_json
from cairn.sign.cosign import verify_image
from cairn.sign.refresh import expiry_line, expiry_of
from cairn.sign.verify import cache_dir_for, load_pinned_root, verify_file, verify_repository


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", help="a repository URL/dir, a downloaded file (wheel, matrix.json, …) or an image repo@sha256:…")
    parser.add_argument("--repo", default=None, help="repository the file or image was published to (for a file or image)")
    parser.add_argument("--root", type=Path, default=None, help="pinned root.json (default: publish/root.json or $CAIRN_TUF_ROOT)")
    parser.add_argument("--cache", type=Path, default=None, help="trusted-metadata cache (default ~/.cache/cairn/tuf/<repo>)")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    root = load_pinned_root(args.root)
    if "@sha256:" in args.what and not Path(args.what).exists():
        result = verify_image(args.what, args.repo or "", root, args.cache)
        print(json.dumps(result, indent=1) if args.json else f"verified image {args.what}: {result['target']}, cosign signature ok")
        return 0
    if args.repo and Path(args.what).is_file():
        target = verify_file(args.repo, root, Path(args.what), args.cache)
        print(json.dumps({"file": args.what, "target": target}) if args.json else f"verified {args.what}: signed target {target} with provenance")
        return 0
    report = verify_repository(args.what, root, args.cache)

    expires = expiry_of(args.cache or cache_dir_for(report.repository))  # the client's trusted metadata, just verified
    if args.json:
        print(json.dumps({**report.to_dict(), "expires": {role: f"{t:%Y-%m-%dT%H:%M:%SZ}" for role, t in expires.items()},
                          "time_left": expiry_line(expires)}, indent=1))
    else:
        print(f"verified {report.repository}: timestamp v{report.timestamp_version}, {len(report.checked)} object(s) match their signatures")
        print(expiry_line(expires))
    return 0
