"""``cairn keys``: create the release key set and the public root it pins (``init``); make a GPU runner's key
(``runner``) and trust it for some gates (``trust-runner``: the signed runner list, ``cairn.sign.runners``)."""

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
    runner = sub.add_parser("runner", help="make a gate runner's signing key (on the runner; the private key stays there)")
    runner.add_argument("--out", type=Path, required=True, metavar="KEY_PEM", help="private key file; the public half goes beside it as .pub.json")
    runner.add_argument("--type", dest="keytype", choices=("ed25519", "ecdsa"), default="ed25519", help="ed25519 (default) or ECDSA P-256")
    trust = sub.add_parser("trust-runner", help="trust a runner's key for gate verdicts (re-signs runners.json with the targets key)")
    trust.add_argument("public", type=Path, metavar="PUB_JSON", help="the runner's .pub.json (from cairn keys runner)")
    trust.add_argument("--gate", action="append", required=True, help="a gate it may vouch for (repeatable), e.g. gpu")
    trust.add_argument("--target", action="append", default=[], help="a gfx target it may vouch for (repeatable; default every target)")
    trust.add_argument("--name", default="", help="what to call it in reports (default: the file name)")
    trust.add_argument("--dir", type=Path, default=None, help="the key set (default ~/.config/cairn/keys or $CAIRN_KEYS)")


def run(args: argparse.Namespace) -> int:
    if args.keys_command == "runner":
        from cairn.sign.runners import make_runner_key

        private, public, keyid = make_runner_key(args.out, args.keytype)
        print(f"runner key {keyid[:16]}… written to {private} (mode 0600, keep it on the runner); public key: {public}")
        return 0
    if args.keys_command == "trust-runner":
        return _trust_runner(args)
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
    import json

    from cairn.errors import InputError
    from cairn.publish.publisher import load_root
    from cairn.sign.keys import load_keys
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
