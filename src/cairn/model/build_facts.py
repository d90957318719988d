"""The facts of one build that its provenance statements record: a typed record, not the signer's code — in
model/, so that reading a release bundle (which carries them) loads no signing library."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BuildFacts:
    """What every provenance statement of one release records about how it was built (``cairn.sign.provenance``).
    A record of its own, below the publisher that reads it from a bundle and the signer that writes it into
    statements; importing it loads no signing library."""

    release: str
    version: str
    manifest_sha256: str
    source_date_epoch: int
    builder_id: str = "https://cairn.invalid/builder/local"
    pins: tuple[tuple[str, str], ...] = ()  # component -> source identity (pin)
    git_commit: str = ""
    invocation: str = ""
    extra: tuple[tuple[str, str], ...] = field(default=())
