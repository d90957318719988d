"""``cairn matrix [--from DIR|URL|FILE] [--channel C] [--root ROOT] [--format json|html|md] [--out PATH]
[--registry NAME] [--base-url URL]``.

Reads the compatibility matrix a publish wrote — by default ``channels/<channel>/matrix.json`` of the
local repository ``<store>/publish`` — and prints or writes it as JSON, a static HTML page or Markdown.
With ``--root`` the bytes are first checked against the repository's signed TUF targets (the matrix is a
signed target), so a page is never rendered from a matrix that was modified after signing.

The page's commands need two places a user fetches from: ``--registry`` (or ``$CAIRN_PUBLIC_REGISTRY``), the
public registry that stands for a loopback registry in image references, and ``--base-url``, the repository
root pip reads (default: the public URL the publish named, ``release.base_url``, else the repository the matrix
was read from when it is served over http(s) — never a ``file://`` directory unless passed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from cairn.cli_options import add_store, check_choice
from cairn.errors import CairnError
from cairn.io import atomic_write
from cairn.matrix import grid, search
from cairn.matrix.commands import REGISTRY_ENV, check_registry
from cairn.matrix.diff_text import render
from cairn.matrix.model import CHANNELS, _read, parse_matrix
from cairn.matrix.render import registry_products, to_html, to_markdown


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", default=None,
                        help="repository dir/URL or a matrix.json file (default: <store>/publish)")
    parser.add_argument("--channel", default="dev", metavar="{" + ",".join(CHANNELS) + "}",
                        help="channel whose matrix to read from a repository")
    add_store(parser, "build store")
    parser.add_argument("--root", type=Path, default=None, help="verify the matrix against this pinned TUF root first")
    parser.add_argument("--format", choices=("json", "html", "md"), default="json")
    parser.add_argument("--out", type=Path, default=None, help="write here instead of printing")
    parser.add_argument("--registry", default=None,
                        help=f"public registry (host[:port][/namespace]) shown for loopback image references (default ${REGISTRY_ENV})")
    parser.add_argument("--find", default=None, metavar="GPU",
                        help="print what the release offers for a GPU as people type it (\"7900XTX\", \"RX 9070 XT\", gfx1100), "
                             "as the page's search finds it; exit 1 when nothing matches")
    parser.add_argument("--base-url", default=None,
                        help="repository root URL pip reads the cells' indexes from (default: the --from repository if http(s)/file)")


def locate(source: str) -> tuple[str, str]:
    """(repository URL or "", matrix URL/path) for a repository dir/URL or a matrix file."""
    if source.endswith(".json"):
        return "", source
    # lazy: urllib3, cryptography, securesystemslib, 49 ms at start-up (python -X importtime)
    from cairn.sign.verify import repository_url

    return repository_url(source), ""


def signed_targets(source: str, root: Path | None):  # type: ignore[no-untyped-def]
    """With ``--root``: the repository's signed targets after one TUF refresh (the matrix and the diff it names
    are both checked against them); None without it."""
    if root is None:
        return None
    repo, _ = locate(source)
    if not repo:
        raise CairnError("--root needs the repository the matrix came from: pass --from DIR|URL, not a file")
    # lazy: urllib3, cryptography, securesystemslib, 49 ms at start-up (python -X importtime)
    from cairn.sign.verify import SignedTargets, load_pinned_root

    return SignedTargets.of(repo, load_pinned_root(root))


def read_matrix(source: str, channel: str, signed=None):  # type: ignore[no-untyped-def]
    # lazy: urllib3, cryptography, securesystemslib, 49 ms at start-up (python -X importtime)
    from cairn.sign.verify import fetch

    repo, file = locate(source)
    path = f"channels/{channel}/matrix.json"
    if repo:
        data = fetch(repo + path)
        if data is None:
            raise CairnError(f"{repo}{path} does not exist — publish the release to channel {channel} first (cairn publish)")
    else:
        data = _read(file).encode()
    if signed is not None:
        signed.check(path, data)
    return parse_matrix(data, repo + path if repo else file)


def read_changes(source: str, matrix, signed=None) -> list[str]:  # type: ignore[no-untyped-def]
    """The text of the diff the matrix names (``release.previous``), read from the repository beside it (and
    checked against ``signed``, as the matrix was); [] without one, or when the matrix was read from a file."""
    previous = matrix.release.previous
    repo, _ = locate(source)
    if previous is None or not repo:
        return []
    # lazy: urllib3, cryptography, securesystemslib, 49 ms at start-up (python -X importtime)
    from cairn.sign.verify import fetch

    data = fetch(repo + previous.diff)
    if data is None:
        raise CairnError(f"{repo}{previous.diff} does not exist, but the channel's matrix names it — publish the release again")
    if signed is not None:
        signed.check(previous.diff, data)
    try:
        return render(json.loads(data))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CairnError(f"{repo}{previous.diff} is not a cairn diff ({type(exc).__name__}: {exc}) — publish the release again") from None


def public_registry(option: str | None) -> str | None:
    """The configured public registry (``--registry``, else ``$CAIRN_PUBLIC_REGISTRY``), checked; None if neither."""
    if option is not None:
        return check_registry(option)
    value = os.environ.get(REGISTRY_ENV, "")
    return check_registry(value, f"${REGISTRY_ENV}") if value else None


def base_url(option: str | None, source: str, published: str = "") -> str | None:
    """Where pip reads the repository: ``--base-url``, else the public URL the publish named (``release.base_url``),
    else the repository read from when it is served over http(s). Never, unasked, a ``file://`` directory: that
    is this machine's disk, which a page meant for others must not name (``--base-url file://…`` for a local test)."""
    if option is not None:
        if not option.startswith(("https://", "http://", "file://")):
            raise CairnError(f"--base-url {option!r} is not an http(s):// or file:// URL — give the repository root pip reads")
        return option.rstrip("/") + "/"
    if published:
        return published
    repo, _ = locate(source)
    return repo if repo.startswith(("https://", "http://")) else None


def _find(query: str, matrix) -> int:  # type: ignore[no-untyped-def]
    """``--find``: one line per GPU found — its target, every column's status and the target's details — or, for
    a GPU the release does not serve, why and what to use instead (``cairn.matrix.search``)."""
    products = registry_products()
    rows, unserved = search.find(query, grid.rows(matrix, products), search.unserved_of(matrix, products))
    rel = matrix.release
    for row in rows:
        squares = [f"{sq.column} {sq.status}" for sq in row.squares if sq.status != "absent"]
        details = [f"{grid.detail_label(sq.column)} {sq.status}" for sq in row.details if sq.status != "absent"]
        print(f"{row.product or '(unknown product)'} — {row.gfx_target} ({row.family}), release {rel.version} on {rel.channel}: "
              + ("; ".join(squares) or "no engine or framework") + (f" [{', '.join(details)}]" if details else ""))
    for item in unserved:
        print(f"{item.product} — {item.gfx_target}: {item.says}")
    if not rows and not unserved:
        print(f"no GPU product or gfx target known to Cairn matches {query!r} — try the product name (\"7900 XTX\") "
              "or the gfx target rocminfo shows", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    check_choice("--channel", args.channel, CHANNELS, "channel")
    source = args.source or str(Path(args.store) / "publish")
    registry = public_registry(args.registry)
    signed = signed_targets(source, args.root)
    matrix = read_matrix(source, args.channel, signed)
    base = base_url(args.base_url, source, matrix.release.base_url)
    if args.find is not None:
        return _find(args.find, matrix)
    if args.format == "json":
        text = matrix.to_json()
    elif args.format == "html":
        text = to_html(matrix, registry_products(), registry, base, read_changes(source, matrix, signed))
    else:
        text = to_markdown(matrix, registry, read_changes(source, matrix, signed))
    if args.out is None:
        sys.stdout.write(text)
        return 0
    atomic_write(args.out, text.encode("utf-8"))
    print(f"matrix ({len(matrix.cells)} cells, {args.format}) written to {args.out}", file=sys.stderr)
    return 0
