"""The trusted runner list: which runner keys may sign which gates' verdicts, signed by the TUF targets key.

Why a signed key list and not a TUF delegated role: a delegation hands its keys the right to sign *TUF
metadata* for some target paths, so a GPU runner would have to write, version and upload metadata into the
repository — write access to the bucket on every GPU host, and one more party in the snapshot. A runner here
signs one DSSE statement and hands the file over; it never writes the repository. What the release needs is
only "this key may vouch for the gpu gate on gfx90a", which a list states directly. The list is a DSSE envelope
(``application/vnd.cairn.runners+json``) signed by the targets key(s) of the pinned root — the offline release
key — so it is checked against the root whatever copy is read, and a bucket writer (or anyone who edits the key
directory's file) cannot add a key. It lives in the key directory (``runners.json``, kept with the keys) and is
published as the TUF target ``keys/runners.json``, so the repository's signed metadata names the runners its
recorded verdicts were accepted from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import CryptoSigner, Key, SSlibKey
from tuf.api.metadata import Metadata, Root

from cairn.errors import CairnError, InputError
from cairn.io import atomic_write
from cairn.sign.attest import open_envelope, read_verdict, sign_envelope

FILENAME = "runners.json"
REPO_KEY = "keys/runners.json"
PAYLOAD_TYPE = "application/vnd.cairn.runners+json"
SCHEMA = "cairn.runners/v1"
ANY_TARGET = "*"
KEY_TYPES = (("ed25519", "ed25519"), ("ecdsa", "ecdsa-sha2-nistp256"))


@dataclass(frozen=True)
class Runner:
    name: str
    key: Key
    gates: tuple[str, ...]
    targets: tuple[str, ...]  # ("*",): every target

    def may_sign(self, gate: str, target: str) -> bool:
        return gate in self.gates and (ANY_TARGET in self.targets or target in self.targets)


@dataclass(frozen=True)
class Runners:
    """A verified runner list: ``data`` is the envelope as read (what promote publishes)."""

    version: int
    runners: tuple[Runner, ...]
    data: bytes

    def keys(self) -> list[Key]:
        return [r.key for r in self.runners]

    def by_keyid(self, keyid: str) -> Runner:
        return next(r for r in self.runners if r.key.keyid == keyid)


def _targets_keys(root: Metadata[Root]) -> tuple[list[Key], int]:
    role = root.signed.roles["targets"]
    return [root.signed.keys[k] for k in role.keyids], role.threshold


def parse(path: Path | str, data: bytes, root: Metadata[Root]) -> Runners:
    """The runner list in ``data`` once its signature by the root's targets key(s) verifies; one InputError otherwise."""
    fix = "re-create it with cairn keys trust-runner on the machine that holds the targets key"
    keys, threshold = _targets_keys(root)
    try:
        payload, signed_by = open_envelope(data, PAYLOAD_TYPE, keys)
    except ValueError as exc:
        raise InputError(path, f"not a runner list signed by the release's targets key ({exc})", fix) from None
    if len(signed_by) < threshold:
        raise InputError(path, f"signed by {len(signed_by)} of the {threshold} targets keys the root requires", fix)
    try:
        doc = json.loads(payload)
        if doc.get("schema") != SCHEMA or not isinstance(doc.get("version"), int):
            raise ValueError(f"not {SCHEMA}")
        runners = tuple(Runner(str(entry["name"]), SSlibKey.from_dict(keyid, dict(entry["key"])),
                               tuple(str(g) for g in entry["gates"]), tuple(str(t) for t in entry["targets"]))
                        for keyid, entry in sorted(doc["runners"].items()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(path, f"signed runner list is malformed ({exc})", fix) from None
    return Runners(doc["version"], runners, data)


def load(directory: Path, root: Metadata[Root]) -> Runners | None:
    """``<directory>/runners.json`` verified against ``root``; None when the key set trusts no runner yet."""
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})", "restore it from the key set's backup") from None
    return parse(path, data, root)


def trust(directory: Path, root: Metadata[Root], signer: Any, public: dict[str, Any], name: str,
          gates: list[str], targets: list[str]) -> Runners:
    """Add (or replace) the runner whose public key is ``public`` in ``<directory>/runners.json``, re-signed.

    The list already there is verified first: a list someone edited by hand is refused, not extended.
    """
    try:
        if (public.get("keytype"), public.get("scheme")) not in KEY_TYPES or not public.get("keyid"):
            raise ValueError(f"key type {public.get('keytype')!r}/{public.get('scheme')!r} with keyid; runner keys are "
                             f"{' or '.join('/'.join(t) for t in KEY_TYPES)}")
        key = SSlibKey.from_dict(str(public["keyid"]), {k: v for k, v in public.items() if k != "keyid"})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CairnError(f"not a runner public key ({exc}) — pass the .pub.json cairn keys runner wrote") from None
    current = load(directory, root)
    entries = {r.key.keyid: {"name": r.name, "key": r.key.to_dict(), "gates": list(r.gates), "targets": list(r.targets)}
               for r in (current.runners if current else ())}
    entries[key.keyid] = {"name": name, "key": key.to_dict(), "gates": sorted(set(gates)), "targets": sorted(set(targets)) or [ANY_TARGET]}
    doc = {"schema": SCHEMA, "version": (current.version + 1) if current else 1, "runners": entries}
    payload = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    data = (json.dumps(sign_envelope(payload, PAYLOAD_TYPE, signer), sort_keys=True, indent=1) + "\n").encode()
    path = Path(directory) / FILENAME
    runners = parse(path, data, root)  # signed by a key the root names as targets, or refused before it is written
    atomic_write(path, data, 0o644)
    return runners


def make_runner_key(out: Path, keytype: str) -> tuple[Path, Path, str]:
    """A new runner key: the private PEM at ``out`` (mode 0600) and its public half beside it (``.pub.json``).

    Refuses to overwrite either: a runner key already trusted would silently stop verifying.
    """
    out = Path(out)
    public_path = out.with_name(out.name.removesuffix(".pem") + ".pub.json")
    for path in (out, public_path):
        if path.exists():
            raise CairnError(f"{path} already exists — keep that runner key, or choose another --out")
    signer = CryptoSigner.generate_ed25519() if keytype == "ed25519" else CryptoSigner.generate_ecdsa()
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, signer.private_bytes, 0o600)
    public = {"keyid": signer.public_key.keyid, **signer.public_key.to_dict()}
    atomic_write(public_path, (json.dumps(public, indent=1, sort_keys=True) + "\n").encode(), 0o644)
    return out, public_path, signer.public_key.keyid


def accept(files: list[tuple[Path, bytes]], runners: Runners | None, directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The verdicts of signed gate attestations (``cairn gate --sign-with``), each as ``record_gates`` takes it.

    Refused, in one line naming the file: anything that is not a DSSE envelope signed by a key of the runner list
    (a hand-written ``gate.json``, an edited payload, an unknown key), and a verdict its signer is not trusted for
    (another gate or target), or a GPU verdict from a host whose GPU is not the target's. Whether the release
    requires the gate and whether a failure would be overturned is ``record_gates``' to say: it has the release.
    """
    fix = "sign the verdict on the runner that ran the gate (cairn gate --sign-with KEY) with a key in the runner list"
    if files and runners is None:
        raise InputError(files[0][0], f"cannot be checked: {Path(directory) / FILENAME} trusts no runner",
                         "trust the runner's key first (cairn keys trust-runner PUB_JSON --gate GATE)")
    out = []
    for path, data in files:
        assert runners is not None
        try:
            verdict = read_verdict(data, runners.keys())
        except ValueError as exc:
            raise InputError(path, f"not a signed gate verdict from a trusted runner ({exc})", fix) from None
        runner = runners.by_keyid(verdict.keyid)
        if not runner.may_sign(verdict.gate, verdict.target):
            raise InputError(path, f"runner {runner.name} is trusted for {', '.join(runner.gates)} on {', '.join(runner.targets)}, "
                             f"not for the {verdict.gate} gate on {verdict.target}",
                             "have a runner trusted for it run the gate, or trust this one (cairn keys trust-runner)")
        if verdict.gate == "gpu" and verdict.host.gfx_target != verdict.target:
            raise InputError(path, f"a {verdict.target} GPU verdict from a host whose GPU is {verdict.host.gfx_target or 'absent'}",
                             "run the GPU gate on a host with that target's GPU")
        out.append((path, {**verdict.as_result(), "runner": {**verdict.as_result()["runner"], "name": runner.name}}))
    return out
