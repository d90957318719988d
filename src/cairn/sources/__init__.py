"""Fetchers, one per source kind. Each writes the pinned input into an empty directory and verifies the
pin (sha256 or commit) before returning; a mismatch is a PinMismatch and nothing is kept."""

from cairn.sources.fetch import FETCHERS, fetch

__all__ = ["FETCHERS", "fetch"]
