"""``cairn release X.Y.Z[rcN]`` (``nox -s release``): refuse what must not be released, then build, gate, stage,
promote, verify.

The order, and why:

1. Refusals first, before anything is built: a dirty working tree (the release would not be what the commit
   says) and a version that is not the manifest's (``5.2.3rc1`` releases manifest version ``5.2.3``).
2. A final version whose release candidate is already staged is *promoted*, not rebuilt: the rc's staging
   record is copied under the final version and re-signed (``promote --as``), so the bytes users get are the
   ones that were tested as the rc.
3. Otherwise: ``cairn build`` (wheels, images, gates, the ``bundle:release`` tree), publish to
   ``staging/<version>/``, promote the cells whose required gates passed to the channel (``prerelease`` for an
   rc, ``stable`` for a final), then verify the whole repository against the pinned root.

Release keys come from ``--keys`` / ``$CAIRN_KEYS`` / ``~/.config/cairn/keys`` and the repository verifies
against ``publish/root.json``; development keys are never used here.

The build is handed in (``build``), as pypa/build hands its builder a runner: the command passes
``cairn build``'s own function with the stage table, so a release builds exactly as ``cairn build`` does and this
module needs neither the table nor the command line.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from cairn import proc
from cairn.cli_options import add_store
from cairn.errors import CairnError
from cairn.execute.command import BuildRequest, build
from cairn.matrix.bundle import load_bundle
from cairn.paths import default_manifest, repo_root
from cairn.plan.planner import Pipeline
from cairn.publish.command import default_destination, last_build_bundle
from cairn.publish.publisher import Report, promote, publish
from cairn.remote.backend import open_backend
from cairn.sign.keys import load_keys
from cairn.sign.tuf import load_root

# (manifest, store) -> did every runnable action succeed; what ``release`` calls to build
Builder = Callable[[Path, Path], bool]
VERSION = re.compile(r"^(?P<base>[0-9]+\.[0-9]+\.[0-9]+)(?P<rc>rc[0-9]+)?$")


class ReleaseRefused(CairnError):
    exit_code = 1


def parse_version(version: str) -> tuple[str, str]:
    """``5.2.3rc1`` → ("5.2.3", "rc1"); anything else is refused with the accepted form."""
    match = VERSION.match(version)
    if not match:
        raise ReleaseRefused(f"'{version}' is not a release version — write X.Y.Z or X.Y.ZrcN (e.g. 5.2.3rc1)")
    return match["base"], match["rc"] or ""


def check_clean(root: Path) -> None:
    """Refuse a working tree with uncommitted changes (untracked files included, ignored ones not)."""
    try:
        out = proc.run(["git", "status", "--porcelain", "--untracked-files=normal"], cwd=root).stdout
    except CairnError as exc:
        raise ReleaseRefused(f"{root} is not a git checkout ({str(exc).splitlines()[0]}) — release from a clean clone") from None
    dirty = [line[3:] for line in out.splitlines() if line.strip()]
    if dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise ReleaseRefused(f"the working tree is dirty ({shown}) — commit or remove the changes, then release")


def check_version(version: str, manifest_version: str, manifest: str) -> tuple[str, str]:
    base, rc = parse_version(version)
    if base != manifest_version:
        raise ReleaseRefused(f"release {version} does not match {manifest} (version {manifest_version}) — "
                             f"release {manifest_version}[rcN], or change [release] version in the manifest and commit it")
    return base, rc


def staged_candidates(backend, base: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Release candidates of ``base`` staged on the backend, newest last."""
    found = {key.split("/")[1] for key in backend.list("staging/") if key.count("/") >= 2}
    rcs = [v for v in found if v.startswith(base + "rc") and v.removeprefix(base + "rc").isdigit()]
    return sorted(rcs, key=lambda v: int(v.removeprefix(base + "rc")))


def release(version: str, *, manifest_path: Path, root: Path, to: str, keys_dir: Path | None, store: Path,
            bundle: Path | None = None, build: Builder | None = None, check_tree: bool = True,
            log=print) -> Report:  # type: ignore[no-untyped-def]
    # lazy: cairn.model, 16 ms at start-up (python -X importtime)
    from cairn.model.manifest import load_manifest

    manifest = load_manifest(manifest_path)
    if check_tree:
        check_clean(root)
    base, rc = check_version(version, manifest.release.version, manifest_path.name)
    channel = "prerelease" if rc else "stable"
    keys = load_keys(keys_dir)
    signed_root = load_root(keys.directory / "root.json")
    backend = open_backend(to)
    candidates = [] if rc else staged_candidates(backend, base)
    if candidates and backend.get(f"staging/{version}/release.json") is None:
        log(f"promoting staged {candidates[-1]} as {version} to {channel}: re-signing, nothing is rebuilt")
        return promote(backend, keys, signed_root, candidates[-1], channel, as_version=version, log=log)
    if bundle is None:
        log(f"building {manifest_path.name} into {store}")

        if build is None:
            raise CairnError("this release has no bundle and no build was handed in — run it as cairn release")
        if not build(manifest_path, store):
            raise ReleaseRefused(f"the build of {manifest_path.name} failed (its report: {store / 'last-build.json'}) — nothing was published")
        bundle = last_build_bundle(store)
    loaded = load_bundle(bundle)
    loaded = replace(loaded, version=version, channel=channel, facts=replace(loaded.facts, version=version))
    publish(loaded, backend, keys, signed_root, stage_only=True, log=log)
    return promote(backend, keys, signed_root, version, channel, log=log)


TAKES_PIPELINE = True


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="X.Y.Z or X.Y.ZrcN; must match the manifest's version")
    parser.add_argument("--manifest", type=Path, default=None, help="release manifest (default: the default release)")
    parser.add_argument("--to", default=None, help="s3://bucket/prefix or file:///dir (default <store>/publish)")
    parser.add_argument("--keys", type=Path, default=None, help="release key directory (default ~/.config/cairn/keys or $CAIRN_KEYS)")
    add_store(parser)
    parser.add_argument("--bundle", type=Path, default=None, help="publish this bundle instead of building")


def builder(pipeline: Pipeline) -> Builder:
    """``cairn build``'s own build of a manifest into a store, with the stage table the command was handed."""
    return lambda manifest, store: build(BuildRequest(str(manifest), store), pipeline) == 0


def run(args: argparse.Namespace, pipeline: Pipeline) -> int:
    report = release(args.version, manifest_path=args.manifest or default_manifest(), root=repo_root(),
                     to=args.to or default_destination(args.store), keys_dir=args.keys, store=args.store,
                     bundle=args.bundle, build=builder(pipeline))
    print(f"released {report.version} to {report.channel} at {report.url} (timestamp v{report.timestamp_version})")
    for cell in report.promoted:
        print(f"  released  {cell}")
    for cell, reasons in report.held.items():
        print(f"  held      {cell}: {'; '.join(reasons)}")
    return 0
