"""Device wheels benchmark: what a user with one GPU downloads for the SDK libraries — its device wheel vs
the family wheel they would otherwise install.

    python bench/device_wheels_bench.py --out bench/results/device_wheels.json [--store .cairn]
                                        [--target gfx1100 --target gfx1151 ...]

Reads the store (only reads it; scratch space is a temporary directory in it): the ``rocm-sdk-libraries-<family>``
wheel of each target's family, the ``rocm-sdk-core`` wheel and the SDK tree, found through the store's action
records, so a store whose build is still running can be benched too.
For each ``--target`` it makes ``rocm-sdk-device-<target>`` from the family wheel exactly as the
``package:rocm-sdk-device@<target>`` action does (``cairn.wheels.device.build_device_wheel``, into a scratch
directory; its variant twin is written too and timed with it) and reports: bytes of the device wheel and of the
family wheel, their ratio (the goal: at most one third), the same with ``rocm-sdk-core`` added (what
``pip install "rocm-sdk[device-<gfx>]"`` vs ``"rocm-sdk[<family>]"`` downloads), the seconds the cut took, and
what the device wheel's audit says (covered or partial), and where each wheel's bytes go (``bytes_by_kind``:
device code, per-target data files, and the host code and target-neutral files every GPU's download carries —
the floor no split of device code can go below). A third side is the libraries as Debian ships them,
fat with every target's code, packed by the same wheel writer: what a user downloads from an index that
serves one wheel for every GPU.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from machine import describe

from cairn.audit import audit_paths
from cairn.model.targets import load_registry
from cairn.stages import STAGES
from cairn.wheels.device import build_device_wheel, device_name

ROOT = Path(__file__).resolve().parents[1]


def outputs(store: Path) -> dict[str, Path]:
    """Action id → its output tree, from the store's action records (the newest record of an action wins)."""
    found: dict[str, tuple[float, Path]] = {}
    for record in (store / "ac").glob("*.json"):
        data = json.loads(record.read_text())
        tree = store / "trees" / data["output"]
        when = record.stat().st_mtime
        if tree.is_dir() and when >= found.get(data["action"], (0.0, tree))[0]:
            found[data["action"]] = (when, tree)
    return {action: tree for action, (_, tree) in found.items()}


def the_wheel(tree: Path) -> Path:
    (wheel,) = sorted((tree / "wheels").glob("*.whl"))
    return wheel


TARGET_NAMED = re.compile(r"gfx[0-9]+[0-9a-f]*")


def bytes_by_kind(wheel: Path) -> dict[str, int]:
    """A wheel's bytes as a user downloads them (each member's compressed size, plus the archive's own headers),
    by what they are: ``device_code``, the stored size of the fat binaries' offload bundles (already compressed,
    so deflate leaves them as they are); ``target_data``, files whose path names a gfx target (Tensile's code
    objects and kernel tables, kernel databases); and ``host_and_neutral``, the rest — host code and
    target-neutral files, which the download for any one GPU carries whole."""
    stored = {found.path.split("!", 1)[1]: sum(b.size for b in found.bundles) for found in audit_paths([wheel]).binaries}
    kinds = {"device_code": 0, "target_data": 0, "host_and_neutral": 0}
    with zipfile.ZipFile(wheel) as archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
    for info in members:
        device = min(stored.get(info.filename, 0), info.compress_size)
        if device:
            kinds["device_code"] += device
            kinds["host_and_neutral"] += info.compress_size - device
        elif ".dist-info/" not in info.filename and TARGET_NAMED.search(info.filename):
            kinds["target_data"] += info.compress_size
        else:
            kinds["host_and_neutral"] += info.compress_size
    kinds["host_and_neutral"] += wheel.stat().st_size - sum(info.compress_size for info in members)
    return kinds


def family_of(target: str) -> tuple[str, tuple[str, ...]]:
    """The default release's family holding ``target``, and that family's targets."""
    from cairn.model.manifest import load_manifest
    from cairn.paths import releases_dir

    registry = load_registry()
    for family in load_manifest(releases_dir() / "default.toml", registry).release.families:
        targets = registry.expand(family)
        if target in targets:
            return family, targets
    raise SystemExit(f"{target} is in no family of the default release")


def bench_target(trees: dict[str, Path], target: str, core: Path, scratch: Path) -> dict[str, object]:
    family, targets = family_of(target)
    family_wheel = the_wheel(trees[f"package:rocm-sdk-libraries@{family}"])
    tree = scratch / target / "family"
    (tree / "wheels").mkdir(parents=True)
    (tree / "wheels" / family_wheel.name).symlink_to(family_wheel)
    out = scratch / target / "out"
    out.mkdir()
    inputs = {"family": family, "target": target, "family_targets": list(targets), "sdk_version": "0",
              "release": "bench", "source_date_epoch": 1700000000}
    started = time.perf_counter()
    wheel = build_device_wheel(out, tree, inputs, io.StringIO())
    seconds = round(time.perf_counter() - started, 1)
    report = json.loads((out / "report.json").read_text())
    kinds = {"device": bytes_by_kind(wheel), "family": bytes_by_kind(family_wheel)}
    device_bytes, family_bytes, core_bytes = wheel.stat().st_size, family_wheel.stat().st_size, core.stat().st_size
    return {
        "family": family, "family_targets": list(targets), "family_wheel": family_wheel.name,
        "device_wheel": device_name(target),
        "bytes": {"device": device_bytes, "family": family_bytes, "core": core_bytes},
        "ratio_libraries": round(device_bytes / family_bytes, 3),
        "ratio_with_core": round((device_bytes + core_bytes) / (family_bytes + core_bytes), 3),
        "bytes_by_kind": kinds,
        # what no split of device code goes below, and what three targets' code costs beside one target's
        "floor_ratio": round(kinds["device"]["host_and_neutral"] / family_bytes, 3),
        "device_code_ratio": round(kinds["family"]["device_code"] / max(kinds["device"]["device_code"], 1), 2),
        "cut_seconds": seconds, "split": len(targets) > 1,
        "covered": report["audit"]["coverage"][target]["covered"],
        "partial": report["audit"]["partial"].get(target, []),
    }


def fat_wheel(store: Path, trees: dict[str, Path], scratch: Path) -> dict[str, object]:
    """The expansion libraries as Debian ships them — every target's code — staged and packed by the same code
    as the family wheels (``cairn.wheels.sdk.stage_part`` and the one wheel writer), with no split."""
    from cairn.formats import elf
    from cairn.model.manifest import load_manifest
    from cairn.paths import releases_dir
    from cairn.plan.prepare import make_plan
    from cairn.plan.probe import Host
    from cairn.wheels import sdk
    from cairn.wheels.wheelfile import Metadata, write_wheel

    registry = load_registry()
    manifest = load_manifest(releases_dir() / "default.toml", registry)
    host = Host(tools=frozenset({"git", "pip", "patchelf", "apt-get", "dpkg-deb", "docker", "mmdebstrap"}))
    family = manifest.release.families[0]
    action = make_plan(manifest, registry, [family], host=host, stages=STAGES).by_id()[f"package:rocm-sdk-libraries@{family}"]
    owned = sdk.expansion_paths(trees[d] for d in action.deps if d.startswith("build:"))
    root = sdk.ROOTS[sdk.LIBRARIES]
    out = scratch / "fat"
    out.mkdir()
    started = time.perf_counter()
    staged = sdk.stage_part(trees["assemble:sdk"], sdk.LIBRARIES, out, io.StringIO(), expansion_owned=owned,
                            rpaths=lambda d: elf.origin_rpath(f"{root}/{d}", f"{root}/lib", f"{sdk.ROOTS[sdk.CORE]}/lib"))
    wheel = write_wheel(out / "wheels", Metadata(name="rocm-sdk-libraries-all", version="0"), "py3-none-linux_x86_64",
                        sdk.members_of(staged), source_date_epoch=1700000000)
    return {"bytes": wheel.stat().st_size, "seconds": round(time.perf_counter() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn")
    parser.add_argument("--target", action="append", help="gfx target (repeatable; default gfx1100 and gfx1151)")
    args = parser.parse_args()
    targets = args.target or ["gfx1100", "gfx1151"]
    trees = outputs(args.store)
    core = the_wheel(trees["package:rocm-sdk-core"])
    with tempfile.TemporaryDirectory(prefix="cairn-device-bench-", dir=args.store) as scratch:
        runs = {target: bench_target(trees, target, core, Path(scratch)) for target in targets}
        fat = fat_wheel(args.store, trees, Path(scratch))
    for run in runs.values():
        run["ratio_to_fat"] = round(run["bytes"]["device"] / fat["bytes"], 3)  # type: ignore[index]
    doc = {"bench": "device_wheels", "command": "python bench/device_wheels_bench.py " + " ".join(sys.argv[1:]),
           "machine": describe(), "goal": "device wheel <= 1/3 of the family wheel", "targets": runs, "fat": fat}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    for target, run in runs.items():
        b = run["bytes"]
        print(f"{target} ({run['family']}): {run['device_wheel']} {b['device'] / 1e6:.1f} MB vs {run['family_wheel']} "  # type: ignore[index]
              f"{b['family'] / 1e6:.1f} MB — {run['ratio_libraries']}x (with core {run['ratio_with_core']}x), "  # type: ignore[index]
              f"cut in {run['cut_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
