"""``cairn keys``: create the release key set and the public root it pins (``init``); replace the root keys
(``rotate-root``); make a GPU runner's key (``runner``) and trust it for some gates (``trust-runner``: the
signed runner list, ``cairn.sign.runners``); make a shared action cache writer's key (``cache-writer``), whose
public entry goes into the readers' trust list (``cairn.store.signing``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tuf.api.serialization.json import JSONSerializer

from cairn.errors import InputError
from cairn.io import atomic_write, output_place
from cairn.sign.keys import default_keys_dir, init_keys, load_keys, make_root, rotate_root
from cairn.sign.refresh import upload_roots
from cairn.sign.tuf import load_root


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    init = sub.add_parser("init", help="generate TUF, provenance and image keys and the signed root.json")
    init.add_argument("--dir", type=Path, default=None, help="where private keys go (default ~/.config/cairn/keys or $CAIRN_KEYS)")
    init.add_argument("--root-out", type=Path, default=None, help="also write the public root.json here (e.g. publish/root.json)")
    init.add_argument("--force", action="store_true", help="replace an existing key set")
    runner = sub.add_parser("runner", help="make a gate runner's signing key (on the runner; the private key stays there)")
    runner.add_argument("--out", type=Path, required=True, metavar="KEY_PEM", help="private key file; the public half goes beside it as .pub.json")
    runner.add_argument("--type", dest="keytype", choices=("ed25519", "ecdsa"), default="ed25519", help="ed25519 (default) or ECDSA P-256")
    trust = sub.add_parser("trust-runner", help="trust a runner's key for gate verdicts (re-signs runners.json with the targets key)")
    trust.add_argument("public", type=Path, metavar="PUB_JSON", help="the runner's .pub.json (from cairn keys runner)")
    trust.add_argument("--gate", action="append", required=True, help="a gate it may vouch for (repeatable), e.g. gpu")
    trust.add_argument("--target", action="append", default=[], help="a gfx target it may vouch for (repeatable; default every target)")
    trust.add_argument("--name", default="", help="what to call it in reports (default: the file name)")
    trust.add_argument("--dir", type=Path, default=None, help="the key set (default ~/.config/cairn/keys or $CAIRN_KEYS)")
    writer = sub.add_parser("cache-writer", help="make a shared action cache writer's signing key and print its trust-list entry",
                            description="make a key that signs the shared action cache's records (cairn build --cache): "
                                        "cache-writer.pem (mode 0600; give it only to trusted writers, e.g. as the CI secret "
                                        "CAIRN_CACHE_SIGNING_KEY) and cache-writer.pub.json in DIR; prints the public entry "
                                        "to add to the readers' trust list (--cache-trust)")
    writer.add_argument("--dir", type=Path, required=True, help="where the key pair goes (refused if it already holds one)")
    writer.add_argument("--name", default="", help="what to call the writer in reports (default: the directory's name)")
    writer.add_argument("--type", dest="keytype", choices=("ed25519", "ecdsa"), default="ed25519", help="ed25519 (default) or ECDSA P-256")
    writer.add_argument("--trust", type=Path, default=None, metavar="FILE",
                        help="also add the entry to this trust list (made if absent), e.g. publish/cache-writers.json")
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
    if args.keys_command == "runner":
        # lazy: cairn.sign, cairn.dsse, 6 ms at start-up (python -X importtime)
        from cairn.sign.runners import make_runner_key

        private, public, keyid = make_runner_key(args.out, args.keytype)
        print(f"runner key {keyid[:16]}… written to {private} (mode 0600, keep it on the runner); public key: {public}")
        return 0
    if args.keys_command == "trust-runner":
        return _trust_runner(args)
    if args.keys_command == "cache-writer":
        return _cache_writer(args)
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


def _trust_runner(args: argparse.Namespace) -> int:
    # lazy: cairn.sign, cairn.dsse, 6 ms at start-up (python -X importtime)
    from cairn.sign.runners import trust

    directory = args.dir or default_keys_dir()
    try:
        public = json.loads(args.public.read_bytes())
    except (OSError, ValueError) as exc:
        raise InputError(args.public, f"cannot be read as a runner public key ({exc})", "pass the .pub.json cairn keys runner wrote") from None
    if not isinstance(public, dict):
        raise InputError(args.public, "not a runner public key (a JSON object)", "pass the .pub.json cairn keys runner wrote")
    keys = load_keys(directory)
    signer = keys.signer("targets")  # before anything is read further: without the targets key nothing can be trusted
    root = load_root(directory / "root.json")
    name = args.name or args.public.name.removesuffix(".pub.json")
    runners = trust(directory, root, signer, public, name, args.gate, args.target)
    entry = next(r for r in runners.runners if r.key.keyid == public["keyid"])
    print(f"{directory / 'runners.json'} (version {runners.version}): {entry.name} may sign {', '.join(entry.gates)} "
          f"on {', '.join(entry.targets)}; the next publish or promote publishes it as keys/runners.json")
    return 0


def _cache_writer(args: argparse.Namespace) -> int:
    # lazy: cairn.store, cairn.dsse, cairn.digest, 8 ms at start-up (python -X importtime)
    from cairn.store.signing import add_to_trust, load_trust, make_writer_key

    if args.trust is not None and args.trust.exists():
        load_trust(args.trust)  # before the key is made: a list that cannot take the entry stops here
    private, entry = make_writer_key(args.dir, args.keytype, args.name or args.dir.resolve().name)
    print(f"cache-writer key {entry['keyid'][:16]} written to {private} (mode 0600: give it only to trusted writers, "
          f"as --cache-key or $CAIRN_CACHE_SIGNING_KEY)", file=sys.stderr)
    if args.trust is not None:
        count = add_to_trust(args.trust, entry)
        print(f"{args.trust} now trusts {count} cache writer(s)", file=sys.stderr)
    else:
        print("add this entry to the readers' trust list (--cache-trust FILE, a JSON list):", file=sys.stderr)
    print(json.dumps(entry, indent=1, sort_keys=True))
    return 0


def _rotate(args: argparse.Namespace) -> int:
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
