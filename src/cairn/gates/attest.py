"""The GPU host's side of a signed verdict: ``cairn gate --sign-with KEY`` turns the last build's verdicts of a
gate (``gpu`` by default) into DSSE-signed in-toto statements (``cairn.sign.attest``) that ``cairn promote
--gates`` accepts.

Each statement names the image digest the gate judged, the gate, target, status and reason, the sha256 of the
gate action's log (the evidence: the commands, their output, the gate's JSON; kept in the store and open to
whoever must check a verdict) and who ran it: the host's GPU product and gfx target, driver, kernel and ROCm as
``cairn doctor`` reads them. A runner never vouches for a GPU verdict on a target its own GPUs are not: the
statement would claim hardware that was never there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.errors import CairnError, InputError
from cairn.io import atomic_write
from cairn.model.gate_result import SCHEMA
from cairn.sign.attest import Host, gate_statement, sign_statement


@dataclass(frozen=True)
class Signed:
    path: Path
    gate: str
    image: str
    target: str
    status: str


def host_identity(root: Path | str, target: str) -> Host:
    """The host as a verdict names it: the GPU of ``target`` (else the first GPU), driver, kernel and ROCm."""
    # lazy: cairn.doctor, rich, cairn.remote, 149 ms at start-up (python -X importtime)
    from cairn.doctor.host import host_gpus, reference_rocm
    from cairn.doctor.read import read_snapshot
    from cairn.model.targets import load_registry

    snap = read_snapshot(root, audit=False)
    gpus = host_gpus(snap, load_registry())
    gpu = next((g for g in gpus if g.target is not None and g.target.name == target), gpus[0] if gpus else None)
    rocm = reference_rocm(snap)
    if snap.amdgpu_version:
        driver = f"amdgpu-dkms {snap.amdgpu_version}"
    else:
        driver = f"amdgpu (in kernel {snap.kernel})" if snap.amdgpu_loaded else "none"
    return Host(gpu_product=gpu.product if gpu else "", gfx_target=gpu.target.name if gpu and gpu.target else "",
                driver=driver, kernel=snap.kernel, rocm=rocm.version if rocm else "")


def sign_verdicts(store: Path, signer: Any, out: Path, gates: tuple[str, ...], host_root: Path | str = "/") -> list[Signed]:
    """One ``<gate>--<image>@<target>.intoto.json`` in ``out`` per verdict of ``gates`` in the store's last build.

    Only verdicts a gate reached (passed or failed) are signed; a gate that did not run has nothing to vouch for.
    Everything is checked before the first file is written, so a refusal leaves ``out`` as it was.
    """
    store = Path(store)
    actions = _last_build(store)
    pending: list[tuple[Path, bytes, Signed]] = []
    for action_id, info in sorted(actions.items()):
        kind, _, rest = action_id.partition(":")
        gate, _, image_target = rest.partition(":")
        if kind != "gate" or gate not in gates:
            continue
        result, log = _verdict(store, action_id, info)
        if result is None or result["status"] not in ("passed", "failed"):
            continue
        host = host_identity(host_root, result["target"])
        if gate == "gpu" and host.gfx_target != result["target"]:
            raise CairnError(f"{action_id}: a {result['target']} GPU verdict, but this host's GPU is "
                             f"{host.gfx_target or 'absent'} — sign verdicts on the host whose GPU ran them")
        if log is not None:
            evidence_name, evidence = log.name, log.read_bytes()
        else:  # a verdict reused from the cache has no log of this build: its gate.json is the evidence
            evidence_name, evidence = "gate.json", json.dumps(result, sort_keys=True).encode()
        statement = gate_statement(gate=gate, target=result["target"], image=result.get("image") or image_target,
                                   digest=result["digest"], status=result["status"], reason=result.get("reason", ""),
                                   evidence_sha256=hashlib.sha256(evidence).hexdigest(), evidence_name=evidence_name, host=host)
        path = out / f"{gate}--{image_target}.intoto.json"
        pending.append((path, sign_statement(statement, signer), Signed(path, gate, result.get("image", ""), result["target"], result["status"])))

    for path, data, _ in pending:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    return [signed for _, _, signed in pending]


def _last_build(store: Path) -> dict[str, dict[str, Any]]:
    """The actions of ``<store>/last-build.json`` with their log paths (``read_actions`` checks the record)."""
    # lazy: cairn.store, cairn.digest, cairn.io, 5 ms at start-up (python -X importtime)
    from cairn.store.report import FILENAME, read_actions

    checked = read_actions(store)
    raw = json.loads((store / FILENAME).read_text())["actions"]
    return {a: {"status": info.status, "output": info.output, "log": raw[a].get("log") if isinstance(raw[a].get("log"), str) else None}
            for a, info in checked.items()}


def _verdict(store: Path, action_id: str, info: dict[str, Any]) -> tuple[dict[str, Any] | None, Path | None]:
    """The gate's verdict and its log: ``gate.json`` of its tree, or for a failed gate (which keeps no tree) the
    result its runner wrote into the log before failing (``cairn.gates.run.run_gate``)."""
    log = Path(info["log"]) if info["log"] and Path(info["log"]).is_file() else None
    if info["output"]:
        path = store / "trees" / info["output"] / "gate.json"
        try:
            return json.loads(path.read_text()), log
        except (OSError, ValueError) as exc:
            raise InputError(path, f"cannot read the gate's verdict ({exc})", "rebuild the gate (cairn build --only gate:…)") from None
    if info["status"] != "failed" or log is None:
        return None, None
    text = log.read_text(errors="replace")
    decoder = json.JSONDecoder()
    for start in (i for i, line in _line_starts(text) if line.startswith("{")):
        try:
            doc, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get("digest"), str) and doc["digest"]:
            return doc, log
    raise InputError(log, f"{action_id} failed without recording its verdict", "run the gate again (cairn build --only gate:…)")


def _line_starts(text: str) -> list[tuple[int, str]]:
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        out.append((pos, line))
        pos += len(line)
    return out
