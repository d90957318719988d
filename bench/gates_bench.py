"""Static gate benchmark: the images of some targets, each layer read per gate vs layer scans kept by digest.

    python bench/gates_bench.py --out bench/results/gates.json [--store .cairn] [--target gfx942 --target gfx1151]

Reads the store (only reads it): every image built for each ``--target`` (runtime, smoke, llama.cpp, JAX, ...). Side "per gate": the static gate of each image reads every layer of the image, as each gate did
before layer scans. Side "layer scans": the same gates in the same order with an empty scan cache, so the
first gate that meets a layer scans it and the gates after it replay the scan (what a cold ``cairn build``
does). Both sides must give every image the same verdict and reason, or the bench fails. Reported: seconds
per image and side, totals, and how many layer scans each side made.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from machine import describe

import cairn.audit.layers as layers
from cairn.gates.static import static_gate

ROOT = Path(__file__).resolve().parents[1]


Image = tuple[str, Path, str, tuple[str, ...], str]  # (name@target, OCI layout, rocm, partial, target)


def images_of(store: Path, target: str) -> list[Image]:
    """(image, OCI layout, rocm, partial) for every image built for ``target`` in the store, runtime first.

    Read from the store's trees (each image's ``image.json``), so a build still running can be benched too;
    ``partial``: what the family's libraries wheel recorded as built without ``target`` (its ``report.json``),
    as ``cairn.gates.run._known_partial`` tells the gate."""
    trees = store / "trees"
    found = []
    partial: tuple[str, ...] = ()
    for tree in sorted(trees.iterdir()):
        if (tree / "image.json").is_file() and (tree / "oci" / "index.json").is_file():
            record = json.loads((tree / "image.json").read_text())
            if record.get("target") == target:
                found.append((f"{record['name']}@{target}", tree / "oci", str(record["rocm"]), record.get("kind") != "runtime"))
        elif (tree / "report.json").is_file():
            report = json.loads((tree / "report.json").read_text())
            audit = report.get("audit") if isinstance(report, dict) else None
            if isinstance(audit, dict) and target in (audit.get("partial") or {}):
                partial = tuple(audit["partial"][target])
    return [(name, layout, rocm, partial, target) for name, layout, rocm, _ in sorted(found, key=lambda f: (f[3], f[0]))]


def run_side(images: list[Image], cache: Path | None) -> dict[str, object]:
    scans = 0
    real = layers.scan_blob

    def counting(blob: Path, audit: layers.Auditor) -> layers.LayerScan:
        nonlocal scans
        scans += 1
        return real(blob, audit)

    layers.scan_blob = counting  # type: ignore[assignment]
    try:
        per_image = {}
        verdicts = {}
        for image_id, layout, rocm, partial, target in images:
            started = time.perf_counter()
            status, reason, _ = static_gate(layout, target, rocm, partial, cache=cache)
            per_image[image_id] = round(time.perf_counter() - started, 2)
            verdicts[image_id] = [status, reason.replace(str(layout), "<layout>")]
    finally:
        layers.scan_blob = real  # type: ignore[assignment]
    return {"seconds": per_image, "total_seconds": round(sum(per_image.values()), 2), "layer_scans": scans,
            "verdicts": verdicts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn")
    parser.add_argument("--target", action="append", help="a gfx target whose images to gate (repeatable; default gfx942 and gfx1151)")
    args = parser.parse_args()
    targets = args.target or ["gfx942", "gfx1151"]
    images = [image for target in targets for image in images_of(args.store.resolve(), target)]
    missing = [t for t in targets if not any(image[4] == t for image in images)]
    if missing:
        raise SystemExit(f"no image built for {', '.join(missing)} in {args.store}")
    before = run_side(images, None)
    with tempfile.TemporaryDirectory(prefix="cairn-gates-bench-") as cache:
        after = run_side(images, Path(cache))
    if before["verdicts"] != after["verdicts"]:
        print(json.dumps({"per gate": before["verdicts"], "layer scans": after["verdicts"]}, indent=1), file=sys.stderr)
        raise SystemExit("the two sides gave different verdicts")
    doc = {"bench": "gates", "command": "python bench/gates_bench.py " + " ".join(sys.argv[1:]), "machine": describe(),
           "targets": targets, "images": len(images),
           "sides": {"per gate": before, "layer scans": after},
           "speedup": round(float(before["total_seconds"]) / float(after["total_seconds"]), 2)}  # type: ignore[arg-type]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"{len(images)} images of {', '.join(targets)} (seconds: per gate, layer scans):")
    for image_id in before["seconds"]:  # type: ignore[attr-defined]
        print(f"  {image_id:44} {before['seconds'][image_id]:>8.2f}s {after['seconds'][image_id]:>8.2f}s")  # type: ignore[index]
    print(f"  {'total (per gate / layer scans)':44} {before['total_seconds']:>8.2f}s {after['total_seconds']:>8.2f}s"
          f"   {doc['speedup']}x; layer scans made: {before['layer_scans']} / {after['layer_scans']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
