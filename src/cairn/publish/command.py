"""``cairn publish``: a release bundle to ``file://`` or ``s3://``, gated by channel (``cairn promote`` shares its options).

Without a bundle argument, ``cairn publish`` takes the ``bundle:release`` tree of the store's last build
(``<store>/last-build.json``) and publishes to ``<store>/publish``, a directory with the bucket's layout.
``--dev-keys`` signs with a development key set kept in ``<store>/keys/dev`` (created when missing, and
said so): a fresh machine has no release keys, and what dev keys sign verifies only against
``<store>/keys/dev/root.json`` — never against the pinned ``publish/root.json`` of real releases. The dev key
directory is always that one: ``$CAIRN_KEYS`` names the release keys, and ``--dev-keys`` must never sign with
them (a dev build would then make what the pinned root accepts) nor, when that directory lacks a ``root.json``,
write new keys over them. ``--dev-keys`` with ``--keys`` names two key sets and is refused.

An unchanged re-publish is answered from the repository's publish record (``cairn.publish.fastpath``: two
GETs) before the signing libraries and boto3 are even imported; those load only when there is work to do.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlparse

from cairn.cli_options import add_json, add_store
from cairn.errors import CairnError
from cairn.names import BUCKET_NAME
from cairn.publish import fastpath
from cairn.publish.prefetch import Prefetch
from cairn.publish.progress import meter_for
from cairn.remote.access import whole_bucket_refusal

BUNDLE_ACTION = "bundle:release"
CHANNELS = ("dev", "nightly", "prerelease", "stable")  # cairn.matrix.model.CHANNELS (a test checks), without its imports


def default_destination(store: Path | None = None) -> str:
    """Without ``--to``: a local directory with exactly the bucket's layout (``<store>/publish``)."""
    return os.environ.get("CAIRN_PUBLISH_TO") or (Path(store or ".cairn") / "publish").absolute().as_uri()


def dev_keys_dir(store: Path) -> Path:
    """Where ``--dev-keys`` keeps its key set: inside the store, whatever ``$CAIRN_KEYS`` says."""
    return Path(store) / "keys" / "dev"


def _check_one_key_set(args: argparse.Namespace) -> None:
    if args.dev_keys and args.keys is not None:
        raise CairnError(f"--dev-keys and --keys {args.keys} name two key sets — pass --keys to sign with that key set, "
                         "or --dev-keys alone for the development keys in <store>/keys/dev")


def last_build_bundle(store: Path) -> Path:
    """The ``bundle:release`` tree of the store's last build, or a one-line error saying how to get one."""
    # lazy: cairn.store, cairn.digest, cairn.io, 15 ms at start-up (python -X importtime)
    from cairn.store.report import read_actions

    info = read_actions(store).get(BUNDLE_ACTION)
    if not info or not info.output:
        why = f"{info.status}: {info.detail}".rstrip(": ") if info else "not in the plan (cairn.publish.plan is not a stage planner)"
        raise CairnError(f"the last build has no {BUNDLE_ACTION} ({why}) — fix the build, or pass a bundle directory")
    return Path(store) / "trees" / info.output


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--to", default=None, help="s3://bucket/prefix or file:///dir (default: .cairn/publish; endpoint from $CAIRN_S3_ENDPOINT)")
    parser.add_argument("--keys", type=Path, default=None, help="key directory (default ~/.config/cairn/keys or $CAIRN_KEYS)")
    parser.add_argument("--dev-keys", action="store_true",
                        help="sign with development keys in <store>/keys/dev (never $CAIRN_KEYS), created when missing")
    add_store(parser, "build store (default .cairn/)")
    parser.add_argument("--root", type=Path, default=None, help="signed root.json matching the keys (default: <keys>/root.json)")
    parser.add_argument("--channel", choices=CHANNELS, default=None)
    add_json(parser, "print the report as JSON")
    parser.add_argument("--no-public-read", dest="public_read", action="store_false",
                        help="S3: leave the bucket policy alone (by default anyone may read the repository over HTTP, as pip "
                             "and uv do); for an index served by something with its own access to the bucket, e.g. a CDN")
    parser.add_argument("--public-url", default=None, metavar="URL",
                        help="the repository root users fetch from over HTTP(S), which the matrices name (default: the "
                             "HTTP form of an s3:// --to; a file:// --to names none)")
    parser.add_argument("--registry", default=None, metavar="NAME",
                        help="the registry the release's images were pushed to (host[:port][/namespace]), which the matrices "
                             "name for images the build pushed to a loopback registry (default $CAIRN_PUBLIC_REGISTRY)")
    parser.add_argument("--public-bucket", action="store_true",
                        help="S3 with no prefix (s3://bucket): let anyone read every object of the bucket; without it "
                             "such a publish is refused, since the grant would cover whatever else the bucket holds")


def public_url(option: str | None, to: str) -> str:
    """The repository root the matrices name (``release.base_url``): ``--public-url``, else the HTTP form of an
    ``s3://`` destination (the endpoint of ``$CAIRN_S3_ENDPOINT``, path-style; AWS's virtual-hosted host for the
    region), else "" — a ``file://`` directory is one machine's disk, and never named as where users fetch from."""
    if option is not None:
        if not option.startswith(("https://", "http://")) or not urlparse(option).netloc:
            raise CairnError(f"--public-url {option!r} is not an http(s):// URL — give the repository root users fetch from, "
                             "e.g. https://bucket.s3.us-east-1.amazonaws.com/cairn/")
        return option.rstrip("/") + "/"
    parsed = urlparse(to)
    if parsed.scheme != "s3" or not parsed.netloc:
        return ""
    # lazy: cairn.remote, email, ssl, 22 ms at start-up (python -X importtime)
    from cairn.remote.s3http import find_endpoint, find_region

    bucket, prefix = parsed.netloc, parsed.path.strip("/")
    tail = f"{prefix}/" if prefix else ""
    endpoint = find_endpoint()
    if endpoint:
        return f"{endpoint.rstrip('/')}/{bucket}/{tail}"
    host = f"{bucket}.s3.{find_region()}.amazonaws.com" if "." not in bucket else f"s3.{find_region()}.amazonaws.com/{bucket}"
    return f"https://{host}/{tail}"


def published_where(args: argparse.Namespace, to: str):  # type: ignore[no-untyped-def]
    """``cairn.matrix.build.Published`` of the options (the URL and registry checked: one line each)."""
    # lazy: cairn.matrix, cairn.remote, cairn.model, 84 ms at start-up (python -X importtime)
    from cairn.matrix.build import Published
    from cairn.matrix.command import public_registry

    return Published(public_url(args.public_url, to), public_registry(args.registry) or "")


def check_public_scope(args: argparse.Namespace, to: str) -> None:
    """``--to s3://bucket`` (no prefix) with the public-read grant needs ``--public-bucket``: one line, before any
    read or write (``cairn.remote.access``)."""
    parsed = urlparse(to)  # a URL naming no bucket, or a bad one, is left to the backend's own one line
    if parsed.scheme == "s3" and BUCKET_NAME.fullmatch(parsed.netloc) and not parsed.path.strip("/") \
            and args.public_read and not args.public_bucket:
        raise whole_bucket_refusal(parsed.netloc)


def open_destination(args: argparse.Namespace, to: str):  # type: ignore[no-untyped-def]
    """The backend of ``to``, told whether ``--public-bucket`` allows a grant of the whole bucket."""
    # lazy: cairn.remote, email, xml, 39 ms at start-up (python -X importtime)
    from cairn.remote.backend import S3Backend, open_backend

    backend = open_backend(to)
    if isinstance(backend, S3Backend):
        backend.whole_bucket_public = bool(args.public_bucket)
    return backend


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, nargs="?", default=None,
                        help="release bundle directory (default: the bundle:release tree of the store's last build)")
    add_common_options(parser)
    parser.add_argument("--stage-only", action="store_true", help="upload to staging/<version>/ and stop (promote later)")


def _keys_dir(args: argparse.Namespace) -> Path:
    _check_one_key_set(args)
    if args.dev_keys:
        return dev_keys_dir(args.store)
    # = cairn.sign.keys.default_keys_dir() (a test checks), without importing the signing libraries
    return Path(args.keys or os.environ.get("CAIRN_KEYS") or Path.home() / ".config" / "cairn" / "keys")


def _dev_note(args: argparse.Namespace, directory: Path, created: bool) -> None:
    if args.dev_keys:
        print(f"{'created' if created else 'using'} DEVELOPMENT signing keys in {directory} — not the release keys: this "
              f"repository verifies only with --root {directory / 'root.json'}, never with publish/root.json", file=sys.stderr)


def keys_and_root(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    # lazy: cryptography, securesystemslib, cairn.sign, 39 ms at start-up (python -X importtime)
    from cairn.sign.keys import ensure_dev_keys, load_keys
    from cairn.sign.tuf import load_root

    _check_one_key_set(args)
    if args.dev_keys:
        directory = dev_keys_dir(args.store)
        keys, created = ensure_dev_keys(directory)
        _dev_note(args, directory, created)
    else:
        keys = load_keys(args.keys)
    return keys, load_root(args.root or keys.directory / "root.json")


def print_report(report: dict, as_json: bool) -> None:  # type: ignore[type-arg]
    if as_json:
        print(json.dumps(report, indent=1, sort_keys=True))
        return
    present = "already published" if report.get("already_published") else f"{report['skipped']} already present"
    print(f"{report['url']}: release {report['version']} → {report['channel'] or 'staging'} "
          f"({report['uploaded']} uploaded, {present}, timestamp v{report['timestamp_version']})")
    for ref, state in sorted(report["images"].items()):
        if not state.startswith("signed"):
            print(f"  image     {ref}: {state}")
    for cell in report["promoted"]:
        print(f"  promoted  {cell}")
    for cell, reasons in report["held"].items():
        print(f"  held      {cell}: {'; '.join(reasons)}")


def run(args: argparse.Namespace) -> int:
    bundle_dir = args.bundle or last_build_bundle(args.store)
    to = args.to or default_destination(args.store)
    check_public_scope(args, to)
    keys_dir = _keys_dir(args)
    where = published_where(args, to)

    prefetch = Prefetch(bundle_dir)  # the files are read and hashed while the rest starts (cairn.publish.prefetch)
    done = fastpath.already_published(to, bundle_dir, args.channel, args.stage_only, args.root or keys_dir / "root.json", keys_dir,
                                      args.public_read, where.base_url, where.registry)
    if done is not None:
        _dev_note(args, keys_dir, False)
        print_report(done, args.json)
        return 0
    # lazy: cairn.remote, cairn.publish, cairn.digest, 54 ms at start-up (python -X importtime)
    from cairn.publish.directory import publishing_into
    from cairn.publish.repo_reads import first_root_of, start_look

    backend, log = open_destination(args, to), (lambda _: None) if args.json else print
    # a new directory is written into a temp sibling and renamed at the end (cairn.publish.directory)
    with meter_for(args.json) as meter, publishing_into(backend, bundle_dir) as place:
        first_root = first_root_of(args.root or keys_dir / "root.json")
        looked = start_look(backend, first_root, args.public_read, log)  # reads only, while the bundle is read
        # cairn.sign imports securesystemslib: only once the reads are started
        # lazy: cryptography, securesystemslib, logging, 30 ms at start-up (python -X importtime)
        from cairn.sign.keyfiles import check_signing_keys

        if first_root is not None:  # blobs may go up before the keys load: keys that cannot sign stop the run first
            check_signing_keys(keys_dir)
        # lazy: cairn.matrix, cairn.remote, cairn.model, 86 ms at start-up (python -X importtime)
        from cairn.matrix.bundle import load_bundle
        from cairn.publish.blob_sender import EarlyBlobs

        bundle = load_bundle(bundle_dir)  # a bad bundle is refused before keys are made or anything is written
        # the blobs go up while the signing libraries load (cairn.publish.blob_sender says what is checked first)
        early = EarlyBlobs(backend, bundle, first_root, args.public_read, log, prefetch, looked, meter)
        place.settle = early.writer
        # lazy: urllib3, cairn.publish, cairn.matrix, 194 ms at start-up (python -X importtime)
        from cairn.publish.publisher import publish

        keys, root = keys_and_root(args)
        report = publish(bundle, backend, keys, root, channel=args.channel, stage_only=args.stage_only,
                         public_read=args.public_read, log=log, early=early, where=where)
    print_report(report.to_dict(), args.json)
    return 0
