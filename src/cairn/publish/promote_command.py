"""``cairn promote``: move a channel to a staged release, only for cells whose required gates passed."""

from cairn.publish.command import configure_promote as configure
from cairn.publish.command import run_promote as run

__all__ = ["configure", "run"]
