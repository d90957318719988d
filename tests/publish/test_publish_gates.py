"""Gate verdicts in a release: the reason a gate did not run is the real one, and a verdict reported after
staging (the GPU gate, run on a GPU host, signed by its runner's key) is recorded by ``cairn promote --gates``
before the channel moves. The attacks on that record (hand-written, untrusted, tampered verdicts) are in
tests/gates/test_gate_attestations.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from securesystemslib.signer import CryptoSigner
from tuf.api.serialization.json import JSONSerializer

from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.prepare import make_plan
from cairn.publish.run import run_bundle
from cairn.publish.sample import write_sample_bundle
from cairn.sign import attest, runners
from cairn.sign.keys import init_keys, make_root
from cairn.stages import chosen
from support import LEGACY_MANIFEST, ROOT, cairn

RUNNER = CryptoSigner.generate_ed25519()  # the GPU runner's key (cairn keys runner)


def test_unplanned_gpu_gate_names_what_the_plan_lacked_not_the_hosts_gpu(tmp_path):
    """Without the containers stage no image (so no GPU gate) is planned: saying "no AMD GPU on this host"
    would blame hardware that was never asked; the bundle says what the plan lacked."""
    registry = load_registry()
    manifest = load_manifest(LEGACY_MANIFEST, registry)
    plan = make_plan(manifest, registry, stages=chosen(["wheels", "bundle"]))
    action = next(a for a in plan.actions if a.id == "bundle:release")
    run_bundle(SimpleNamespace(action=action, out=tmp_path, deps={}, log=io.StringIO()))
    target = "gfx90a"
    gpu = json.loads((tmp_path / "gates" / f"gpu--none@{target}.json").read_text())
    assert gpu["status"] == "not-run"
    assert "GPU on this host" not in gpu["reason"]
    assert gpu["reason"] == f"not-run: no gpu gate was planned for {target}: the plan has no image for {target}"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """A release key set that trusts one GPU runner (``RUNNER``) for the gpu gate on every target."""
    keyset = init_keys(tmp_path_factory.mktemp("keys") / "k")
    root = make_root(keyset)
    (keyset.directory / "root.json").write_bytes(root.to_bytes(JSONSerializer(compact=False)))
    public = RUNNER.public_key
    runners.trust(keyset.directory, root, keyset.signer("targets"), {"keyid": public.keyid, **public.to_dict()}, "gpu-runner", ["gpu"], [])
    return keyset.directory


def staged(tmp_path: Path, keys: Path) -> tuple[list[str], dict[str, str]]:
    """A release staged with the GPU gate not run (as on a host without a GPU); returns the --to/--keys
    arguments and each target's image digest."""
    families = ("gfx90a", "gfx908")
    bundle = write_sample_bundle(tmp_path / "bundle", version="5.4.0", families=families,
                                 gates={f: {"static-coverage": "passed", "in-container": "passed", "gpu": "not-run"} for f in families})
    to = ["--to", (tmp_path / "repo").as_uri(), "--keys", str(keys)]
    proc = cairn("publish", str(bundle), *to, "--stage-only", "--json", extra_env={"CAIRN_ROOT": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    cells = json.loads((bundle / "bundle.json").read_text())["cells"]
    return to, {c["gfx_target"]: c["images"][0]["digest"] for c in cells}


def gate_json(path: Path, target: str, digest: str, status: str, reason: str = "") -> Path:
    """What ``cairn gate --sign-with`` writes on a GPU host of ``target`` after the GPU gate ran there."""
    host = attest.Host("AMD Instinct", target, "amdgpu-dkms 6.10.5", "5.15.0-119-generic", "6.4.1")
    statement = attest.gate_statement(gate="gpu", target=target, image="smoke", digest=digest, status=status, reason=reason,
                                      evidence_sha256=hashlib.sha256(b"log").hexdigest(), evidence_name="gate.log", host=host)
    path.write_bytes(attest.sign_statement(statement, RUNNER))
    return path


def test_gpu_verdict_reported_after_staging_is_recorded_and_gates_the_channel(tmp_path, keys):
    to, digests = staged(tmp_path, keys)
    passed = gate_json(tmp_path / "gpu-gfx90a.json", "gfx90a", digests["gfx90a"], "passed")
    failed = gate_json(tmp_path / "gpu-gfx908.json", "gfx908", digests["gfx908"], "failed", "saxpy: 3 of 1024 results wrong")
    proc = cairn("promote", "--version", "5.4.0", "--channel", "stable", "--gates", str(passed), "--gates", str(failed), *to, "--json", extra_env={"CAIRN_ROOT": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["promoted"] == ["5.4.0/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0"]
    assert report["held"] == {"5.4.0/gfx908/debian-12/py3.11/cairn-smoke-0.1.0": ["gpu: failed (saxpy: 3 of 1024 results wrong)"]}
    matrix = json.loads((tmp_path / "repo" / "staging" / "5.4.0" / "gates.json").read_text())
    assert matrix["5.4.0/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0"]["gpu"] == {"status": "passed", "reason": ""}
    assert matrix["recorded"][digests["gfx90a"]]["gpu"]["runner"]["name"] == "gpu-runner"
    verify = subprocess.run([sys.executable, "-m", "cairn.cli", "verify", str(tmp_path / "repo"), "--root", str(keys / "root.json")],
                            env={**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf")}, capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr + verify.stdout


def test_verdict_for_an_image_the_release_did_not_stage_is_refused_in_one_line(tmp_path, keys):
    to, _digests = staged(tmp_path, keys)
    other = gate_json(tmp_path / "gpu-other.json", "gfx90a", "sha256:" + "0" * 64, "passed")
    proc = cairn("promote", "--version", "5.4.0", "--channel", "stable", "--gates", str(other), *to, extra_env={"CAIRN_ROOT": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"cairn promote: {other}: gpu gate of sha256:000000000000… (gfx90a) is for an image release 5.4.0 did not stage"
        " — run the gate on the staged image's digest"]
    held = json.loads((tmp_path / "repo" / "staging" / "5.4.0" / "gates.json").read_text())
    assert "recorded" not in held  # nothing half-written


def test_gate_passes_for_a_cell_only_when_it_passed_on_every_image_of_the_cell():
    from cairn.matrix.build import record_gates

    runtime, smoke = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    cell = {"release": "5.4.0", "gfx_target": "gfx90a", "os": "debian-12", "python": "3.11",
            "framework": {"name": "cairn-smoke", "version": "0.1.0"},
            "images": [{"reference": "cairn/rocm:5.4.0-gfx90a", "digest": runtime}, {"reference": "cairn/smoke:5.4.0-gfx90a", "digest": smoke}]}
    stage = {"release": {"version": "5.4.0", "required_gates": {"stable": ["gpu"]}}, "cells": [cell]}
    cid = "5.4.0/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0"
    before = {cid: {"gpu": {"status": "not-run", "reason": "not run: no AMD GPU on this host"}}}

    def verdict(digest: str, status: str) -> tuple[Path, dict[str, str]]:
        return Path(f"{status}.json"), {"schema": "cairn.gate/v1", "gate": "gpu", "target": "gfx90a", "digest": digest, "status": status}

    one = record_gates(stage, before, [verdict(runtime, "passed")])
    assert one[cid]["gpu"] == {"status": "not-run", "reason": f"no gpu result recorded for cairn/smoke:5.4.0-gfx90a@{smoke[:19]}…"}
    both = record_gates(stage, one, [verdict(smoke, "passed")])  # a later report completes the cell
    assert both[cid]["gpu"] == {"status": "passed", "reason": ""}
    assert before[cid]["gpu"]["status"] == "not-run"  # the caller's copy is not modified
