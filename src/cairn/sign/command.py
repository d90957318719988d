"""``cairn keys init``: create the release key set outside the repository and the public root it pins."""

from __future__ import annotations

import argparse
from pathlib import Path

from tuf.api.serialization.json import JSONSerializer

from cairn.io import atomic_write, output_place
from cairn.sign.keys import default_keys_dir, init_keys, make_root


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    init = sub.add_parser("init", help="generate TUF, provenance and image keys and the signed root.json")
    init.add_argument("--dir", type=Path, default=None, help="where private keys go (default ~/.config/cairn/keys or $CAIRN_KEYS)")
    init.add_argument("--root-out", type=Path, default=None, help="also write the public root.json here (e.g. publish/root.json)")
    init.add_argument("--force", action="store_true", help="replace an existing key set")


def run(args: argparse.Namespace) -> int:
    directory = args.dir or default_keys_dir()
    if args.root_out:
        output_place(args.root_out)  # before any key is made: a key set whose root went nowhere is half a job
    keys = init_keys(directory, force=args.force)
    root = make_root(keys).to_bytes(JSONSerializer(compact=False))
    atomic_write(directory / "root.json", root)
    print(f"keys written to {directory} (private: mode 0600; keep root-*.pem offline)")
    if args.root_out:
        atomic_write(args.root_out, root)
        print(f"public TUF root written to {args.root_out}")
    return 0
