"""A small, real release bundle: genuine wheels (minimal PEP 427 writer), a Dockerfile and gate JSON.

For tests and the benchmark, and as a worked example of the bundle format for the stages that feed the
publisher. Wheels are deterministic (fixed zip times, sorted members, RECORD last).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zipfile
from pathlib import Path

from cairn.matrix.bundle import write_bundle_json
from cairn.paths import releases_dir

EPOCH_ZIP = (2023, 11, 14, 22, 13, 20)


def write_wheel(directory: Path, name: str, version: str, tag: str, files: dict[str, bytes], requires_python: str = ">=3.9") -> Path:
    """A valid wheel with ``files`` plus METADATA, WHEEL and RECORD."""
    dist = f"{name.replace('-', '_')}-{version}"
    members = dict(files)
    members[f"{dist}.dist-info/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                            f"Requires-Python: {requires_python}\nSummary: cairn sample\n\n").encode()
    members[f"{dist}.dist-info/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: cairn\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    record = []
    for path, data in sorted(members.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    members[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out = directory / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        order = sorted(p for p in members if ".dist-info/" not in p) + sorted(p for p in members if ".dist-info/" in p and not p.endswith("RECORD"))
        for path in [*order, f"{dist}.dist-info/RECORD"]:
            info = zipfile.ZipInfo(path, EPOCH_ZIP)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, members[path])
    return out


def write_sample_bundle(root: Path, *, version: str = "5.2.3", channel: str = "dev", families: tuple[str, ...] | None = None,
                        gates: dict[str, dict[str, str]] | None = None, payload_bytes: int = 2048,
                        wheels_per_family: int = 1, seed: str = "",
                        images: dict[str, tuple[str, str]] | None = None, engine: tuple[str, ...] = (),
                        partial: dict[str, list[str]] | None = None) -> Path:
    """A bundle with one cell per family. ``gates[gfx][gate] = status`` (default: static-coverage passed).

    ``engine``: the families that also ship the llama.cpp engine, as a build does — a cell of its own
    (``llama-cpp-python``: its wheel, its ``cairn/llama-cpp`` image and that image's gates, ``gates[gfx]`` as
    well), the smoke wheel then belonging to the smoke cell alone. ``partial[gfx]``: the libraries each cell of
    the family names as partial (``smoke``) — for the engine's cell, those of them its binaries load.

    ``payload_bytes`` of incompressible data go into each wheel; ``seed`` changes every byte (a new build).
    ``images[family] = (reference, digest)`` names a real pushed image instead of a made-up one.
    ``families`` defaults to the families of the legacy Debian 12 release (single-target families: the
    registry and the manifests are the only places gfx lists live).
    """
    if families is None:
        # lazy: cairn.model, 17 ms at start-up (python -X importtime)
        from cairn.model.manifest import load_manifest

        families = load_manifest(releases_dir() / "rocm-5.2.3.toml").release.families
    root = Path(root)
    (root / "files" / "wheels").mkdir(parents=True, exist_ok=True)
    (root / "files" / "dockerfiles").mkdir(parents=True, exist_ok=True)
    (root / "gates").mkdir(parents=True, exist_ok=True)
    artifacts, cells = [], []
    for family in families:
        names = []
        for n in range(wheels_per_family):
            project = "cairn-smoke" if n == 0 else f"cairn-extra{n}"
            blob = hashlib.shake_256(f"{seed}{family}{n}".encode()).digest(payload_bytes) if payload_bytes else b""
            wheel = write_wheel(root / "files" / "wheels", project, version, "py3-none-linux_x86_64",
                                {f"{project.replace('-', '_')}/__init__.py": f"TARGET = {family!r}\n".encode(),
                                 f"{project.replace('-', '_')}/lib/payload-{family}.bin": blob})
            fam_dir = root / "files" / "wheels" / family
            fam_dir.mkdir(exist_ok=True)
            os.replace(wheel, fam_dir / wheel.name)
            names.append(f"wheels/{family}/{wheel.name}")
            artifacts.append({"path": f"wheels/{family}/{wheel.name}", "kind": "wheel", "family": family, "cells": [family],
                              "recipe": "recipes/hip/smoke"})
        dockerfile = root / "files" / "dockerfiles" / family / "Dockerfile"
        dockerfile.parent.mkdir(parents=True, exist_ok=True)
        dockerfile.write_text(f"FROM cairn/base:debian-12\nCOPY {Path(names[0]).name} /tmp/\nRUN pip install /tmp/*.whl\nENV CAIRN_TARGET={family}\n")
        artifacts.append({"path": f"dockerfiles/{family}/Dockerfile", "kind": "dockerfile", "family": family, "cells": [family],
                          "content_type": "text/plain; charset=utf-8"})
        digest = "sha256:" + hashlib.sha256(f"{seed}image-{family}".encode()).hexdigest()
        reference = f"127.0.0.1:5000/cairn/smoke:{version}-{family}"
        if images and family in images:
            reference, digest = images[family]
        requirements = {"driver": {"minimum": "5.18", "below": "", "note": "ROCm 5.2 KFD ABI"},
                        "kernel": {"minimum": "5.15", "below": "", "note": ""}}
        cells.append({"gfx_target": family, "family": family, "os": "debian-12", "python": "3.11",
                      "framework": "cairn-smoke", "framework_version": "0.1.0",
                      "images": [{"reference": reference, "digest": digest}],
                      "partial": list((partial or {}).get(family, [])), "requirements": requirements})
        results = (gates or {}).get(family, {"static-coverage": "passed"})
        for gate, status in results.items():
            (root / "gates" / f"{family}-{gate}.json").write_text(json.dumps({
                "image_digest": digest, "gate": gate, "status": status,
                "reason": "" if status == "passed" else f"{gate} {status} on {family}", "evidence": {"sample": True}}, indent=1))
        if family in engine:
            for artifact in artifacts:
                if artifact["path"] in names:
                    artifact["framework"] = "cairn-smoke"
            wheel = write_wheel(root / "files" / "wheels", "llama-cpp-python", f"0.3.36+rocm.{version}", "py3-none-linux_x86_64",
                                {"llama_cpp/__init__.py": b"__version__ = '0.3.36'\n",
                                 f"llama_cpp/lib/libggml-hip-{family}.bin": hashlib.shake_256(f"{seed}llama{family}".encode()).digest(64)},
                                requires_python=">=3.11")
            os.replace(wheel, root / "files" / "wheels" / family / wheel.name)
            artifacts.append({"path": f"wheels/{family}/{wheel.name}", "kind": "wheel", "family": family, "cells": [family],
                              "recipe": f"package:llama-cpp-python@{family}", "framework": "llama-cpp-python"})
            engine_digest = "sha256:" + hashlib.sha256(f"{seed}llama-image-{family}".encode()).hexdigest()
            cells.append({"gfx_target": family, "family": family, "os": "debian-12", "python": "3.11",
                          "framework": "llama-cpp-python", "framework_version": f"0.3.36+rocm.{version}",
                          "images": [{"reference": f"127.0.0.1:5000/cairn/llama-cpp:{version}-{family}", "digest": engine_digest}],
                          "partial": [p for p in (partial or {}).get(family, []) if "rocblas" in p or "hipblas" in p],
                          "requirements": requirements})
            for gate, status in results.items():
                (root / "gates" / f"{family}-llama-{gate}.json").write_text(json.dumps({
                    "image_digest": engine_digest, "gate": gate, "status": status,
                    "reason": "" if status == "passed" else f"{gate} {status} on {family}", "evidence": {"sample": True}}, indent=1))
    write_bundle_json(root, {
        "release": {"name": "cairn-default", "version": version, "channel": channel, "source_date_epoch": 1700000000,
                    "manifest_sha256": hashlib.sha256(b"sample manifest").hexdigest(),
                    "required_gates": {"dev": ["static-coverage"], "nightly": ["static-coverage", "in-container"],
                                       "prerelease": ["static-coverage", "in-container"],
                                       "stable": ["static-coverage", "in-container", "gpu"]}},
        "builder": {"id": "https://cairn.invalid/builder/local", "invocation": "sample"},
        "pins": {"hip-runtime": "deb:libamdhip64-5=5.2.3-8"},
        "artifacts": artifacts, "cells": cells,
    })
    return root
