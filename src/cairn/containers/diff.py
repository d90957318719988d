"""Why two builds of an image differ: manifest, then config, then DiffIDs, then the tar headers.

The first differing layer is named by index and DiffID; inside it the first entries whose headers or
contents differ are named by path with what differs (size, mode, mtime, owner, link, content sha256).
"""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path
from typing import Any

from cairn.formats.oci import read_image


def _entries(blob: Path) -> dict[str, dict[str, Any]]:
    found = {}
    with tarfile.open(blob, "r|*") as tar:
        for m in tar:
            digest = ""
            if m.isreg():
                handle = tar.extractfile(m)
                digest = hashlib.sha256(handle.read()).hexdigest() if handle else ""
            found[m.name] = {"type": m.type.decode(), "size": m.size, "mode": oct(m.mode), "mtime": m.mtime,
                             "uid": m.uid, "gid": m.gid, "link": m.linkname, "sha256": digest}
    return found


def diff_layouts(a: Path, b: Path, limit: int = 20) -> dict[str, Any]:
    """A report of where image ``a`` and image ``b`` (OCI layouts) first differ; ``identical`` when they do not."""
    man_a, cfg_a, dig_a = read_image(a)
    man_b, cfg_b, dig_b = read_image(b)
    report: dict[str, Any] = {"a": dig_a, "b": dig_b, "identical": dig_a == dig_b, "differences": []}
    if dig_a == dig_b:
        return report
    diffs = report["differences"]
    for key in sorted(set(cfg_a) | set(cfg_b)):
        if key != "rootfs" and cfg_a.get(key) != cfg_b.get(key):
            diffs.append({"where": f"config.{key}", "a": cfg_a.get(key), "b": cfg_b.get(key)})
    ids_a, ids_b = cfg_a["rootfs"]["diff_ids"], cfg_b["rootfs"]["diff_ids"]
    for index in range(max(len(ids_a), len(ids_b))):
        da = ids_a[index] if index < len(ids_a) else None
        db = ids_b[index] if index < len(ids_b) else None
        if da == db:
            continue
        where = f"layer {index}"
        ea = _entries(a / "blobs" / "sha256" / man_a["layers"][index]["digest"].split(":", 1)[1]) if da else {}
        eb = _entries(b / "blobs" / "sha256" / man_b["layers"][index]["digest"].split(":", 1)[1]) if db else {}
        files = []
        for name in sorted(set(ea) | set(eb)):
            if ea.get(name) != eb.get(name):
                fields = sorted(k for k in (ea.get(name) or eb.get(name) or {})
                                if (ea.get(name) or {}).get(k) != (eb.get(name) or {}).get(k))
                files.append({"path": name, "differs": fields if name in ea and name in eb else ["only in " + ("a" if name in ea else "b")],
                              "a": ea.get(name), "b": eb.get(name)})
        if not files and list(ea) != list(eb):
            files.append({"path": "(entry order)", "differs": ["order"], "a": None, "b": None})
        diffs.append({"where": where, "a": da, "b": db, "files": files[:limit], "files_differing": len(files)})
        break  # later layers usually differ because this one does
    if not diffs and man_a != man_b:
        diffs.append({"where": "manifest", "a": man_a.get("annotations"), "b": man_b.get("annotations")})
    return report


def summary_line(report: dict[str, Any]) -> str:
    if report["identical"]:
        return f"identical: {report['a']}"
    first = report["differences"][0] if report["differences"] else {"where": "manifest"}
    layer = next((d for d in report["differences"] if d.get("files")), None)
    if layer:
        f = layer["files"][0]
        return (f"{layer['where']} ({str(layer['a'])[:19]} vs {str(layer['b'])[:19]}): {f['path']} "
                f"differs in {', '.join(f['differs'])}" + (f" (first difference: {first['where']})" if first is not layer else ""))
    return f"{first['where']} differs"
