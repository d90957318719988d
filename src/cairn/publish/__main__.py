"""``python -m cairn.publish COMMAND …``: this stage's commands before they are wired into ``cairn``."""

from __future__ import annotations

import sys

from cairn import cli

STAGE_COMMANDS = {
    "keys": ("cairn.sign.command", "create the release key set and the public TUF root"),
    "publish": ("cairn.publish.command", "publish a release bundle (staging, then the channel), signed"),
    "promote": ("cairn.publish.promote_command", "move a channel to a staged release, only cells whose gates passed"),
    "verify": ("cairn.sign.verify_command", "check a repository, file or image against the pinned TUF root"),
    "matrix": ("cairn.matrix.command", "print or write the compatibility matrix as JSON, a static HTML page or Markdown"),
}

if __name__ == "__main__":
    for name, entry in STAGE_COMMANDS.items():
        cli.COMMANDS.setdefault(name, entry)
    raise SystemExit(cli.main(sys.argv[1:]))
