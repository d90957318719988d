"""What a publish or promote did, as ``cairn publish`` prints it and the publish record keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Report:
    url: str
    version: str
    channel: str
    promoted: list[str] = field(default_factory=list)
    held: dict[str, list[str]] = field(default_factory=dict)  # cell id -> reasons
    uploaded: int = 0
    skipped: int = 0
    signed: bool = False
    timestamp_version: int = 0
    images: dict[str, str] = field(default_factory=dict)  # pinned reference -> "signed <tag>" | "not signed: why"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def as_published(self) -> dict[str, Any]:
        """What the publish record keeps, for an unchanged re-publish to report without redoing anything."""
        return {"version": self.version, "channel": self.channel, "promoted": self.promoted, "held": self.held,
                "images": self.images}
