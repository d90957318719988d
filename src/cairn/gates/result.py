"""One gate's verdict on one image, as the JSON every gate writes (``gate.json`` in its output tree).

``status`` is ``passed``, ``failed`` or ``not-run``; ``reason`` is one line naming the cause (the file,
the library, the wheel); ``evidence`` holds what the gate looked at. A gate that could not run here is
``not-run`` with the reason — never ``passed``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "cairn.gate/v1"
STATUSES = ("passed", "failed", "not-run")


@dataclass(frozen=True)
class GateResult:
    gate: str
    image: str  # recipe name: runtime, smoke, …
    target: str
    family: str
    digest: str  # manifest digest of the image judged
    status: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}

    def write(self, directory: Path) -> Path:
        path = directory / "gate.json"
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> GateResult:
        """A gate's ``gate.json``; a damaged one is one InputError naming it, never a traceback."""
        from cairn.errors import InputError
        from cairn.execute.report import read_json

        fix = "rebuild the gate (cairn build --only gate:…)"
        data = read_json(path, "gate result", fix)
        data.pop("schema", None)
        for name in ("gate", "image", "target", "family", "digest", "status", "reason"):
            if not isinstance(data.get(name), str):
                raise InputError(path, f"'{name}' is missing or not a string", fix)
        if data["status"] not in STATUSES:
            raise InputError(path, f"gate status {data['status']!r}", f"use one of {', '.join(STATUSES)}")
        evidence = data.get("evidence", {})
        unknown = sorted(set(data) - {f for f in cls.__dataclass_fields__})
        if unknown or not isinstance(evidence, dict):
            raise InputError(path, f"unknown key '{unknown[0]}'" if unknown else "'evidence' is not an object", fix)
        return cls(**data)
