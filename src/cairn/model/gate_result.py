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

from cairn.model import json_reader
from cairn.model.reader import Field, Table

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
        """A gate's ``gate.json`` checked against ``GATE_FILE``; a damaged one is one InputError naming it."""
        fix = "rebuild the gate (cairn build --only gate:…)"
        doc = json_reader.read_file(path, GATE_FILE, "gate result", fix)
        return cls(**{name: doc.string(name) for name in ("gate", "image", "target", "family", "digest", "status", "reason")},
                   evidence=doc.table("evidence").data)


_TEXT = Field("string", required=True)
GATE_FILE = Table({  # gate.json's keys, declared as every JSON input is (cairn.model.json_reader)
    "schema": Field("string", doc=SCHEMA), "gate": _TEXT, "image": _TEXT, "target": _TEXT, "family": _TEXT, "digest": _TEXT,
    "status": Field("string", required=True, enum=STATUSES), "reason": _TEXT,
    "evidence": Field("table", table=Table(values=Field("any")), doc="what the gate looked at"),
}, what="gate result")
