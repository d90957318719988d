"""``cairn matrix [--from DIR|URL|FILE] [--channel C] [--root ROOT] [--format json|html|md] [--out PATH]``.

Reads the compatibility matrix a publish wrote — by default ``channels/<channel>/matrix.json`` of the
local repository ``<store>/publish`` — and prints or writes it as JSON, a static HTML page or Markdown.
With ``--root`` the bytes are first checked against the repository's signed TUF targets (the matrix is a
signed target), so a page is never rendered from a matrix that was modified after signing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cairn.cli_options import add_store
from cairn.errors import CairnError
from cairn.io import atomic_write
from cairn.matrix.model import CHANNELS, parse_matrix
from cairn.matrix.render import registry_products, to_html, to_markdown


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", default=None,
                        help="repository dir/URL or a matrix.json file (default: <store>/publish)")
    parser.add_argument("--channel", choices=CHANNELS, default="dev", help="channel whose matrix to read from a repository")
    add_store(parser, "build store (default .cairn/)")
    parser.add_argument("--root", type=Path, default=None, help="verify the matrix against this pinned TUF root first")
    parser.add_argument("--format", choices=("json", "html", "md"), default="json")
    parser.add_argument("--out", type=Path, default=None, help="write here instead of printing")


def locate(source: str) -> tuple[str, str]:
    """(repository URL or "", matrix URL/path) for a repository dir/URL or a matrix file."""
    if source.endswith(".json"):
        return "", source
    from cairn.sign.verify import repository_url

    return repository_url(source), ""


def read_matrix(source: str, channel: str, root: Path | None):  # type: ignore[no-untyped-def]
    from cairn.sign.verify import fetch, load_pinned_root, verify_target

    repo, file = locate(source)
    path = f"channels/{channel}/matrix.json"
    if repo:
        data = fetch(repo + path)
        if data is None:
            raise CairnError(f"{repo}{path} does not exist — publish the release to channel {channel} first (cairn publish)")
    else:
        from cairn.matrix.model import _read

        data = _read(file).encode()
    if root is not None:
        if not repo:
            raise CairnError("--root needs the repository the matrix came from: pass --from DIR|URL, not a file")
        verify_target(repo, load_pinned_root(root), path, data)
    return parse_matrix(data, repo + path if repo else file)


def run(args: argparse.Namespace) -> int:
    source = args.source or str(Path(args.store) / "publish")
    matrix = read_matrix(source, args.channel, args.root)
    if args.format == "json":
        text = matrix.to_json()
    elif args.format == "html":
        text = to_html(matrix, registry_products())
    else:
        text = to_markdown(matrix)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    atomic_write(args.out, text.encode("utf-8"))
    print(f"matrix ({len(matrix.cells)} cells, {args.format}) written to {args.out}", file=sys.stderr)
    return 0
