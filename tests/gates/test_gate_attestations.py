"""Gate verdicts reported after staging are signed attestations: ``cairn promote --gates`` records only an in-toto
statement in a DSSE envelope, signed by a runner key the key set's signed runner list trusts for that gate, for a
gate the release requires, and never over a failure. Each attack below is made against the real commands (file
backend); each refusal is one line naming the file, and the repository is left byte-identical.

The GPU host is the one thing that cannot exist here: its store (a gate action's ``gate.json`` and log, as
``cairn build`` leaves them) and its sysfs (``tests/support/doctor_hosts.py``, the layout ``cairn doctor --root`` reads)
are written by the test; everything else — signing, verifying, recording, promoting — is the real code.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tuf.api.serialization.json import JSONSerializer

from cairn.publish.sample import write_sample_bundle
from cairn.sign.keys import init_keys, make_root
from support import ROOT, cairn
from support.doctor_hosts import MI250X_GCD, HostTree

VERSION = "5.4.0"
CELL = f"{VERSION}/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0"


@pytest.fixture(scope="module")
def release_keys(tmp_path_factory):
    keyset = init_keys(tmp_path_factory.mktemp("keys") / "k")
    (keyset.directory / "root.json").write_bytes(make_root(keyset).to_bytes(JSONSerializer(compact=False)))
    return keyset.directory


@pytest.fixture
def keys(tmp_path, release_keys):
    """The release key set, copied: each test trusts its own runners."""
    return Path(shutil.copytree(release_keys, tmp_path / "keys"))


def ok(*args: str) -> subprocess.CompletedProcess[str]:
    proc = cairn(*args, extra_env={"CAIRN_ROOT": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    return proc


def stage(tmp_path: Path, keys: Path, gates: dict[str, dict[str, str]] | None = None) -> tuple[list[str], dict[str, str]]:
    """A release staged with the GPU gate not run; returns the --to/--keys arguments and each target's image digest."""
    families = ("gfx90a", "gfx908")
    gates = gates or {f: {"static-coverage": "passed", "in-container": "passed", "gpu": "not-run"} for f in families}
    bundle = write_sample_bundle(tmp_path / "bundle", version=VERSION, families=families, gates=gates)
    to = ["--to", (tmp_path / "repo").as_uri(), "--keys", str(keys)]
    ok("publish", str(bundle), *to, "--stage-only", "--json")
    cells = json.loads((bundle / "bundle.json").read_text())["cells"]
    return to, {c["gfx_target"]: c["images"][0]["digest"] for c in cells}


def runner_key(tmp_path: Path, name: str, keys: Path | None = None, *trust: str) -> Path:
    """``cairn keys runner`` on the runner; with ``keys``, ``cairn keys trust-runner`` on the key set's machine."""
    pem = tmp_path / "runners" / f"{name}.pem"
    ok("keys", "runner", "--out", str(pem))
    if keys is not None:
        ok("keys", "trust-runner", str(pem.with_name(f"{name}.pub.json")), "--dir", str(keys), *trust)
    return pem


def gpu_host(tmp_path: Path) -> Path:
    """An MI250X node (gfx90a), DKMS amdgpu 6.10.5 on kernel 5.15, ROCm 6.4.1 in /opt."""
    root = tmp_path / "gpu-host"
    host = HostTree(root).os("Ubuntu 22.04.5 LTS", "ubuntu", "22.04").kernel("5.15.0-119-generic").amdgpu("6.10.5")
    host.cpu_node(0, cores=64).gpu(MI250X_GCD, node=1, bus=0x29, card=1, render=128)
    host.kfd().user("ci", 1000, session_groups=("video", "render")).environ()
    host.rocm_opt("6.4.1", "83").rocminfo()
    return root


def gate_run(tmp_path: Path, gate: str, target: str, digest: str, status: str, reason: str = "") -> Path:
    """The store ``cairn build`` leaves on the GPU host after one gate action: its verdict and its log."""
    store = tmp_path / "gpu-store"
    action = f"gate:{gate}:smoke@{target}"
    result = {"schema": "cairn.gate/v1", "gate": gate, "image": "smoke", "target": target, "family": target,
              "digest": digest, "status": status, "reason": reason, "evidence": {"commands": [["cairn-smoke", "--gpu"]]}}
    log = store / "logs" / f"{hashlib.sha256(action.encode()).hexdigest()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"# {action}\n$ cairn-smoke --gpu\nsaxpy: 1024 of 1024 within 1e-6\n" + json.dumps(result, indent=1) + "\n")
    entry: dict[str, object] = {"status": "failed" if status == "failed" else "ran", "output": None, "log": str(log),
                                "detail": reason or None, "seconds": 1.0}
    if status != "failed":
        tree = "ab" * 32
        (store / "trees" / tree).mkdir(parents=True)
        (store / "trees" / tree / "gate.json").write_text(json.dumps(result))
        entry["output"] = tree
    (store / "last-build.json").write_text(json.dumps({"schema": "cairn.execute/v1", "actions": {action: entry}}))
    return store


def sign(tmp_path: Path, key: Path, store: Path, *extra: str) -> Path:
    """``cairn gate --sign-with`` on the GPU host: the one attestation it writes."""
    out = tmp_path / f"attest-{key.stem}"
    ok("gate", "--store", str(store), "--sign-with", str(key), "--attest-out", str(out), "--host-root", str(gpu_host(tmp_path)), *extra)
    (path,) = out.iterdir()
    return path


def snapshot(repo: Path) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}


def refused(tmp_path: Path, to: list[str], path: Path, why: str) -> None:
    """``promote --gates path`` to stable fails in one line naming ``path`` and ``why``, and writes nothing."""
    before = snapshot(tmp_path / "repo")
    proc = cairn("promote", "--version", VERSION, "--channel", "stable", "--gates", str(path), *to, extra_env={"CAIRN_ROOT": str(ROOT)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cairn promote: {path}: "), proc.stderr
    assert why in lines[0], lines[0]
    assert snapshot(tmp_path / "repo") == before


def test_signed_gpu_verdict_from_a_trusted_runner_promotes_its_cell(tmp_path, keys):
    to, digests = stage(tmp_path, keys)
    key = runner_key(tmp_path, "mi250x-1", keys, "--gate", "gpu", "--target", "gfx90a")
    attestation = sign(tmp_path, key, gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "passed"))
    envelope = json.loads(attestation.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert statement["subject"][0]["digest"] == {"sha256": digests["gfx90a"].removeprefix("sha256:")}
    assert statement["predicate"]["host"] == {"gpu_product": "AMD Instinct MI250X", "gfx_target": "gfx90a",
                                              "driver": "amdgpu-dkms 6.10.5", "kernel": "5.15.0-119-generic", "rocm": "6.4.1"}
    log = next((tmp_path / "gpu-store" / "logs").iterdir())
    assert statement["predicate"]["evidence"]["digest"]["sha256"] == hashlib.sha256(log.read_bytes()).hexdigest()

    proc = ok("promote", "--version", VERSION, "--channel", "stable", "--gates", str(attestation), *to, "--json")
    report = json.loads(proc.stdout)
    assert report["promoted"] == [CELL]
    assert list(report["held"]) == [f"{VERSION}/gfx908/debian-12/py3.11/cairn-smoke-0.1.0"]  # its GPU gate never ran
    repo = tmp_path / "repo"
    gates = json.loads((repo / "staging" / VERSION / "gates.json").read_text())
    assert gates[CELL]["gpu"] == {"status": "passed", "reason": ""}
    recorded = gates["recorded"][digests["gfx90a"]]["gpu"]
    assert recorded["runner"]["name"] == "mi250x-1" and recorded["runner"]["host"]["gfx_target"] == "gfx90a"
    assert (repo / recorded["runner"]["attestation"]).read_bytes() == attestation.read_bytes()  # kept, signed
    assert (repo / "keys" / "runners.json").read_bytes() == (keys / "runners.json").read_bytes()
    verify = subprocess.run([sys.executable, "-m", "cairn.cli", "verify", str(repo), "--root", str(keys / "root.json")],
                            env={**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf")}, capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr + verify.stdout


def test_hand_written_verdict_is_refused(tmp_path, keys):
    to, digests = stage(tmp_path, keys)
    runner_key(tmp_path, "mi250x-1", keys, "--gate", "gpu")
    forged = tmp_path / "gpu-gfx90a.json"
    forged.write_text(json.dumps({"schema": "cairn.gate/v1", "gate": "gpu", "target": "gfx90a", "digest": digests["gfx90a"],
                                  "status": "passed"}))
    refused(tmp_path, to, forged, "not a signed gate verdict from a trusted runner (not a DSSE envelope")


def test_verdict_signed_by_an_untrusted_key_is_refused(tmp_path, keys):
    to, digests = stage(tmp_path, keys)
    runner_key(tmp_path, "mi250x-1", keys, "--gate", "gpu")
    stranger = runner_key(tmp_path, "stranger")  # a well-formed key nobody trusted
    attestation = sign(tmp_path, stranger, gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "passed"))
    refused(tmp_path, to, attestation, "no signature verifies with a trusted key")


def test_no_runner_list_refuses_every_verdict(tmp_path, keys):
    to, digests = stage(tmp_path, keys)
    attestation = sign(tmp_path, runner_key(tmp_path, "mi250x-1"), gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "passed"))
    refused(tmp_path, to, attestation, f"{keys / 'runners.json'} trusts no runner")


def test_tampered_envelope_is_refused(tmp_path, keys):
    to, digests = stage(tmp_path, keys)
    key = runner_key(tmp_path, "mi250x-1", keys, "--gate", "gpu")
    attestation = sign(tmp_path, key, gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "failed", "saxpy: 3 of 1024 wrong"))
    envelope = json.loads(attestation.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"].update(status="passed", reason="")
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    attestation.write_text(json.dumps(envelope))
    refused(tmp_path, to, attestation, "no signature verifies with a trusted key")


def test_trusted_runner_is_refused_for_a_gate_or_target_it_is_not_trusted_for(tmp_path, keys):
    to, digests = stage(tmp_path, keys)
    key = runner_key(tmp_path, "mi100-1", keys, "--gate", "gpu", "--target", "gfx908")
    attestation = sign(tmp_path, key, gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "passed"))
    refused(tmp_path, to, attestation, "runner mi100-1 is trusted for gpu on gfx908, not for the gpu gate on gfx90a")


def test_verdict_for_a_gate_the_release_does_not_require_is_refused(tmp_path, keys):
    to, digests = stage(tmp_path, keys)
    key = runner_key(tmp_path, "mi250x-1", keys, "--gate", "gpu", "--gate", "benchmark")
    store = gate_run(tmp_path, "benchmark", "gfx90a", digests["gfx90a"], "passed")
    attestation = sign(tmp_path, key, store, "--sign-gate", "benchmark")
    refused(tmp_path, to, attestation, f"release {VERSION} requires no benchmark gate (its channels require gpu, in-container, static-coverage)")


def test_signed_verdict_cannot_overturn_a_failed_build_time_gate(tmp_path, keys):
    gates = {"gfx90a": {"static-coverage": "failed", "in-container": "passed", "gpu": "not-run"},
             "gfx908": {"static-coverage": "passed", "in-container": "passed", "gpu": "not-run"}}
    to, digests = stage(tmp_path, keys, gates)
    key = runner_key(tmp_path, "mi250x-1", keys, "--gate", "static-coverage", "--gate", "gpu")
    store = gate_run(tmp_path, "static-coverage", "gfx90a", digests["gfx90a"], "passed")
    attestation = sign(tmp_path, key, store, "--sign-gate", "static-coverage")
    refused(tmp_path, to, attestation, f"static-coverage gate of {CELL} failed (static-coverage failed on gfx90a); "
                                       "a passed verdict cannot overturn a failure — fix the cause and stage a new build")


def test_a_recorded_gpu_failure_stays_failed(tmp_path, keys):
    """A failed GPU verdict is signed (from the log: a failed gate keeps no tree) and recorded; a later passing
    one for the same image, from the same trusted runner, is refused."""
    to, digests = stage(tmp_path, keys)
    key = runner_key(tmp_path, "mi250x-1", keys, "--gate", "gpu")
    failed = sign(tmp_path, key, gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "failed", "saxpy: 3 of 1024 wrong"))
    ok("promote", "--version", VERSION, "--channel", "stable", "--gates", str(failed), *to)
    shutil.rmtree(tmp_path / "gpu-store")
    shutil.rmtree(failed.parent)
    passed = sign(tmp_path, key, gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "passed"))
    refused(tmp_path, to, passed, "a passed verdict cannot overturn a failure")


def test_runner_list_edited_by_hand_is_refused(tmp_path, keys):
    """The list is signed by the targets key of the pinned root: adding a key to the file breaks its signature."""
    to, digests = stage(tmp_path, keys)
    runner_key(tmp_path, "mi250x-1", keys, "--gate", "gpu")
    intruder = runner_key(tmp_path, "intruder")
    envelope = json.loads((keys / "runners.json").read_text())
    listing = json.loads(base64.b64decode(envelope["payload"]))
    public = json.loads(intruder.with_name("intruder.pub.json").read_text())
    listing["runners"][public.pop("keyid")] = {"name": "intruder", "key": public, "gates": ["gpu"], "targets": ["*"]}
    envelope["payload"] = base64.b64encode(json.dumps(listing).encode()).decode()
    (keys / "runners.json").write_text(json.dumps(envelope))
    attestation = sign(tmp_path, intruder, gate_run(tmp_path, "gpu", "gfx90a", digests["gfx90a"], "passed"))
    before = snapshot(tmp_path / "repo")
    proc = cairn("promote", "--version", VERSION, "--channel", "stable", "--gates", str(attestation), *to, extra_env={"CAIRN_ROOT": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"cairn promote: {keys / 'runners.json'}: not a runner list signed by the release's targets key (no signature verifies "
        "with a trusted key) — re-create it with cairn keys trust-runner on the machine that holds the targets key"]
    assert snapshot(tmp_path / "repo") == before


def test_gpu_verdict_is_not_signed_on_a_host_without_that_gpu(tmp_path, keys):
    _to, digests = stage(tmp_path, keys)
    key = runner_key(tmp_path, "mi250x-1")
    store = gate_run(tmp_path, "gpu", "gfx908", digests["gfx908"], "passed")
    proc = cairn("gate", "--store", str(store), "--sign-with", str(key), "--attest-out", str(tmp_path / "out"), "--host-root", str(gpu_host(tmp_path)), extra_env={"CAIRN_ROOT": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "cairn gate: gate:gpu:smoke@gfx908: a gfx908 GPU verdict, but this host's GPU is gfx90a — sign verdicts on the host "
        "whose GPU ran them"]
    assert not (tmp_path / "out").exists()


def test_dsse_pae_and_both_runner_key_types():
    """PAE as the DSSE spec writes it; an ECDSA P-256 runner key signs and verifies like an Ed25519 one, and a
    verdict verifies only against the key that signed it."""
    from securesystemslib.signer import CryptoSigner

    from cairn.sign import attest

    assert attest.pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    host = attest.Host("AMD Instinct MI250X", "gfx90a", "amdgpu-dkms 6.10.5", "5.15.0-119-generic", "6.4.1")
    statement = attest.gate_statement(gate="gpu", target="gfx90a", image="smoke", digest="sha256:" + "1" * 64, status="passed",
                                      reason="", evidence_sha256="2" * 64, evidence_name="gate.log", host=host)
    ecdsa, ed25519 = CryptoSigner.generate_ecdsa(), CryptoSigner.generate_ed25519()
    for signer, other in ((ecdsa, ed25519), (ed25519, ecdsa)):
        data = attest.sign_statement(statement, signer)
        verdict = attest.read_verdict(data, [other.public_key, signer.public_key])
        assert (verdict.keyid, verdict.digest, verdict.status, verdict.host) == (signer.public_key.keyid, "sha256:" + "1" * 64, "passed", host)
        with pytest.raises(ValueError, match="no signature verifies with a trusted key"):
            attest.read_verdict(data, [other.public_key])
