"""Container figures: registry bytes for every image of a build vs the sum of image sizes, and build time.

    python bench/containers_bench.py --out bench/results/containers.json [--store .cairn]

Reads ``<store>/last-build.json`` (run ``cairn build`` first, with the containers stage). Registry bytes
count each distinct blob once, as a registry stores it; the goal is ≤ 1.2× one image for all targets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from machine import describe


def recorded_seconds(store: Path) -> dict[tuple[str, str], float]:
    """(action, output) → seconds of the run that made it (a cached action's record keeps its first run's time)."""
    found = {}
    for path in (store / "ac").glob("*.json"):
        record = json.loads(path.read_text())
        found[(record["action"], record["output"])] = record.get("seconds", 0.0)
    return found


def measure(store: Path) -> dict:
    build = json.loads((store / "last-build.json").read_text())
    seconds = recorded_seconds(store)
    images, blobs = [], {}
    for action_id, info in sorted(build["actions"].items()):
        if not action_id.startswith("image:") or not info.get("output") or action_id == "image:base":
            continue
        tree = store / "trees" / info["output"]
        record = json.loads((tree / "image.json").read_text())
        manifest_blob = tree / "oci" / "blobs" / "sha256" / record["digest"].split(":", 1)[1]
        config_blob = tree / "oci" / "blobs" / "sha256" / record["config_digest"].split(":", 1)[1]
        size = sum(x["size"] for x in record["layers"]) + manifest_blob.stat().st_size + config_blob.stat().st_size
        for layer in record["layers"]:
            blobs[layer["digest"]] = layer["size"]
        blobs[record["digest"]] = manifest_blob.stat().st_size
        blobs[record["config_digest"]] = config_blob.stat().st_size
        images.append({"image": action_id, "digest": record["digest"], "bytes": size,
                       "layers": [x["size"] for x in record["layers"]],
                       "build_seconds": round(seconds.get((action_id, info["output"]), info.get("seconds") or 0.0), 1)})
    base = build["actions"].get("image:base", {})
    base_seconds = round(seconds.get(("image:base", base.get("output", "")), 0.0), 1)
    total = sum(i["bytes"] for i in images)
    registry = sum(blobs.values())
    largest = max((i["bytes"] for i in images), default=0)
    return {
        "schema": "cairn.bench.containers/v1",
        "images": images,
        "sum_of_image_bytes": total,
        "registry_bytes": registry,
        "largest_image_bytes": largest,
        "registry_vs_one_image": round(registry / largest, 3) if largest else None,
        "goal": "registry_vs_one_image <= 1.2",
        "base_build_seconds": base_seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path(".cairn"))
    args = parser.parse_args()
    if not (args.store / "last-build.json").exists():
        print(f"no build in {args.store} — run `nox -s build` (or cairn build) first", file=sys.stderr)
        return 2
    result = {**measure(args.store), "command": "python bench/containers_bench.py " + " ".join(sys.argv[1:]), "machine": describe()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".containers.")
    with os.fdopen(fd, "w") as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, args.out)
    for image in result["images"]:
        print(f"{image['image']:<24} {image['bytes'] / 1e6:8.1f} MB  {image['build_seconds']:6.1f} s  {image['digest'][:19]}")
    print(f"image:base build {result['base_build_seconds']} s (mmdebstrap + normalization)")
    print(f"{len(result['images'])} images: sum {result['sum_of_image_bytes'] / 1e6:.1f} MB, registry "
          f"{result['registry_bytes'] / 1e6:.1f} MB = {result['registry_vs_one_image']}x the largest image")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
