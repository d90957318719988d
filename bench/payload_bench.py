"""Installed payload benchmark: what one GPU's SDK libraries take on disk once pip has unpacked them — split
libraries zero-filled in place (the layout before compaction) vs compacted, and the family wheel's payload.

    python bench/payload_bench.py --out bench/results/payload.json [--store .cairn] [--target gfx1151 ...]
                                  [--image IMAGE]

Reads a built store (only reads it; scratch space is a temporary directory in it). For each ``--target`` it
unpacks the store's ``rocm-sdk-libraries-<family>`` wheel as pip installs it — every member a file of its
uncompressed size — and reads the one-target payload three ways:

* ``zero_filled``: the device wheel's payload as the in-place split wrote it (``split_tree(…, compacted=False)``
  of the family payload; for a family of one target, the family payload itself, as the device action repacks it);
* ``compacted``: ``split_tree(…)`` of the same family payload with compaction (``cairn.audit.compact``);
* ``family``: the family wheel's payload as unpacked (every target of the family).

For each: installed bytes (sum of file sizes), bytes on disk (allocated blocks), all-zero 4 KiB pages inside
ELF files, and what the bytes are — the device code the target runs (the stored bytes of the offload
bundles left in ``.hip_fatbin`` plus the per-target data files named for it), the host code (every ELF byte
outside ``.hip_fatbin``) and the other, target-neutral files. The figure of merit is
``ratio = installed / (device code + host code + target-neutral files)``: 1.0 when nothing but what the GPU
runs and the host code is installed; goal ``<= 1.5``. With ``--image`` (the toolchain image, whose glibc the
7.2.4 libraries need), every ELF of the compacted payload is dlopened there beside the store's
``rocm-sdk-core`` wheel, unpacked the same way, and the result recorded.

The store's family wheel was written by the code that built the store: when it is already compacted, the
zero-filled figures are those of the in-place split of that payload — the same bytes as a payload never
compacted only when the store predates compaction (recorded as ``family_layout``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from device_wheels_bench import TARGET_NAMED, family_of, outputs, the_wheel
from machine import describe

from cairn.audit.binary import audit_file, is_elf
from cairn.audit.model import FATBIN
from cairn.audit.split_tree import split_tree
from cairn.wheels.sdk import LIBRARIES, ROOTS

ROOT = Path(__file__).resolve().parents[1]
PAGE = 4096


def unpack(wheel: Path, dest: Path) -> Path:
    """The wheel's files under ``dest`` as pip writes them (regular files; modes as recorded)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            out = dest / info.filename
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(out, mode)
    return dest


def zero_pages(path: Path) -> int:
    count = 0
    blank = bytes(PAGE)
    with open(path, "rb") as handle:
        while block := handle.read(PAGE << 8):
            count += sum(1 for at in range(0, len(block), PAGE) if block[at : at + PAGE] == blank)
    return count


def measure(tree: Path, target: str) -> dict[str, object]:
    """Bytes of one installed payload, by what they are."""
    figures = {"files": 0, "installed_bytes": 0, "on_disk_bytes": 0, "elf_zero_pages": 0, "device_code_bytes": 0,
               "device_data_bytes": 0, "host_code_bytes": 0, "neutral_bytes": 0, "fatbin_section_bytes": 0,
               "fat_binaries": 0}
    targets: set[str] = set()
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
        info = path.stat()
        figures["files"] += 1
        figures["installed_bytes"] += info.st_size
        figures["on_disk_bytes"] += info.st_blocks * 512
        if is_elf(path):
            figures["elf_zero_pages"] += zero_pages(path)
            audit = audit_file(path)
            section = 0
            if audit.kind == FATBIN and audit.bundles:
                figures["fat_binaries"] += 1
                section = audit.fatbin_end - audit.bundles[0].file_offset + audit.bundles[0].offset
                figures["fatbin_section_bytes"] += section
                figures["device_code_bytes"] += sum(b.size for b in audit.bundles)
                targets.update(audit.targets)
            figures["host_code_bytes"] += info.st_size - section
        elif ".dist-info/" not in path.as_posix() and TARGET_NAMED.search(path.name):
            figures["device_data_bytes"] += info.st_size
        else:
            figures["neutral_bytes"] += info.st_size
    essential = sum(figures[k] for k in ("device_code_bytes", "device_data_bytes", "host_code_bytes", "neutral_bytes"))
    return {**figures, "essential_bytes": essential, "ratio": round(figures["installed_bytes"] / essential, 3),
            "targets_in_fat_binaries": sorted(targets)}


def load_all(image: str, site: Path) -> dict[str, object]:
    """dlopen every ELF under ``site`` in ``image`` (no network); the names of those that fail."""
    script = r"""
import ctypes, os, sys, json
root = "/site"
done, failed = 0, {}
for base, _, files in sorted(os.walk(root)):
    for name in sorted(files):
        path = os.path.join(base, name)
        with open(path, "rb") as handle:
            head = handle.read(20)
        if head[:4] != b"\x7fELF" or head[18:20] != b"\x3e\x00" or ".so" not in name:
            continue  # host (x86-64) shared objects only: not code objects, not executables
        try:
            ctypes.CDLL(path)
            done += 1
        except OSError as exc:
            failed[path[len(root) + 1:]] = str(exc)[-200:]
print(json.dumps({"loaded": done, "failed": failed}))
"""
    run = subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{site}:/site:ro", image,
                          "python3", "-c", script], capture_output=True, text=True, timeout=1800)
    if run.returncode:
        return {"error": run.stderr.strip()[-400:]}
    return {"image": image, **json.loads(run.stdout.strip().splitlines()[-1])}


def bench_target(trees: dict[str, Path], target: str, scratch: Path, image: str | None, core: Path) -> dict[str, object]:
    family, targets = family_of(target)
    family_wheel = the_wheel(trees[f"package:rocm-sdk-libraries@{family}"])
    site = scratch / target / "family"
    unpack(family_wheel, site)
    root = ROOTS[LIBRARIES]
    family_tree = site / root
    runs: dict[str, object] = {}
    payloads = {}
    for layout, compacted in (("zero_filled", False), ("compacted", True)):
        out = scratch / target / layout
        started = time.perf_counter()
        if len(targets) == 1 and not compacted:
            payload = family_tree  # the device action repacks a family of one as it is
            seconds = 0.0
        else:
            out.mkdir(parents=True)
            report = split_tree(family_tree, out / root, target, compacted=compacted)
            payload = Path(report.dest)
            seconds = round(time.perf_counter() - started, 1)
            runs[f"{layout}_layouts"] = sorted({lib.layout for lib in report.libraries})
            notes = sorted({lib.layout_note for lib in report.libraries if lib.layout_note})
            if notes:
                runs[f"{layout}_notes"] = notes
        payloads[layout] = payload
        runs[layout] = {**measure(payload, target), "split_seconds": seconds}
    runs["family"] = measure(family_tree, target)
    zero, compact, fam = runs["zero_filled"], runs["compacted"], runs["family"]
    runs["family_layout"] = "zero-filled" if fam["elf_zero_pages"] * PAGE > fam["fatbin_section_bytes"] // 4 else "compacted"  # type: ignore[index, operator]
    runs["ratio_compacted_to_zero_filled"] = round(compact["installed_bytes"] / zero["installed_bytes"], 3)  # type: ignore[index]
    runs["ratio_compacted_to_family"] = round(compact["installed_bytes"] / fam["installed_bytes"], 3)  # type: ignore[index]
    runs.update({"family": fam, "family_name": family, "family_targets": list(targets), "family_wheel": family_wheel.name,
                 "family_wheel_bytes": family_wheel.stat().st_size})
    if image:  # compaction must add no load failure: the same libraries, zero-filled, are loaded the same way
        for layout in ("zero_filled", "compacted"):
            loaded = scratch / target / f"load-{layout}"
            shutil.copytree(payloads[layout], loaded / root, symlinks=True)
            unpack(core, loaded)
            runs[f"load_{layout}"] = load_all(image, loaded)
            shutil.rmtree(loaded)
        runs["load_same"] = runs["load_zero_filled"] == runs["load_compacted"]
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".cairn")
    parser.add_argument("--target", action="append", help="gfx target (repeatable; default gfx1151)")
    parser.add_argument("--image", help="toolchain image to dlopen the compacted libraries in (docker)")
    args = parser.parse_args()
    targets = args.target or ["gfx1151"]
    trees = outputs(args.store)
    core = the_wheel(trees["package:rocm-sdk-core"])
    with tempfile.TemporaryDirectory(prefix="cairn-payload-bench-", dir=args.store) as scratch:
        runs = {target: bench_target(trees, target, Path(scratch), args.image, core) for target in targets}
    doc = {"bench": "payload", "command": "python bench/payload_bench.py " + " ".join(sys.argv[1:]),
           "machine": describe(), "goal": "installed <= 1.5 x (device code + host code + target-neutral files)",
           "targets": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    for target, run in runs.items():
        for layout in ("zero_filled", "compacted", "family"):
            m = run[layout]
            print(f"{target} {layout}: {m['installed_bytes'] / 1e6:.1f} MB installed, {m['on_disk_bytes'] / 1e6:.1f} MB on "
                  f"disk, ratio {m['ratio']} (device {m['device_code_bytes'] / 1e6:.1f} + data {m['device_data_bytes'] / 1e6:.1f}"
                  f" + host {m['host_code_bytes'] / 1e6:.1f} + neutral {m['neutral_bytes'] / 1e6:.1f} MB)")
        for layout in ("zero_filled", "compacted"):
            if f"load_{layout}" in run:
                print(f"{target} {layout} payload in {args.image}: {run[f'load_{layout}']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
