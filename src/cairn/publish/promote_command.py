"""``cairn promote``: move a channel to a staged release, only for cells whose required gates passed.

It takes ``cairn publish``'s destination, key and channel options (``command.add_common_options``) and signs
through the same key loading, so a promote never needs keys a publish would not.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cairn.errors import InputError
from cairn.publish.command import (
    add_common_options,
    check_public_scope,
    default_destination,
    keys_and_root,
    open_destination,
    print_report,
    published_where,
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", required=True, help="the staged release version to promote")
    parser.add_argument("--as", dest="as_version", default="", help="promote an rc as this final version (re-signs, never rebuilds)")
    parser.add_argument("--gates", type=Path, action="append", default=[], metavar="GATE_JSON",
                        help="record this signed gate verdict first (cairn gate --sign-with on the host that ran it, e.g. "
                             "the GPU gate; signed by a runner the key set trusts: cairn keys trust-runner); repeatable")
    add_common_options(parser)


def _read_gate_result(path: Path) -> bytes:
    """One signed gate verdict reported after staging, as bytes: verified by ``cairn.sign.runners.accept``."""
    # lazy: cryptography, securesystemslib, cairn.sign, 33 ms at start-up (python -X importtime)
    from cairn.sign.attest import MAX_ENVELOPE

    try:
        if path.stat().st_size > MAX_ENVELOPE:
            raise InputError(path, f"{path.stat().st_size} bytes, more than any signed gate verdict ({MAX_ENVELOPE})",
                             "pass the .intoto.json cairn gate --sign-with wrote")
        return path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", "pass the .intoto.json cairn gate --sign-with wrote") from None


def run(args: argparse.Namespace) -> int:
    # lazy: cairn.remote, cairn.matrix, cairn.publish, 189 ms at start-up (python -X importtime)
    from cairn.publish.publisher import check_version_names, promote

    to = args.to or default_destination(args.store)
    check_version_names(args.version, args.as_version)
    check_public_scope(args, to)
    where = published_where(args, to)
    results = [(path, _read_gate_result(path)) for path in args.gates]
    keys, root = keys_and_root(args)
    backend = open_destination(args, to)
    report = promote(backend, keys, root, args.version, args.channel or "dev", as_version=args.as_version, gate_results=results,
                     public_read=args.public_read, log=(lambda _: None) if args.json else print, where=where)
    print_report(report.to_dict(), args.json)
    return 0
