"""JSON Schemas (draft 2020-12) of every input file kind and of the records stages hand each other, generated
from the tables their readers declare.

The loaders read their files through ``cairn.model.reader`` against ``Table`` declarations; this module
turns the same declarations into schemas an editor can check a manifest or recipe with while it is being
written (taplo / Even Better TOML read ``.taplo.toml`` at the repository root). A schema checks keys and
types; what needs more — a pinned commit, a known gfx family, a PEP 440 version — only ``cairn check`` and
the loaders can tell. The records one stage writes for the next (``image.json``, ``push.json``, a wheel's
``report.json``: ``cairn.model.records``) get a schema each too, for whoever reads a store tree without cairn.

``python -m cairn.model.schema`` rewrites ``schemas/*.schema.json``; ``--check`` fails when one is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cairn.model.reader import Field, Table
from cairn.paths import repo_root

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def kinds() -> dict[str, Table]:
    """Each input file kind and stage record, and the declaration of its whole file."""
    # lazy: cairn.model, _hashlib, packaging, 42 ms at start-up (python -X importtime)
    from cairn.model.image_recipes import IMAGE_FILE, ROOTFS_FILE
    from cairn.model.manifest import MANIFEST
    from cairn.model.records import RECORDS
    from cairn.model.targets import REGISTRY
    from cairn.model.wheel_recipes import RECIPE

    return {"release-manifest": MANIFEST, "targets": REGISTRY, "wheel-recipe": RECIPE,
            "container-recipe": IMAGE_FILE, "rootfs-recipe": ROOTFS_FILE, **RECORDS}


def schema(kind: str) -> dict[str, Any]:
    table = kinds()[kind]
    return {"$schema": DRAFT, "$id": f"https://cairn.invalid/schemas/{kind}.schema.json", "title": kind,
            **table_schema(table)}


def table_schema(table: Table) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    if table.doc:
        out["description"] = table.doc
    if table.values is not None:
        out["additionalProperties"] = field_schema(table.values)
        return out
    out["properties"] = {key: field_schema(spec) for key, spec in table.fields.items()}
    out["additionalProperties"] = False
    required = [key for key, spec in table.fields.items() if spec.required]
    if required:
        out["required"] = required
    if table.one_of:
        out["minProperties"] = out["maxProperties"] = 1
    out.update(table.json or {})
    return out


def field_schema(spec: Field) -> dict[str, Any]:
    out: dict[str, Any]
    if spec.type == "string":
        out = {"type": "string"}
        if spec.pattern:
            out["pattern"] = spec.pattern
        elif spec.nonempty:
            out["pattern"] = r"\S"
        if spec.enum:
            out["enum"] = list(spec.enum)
    elif spec.type == "integer":
        out = {"type": "integer"}
        if spec.minimum is not None:
            out["minimum"] = spec.minimum
    elif spec.type == "boolean":
        out = {"type": "boolean"}
    elif spec.type == "strings":
        out = {"type": "array", "items": {"type": "string"}}
    elif spec.type in ("table", "tables"):
        assert spec.table is not None
        out = table_schema(spec.table)
        if spec.type == "tables":
            out = {"type": "array", "items": out}
    else:  # "any": the loader checks it in its own way
        out = dict(spec.json or {})
    if spec.doc:
        out["description"] = spec.doc
    if spec.default is not None:
        out["default"] = spec.default
    return out


def render(kind: str) -> str:
    return json.dumps(schema(kind), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cairn.model.schema", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when a committed schema differs from the declarations")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: schemas/ of the checkout)")
    args = parser.parse_args(argv)
    out = args.out or repo_root() / "schemas"
    stale = []
    for kind in kinds():
        path = out / f"{kind}.schema.json"
        text = render(kind)
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"stale schema: {', '.join(stale)} — regenerate: python -m cairn.model.schema", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
