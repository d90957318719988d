"""``cairn keys init`` and ``cairn keys rotate-root``: the release key set outside the repository, and its root."""

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
    rotate = sub.add_parser("rotate-root", help="replace the root keys: a new root version signed by the old root keys and the new ones",
                            description="replace the root keys: a new root version signed by the old root's threshold and the "
                                        "new keys, so clients that trust the old root follow to the new one")
    rotate.add_argument("--dir", type=Path, default=None, help="the key set (default ~/.config/cairn/keys or $CAIRN_KEYS); "
                        "needs the old root keys present")
    rotate.add_argument("--repo", action="append", default=[], metavar="REPOSITORY",
                        help="also upload the new root to this repository (directory or s3://bucket/prefix; repeatable)")
    rotate.add_argument("--root-out", type=Path, default=None, help="also write the new root.json here")


def run(args: argparse.Namespace) -> int:
    if args.keys_command == "rotate-root":
        return _rotate(args)
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


def _rotate(args: argparse.Namespace) -> int:
    from cairn.sign.keys import rotate_root
    from cairn.sign.refresh import upload_roots

    directory = args.dir or default_keys_dir()
    if args.root_out:
        output_place(args.root_out)
    old, new = rotate_root(directory)
    print(f"root rotated in {directory}: version {old.signed.version} → {new.signed.version}, signed by "
          f"{len(new.signatures) - 3} old and 3 new root keys; the old root keys are in {directory / 'retired'} "
          "— destroy them once every repository serves the new root")
    if args.root_out:
        atomic_write(args.root_out, new.to_bytes(JSONSerializer(compact=False)))
        print(f"new root written to {args.root_out}")
    for repo in args.repo:
        uploaded = upload_roots(repo, directory)
        print(f"{repo}: uploaded root version(s) {', '.join(map(str, uploaded)) or 'none (already served)'}")
    if not args.repo:
        print("upload it to each repository: cairn refresh REPOSITORY (or the next cairn publish) serves it")
    return 0
