"""Verify, then sign: someone who can write to the repository but holds no key cannot get their bytes signed.

Each test performs the attack against the real code — ``cairn publish`` / ``cairn promote`` as a user runs them, on
a local directory and on a moto S3 bucket — and checks that it fails closed: one line naming the object, exit
nonzero, no traceback, and not one object of the repository written. A target planted in unsigned targets
metadata is never signed over; a flipped staged gate record is never promoted; a forged publish record or timestamp
does not make a publish skip; ``cairn verify --root`` of a file that is no root, and promote of a malformed staged
record, are one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tuf.api.metadata import Metadata, Timestamp
from tuf.api.serialization.json import JSONSerializer

from cairn.matrix.build import cell_id
from cairn.names import hashed_name
from cairn.publish import fastpath
from cairn.publish.objects import JSON, Obj
from cairn.publish.report import Report
from cairn.publish.sample import write_sample_bundle
from cairn.publish.upload import Run
from cairn.remote.backend import FileBackend
from cairn.sign.keys import init_keys, load_keys, make_root
from cairn.sign.session import SigningSession
from cairn.sign.tuf import RECORD_FIELD, RepoState, needs_signing
from support import cairn

EVIL = "packages/gfx90a/evil-1.0-py3-none-any.whl"
EVIL_BYTES = b"bytes nobody with a key ever saw\n"
HELD = {"gfx90a": {"static-coverage": "passed", "in-container": "failed"}}  # nightly requires both


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("keys") / "k"
    keyset = init_keys(directory)
    (directory / "root.json").write_bytes(make_root(keyset).to_bytes(JSONSerializer(compact=False)))
    return directory


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def refused(proc: subprocess.CompletedProcess[str], *named: str) -> str:
    """The run failed closed: nonzero exit, one error line on stderr naming every one of ``named``, no traceback
    (a publish's progress lines — "checking the bundle's files: …" — may come before it)."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("cairn ")]
    assert proc.returncode != 0, f"the attack went through: {proc.stdout}"
    assert "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
    line = errors[0]
    for name in named:
        assert name in line, line
    return line


# -- the repository as an attacker with write access sees it: a directory, or a bucket prefix --------------------
class Dir:
    def __init__(self, root: Path) -> None:
        self.root, self.url = root, root.as_uri()

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def put(self, key: str, data: bytes) -> None:
        (self.root / key).parent.mkdir(parents=True, exist_ok=True)
        (self.root / key).write_bytes(data)

    def state(self) -> dict[str, bytes]:
        return {p.relative_to(self.root).as_posix(): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()}


class Bucket:
    def __init__(self, s3: dict, prefix: str) -> None:
        self.client, self.prefix, self.url = s3["client"], prefix, f"s3://{BUCKET}/{prefix}"

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}")["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}", Body=data)

    def state(self) -> dict[str, tuple[str, object]]:
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=self.prefix + "/"):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = (obj["ETag"], obj["LastModified"])
        return out


def chain(repo: Dir | Bucket) -> tuple[dict, dict, dict, str]:
    """The served timestamp, snapshot and targets (as JSON, unverified) and the targets file's key."""
    timestamp = json.loads(repo.get("metadata/timestamp.json"))
    snapshot = json.loads(repo.get(f"metadata/{timestamp['signed']['meta']['snapshot.json']['version']}.snapshot.json"))
    key = f"metadata/{snapshot['signed']['meta']['targets.json']['version']}.targets.json"
    return timestamp, snapshot, json.loads(repo.get(key)), key


def dumps(value: dict) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()


def plant_in_place(repo: Dir | Bucket) -> str:
    """Add a target to the current ``N.targets.json`` (signatures left as they were) and upload its bytes."""
    _, _, targets, key = chain(repo)
    sha = hashlib.sha256(EVIL_BYTES).hexdigest()
    targets["signed"]["targets"][EVIL] = {"length": len(EVIL_BYTES), "hashes": {"sha256": sha}}
    repo.put(key, dumps(targets))
    repo.put(EVIL, EVIL_BYTES)
    repo.put(hashed_name(EVIL, sha), EVIL_BYTES)
    return key


def plant_new_chain(repo: Dir | Bucket) -> None:
    """A whole new unsigned state: targets N+1 with the planted target, snapshot M+1 naming it, a timestamp naming
    that (each keeping the old signatures, which no longer match)."""
    timestamp, snapshot, targets, _ = chain(repo)
    sha = hashlib.sha256(EVIL_BYTES).hexdigest()
    targets["signed"]["targets"][EVIL] = {"length": len(EVIL_BYTES), "hashes": {"sha256": sha}}
    targets["signed"]["version"] += 1
    snapshot["signed"]["version"] += 1
    snapshot["signed"]["meta"]["targets.json"]["version"] = targets["signed"]["version"]
    timestamp["signed"]["version"] += 1
    timestamp["signed"]["meta"]["snapshot.json"]["version"] = snapshot["signed"]["version"]
    repo.put(EVIL, EVIL_BYTES)
    repo.put(hashed_name(EVIL, sha), EVIL_BYTES)
    repo.put(f"metadata/{targets['signed']['version']}.targets.json", dumps(targets))
    repo.put(f"metadata/{snapshot['signed']['version']}.snapshot.json", dumps(snapshot))
    repo.put("metadata/timestamp.json", dumps(timestamp))


def flip_gates(repo: Dir | Bucket, version: str, *, signed_copy: bool = True) -> None:
    """Every gate of ``staging/<version>/gates.json`` turned to passed, at its plain name and (``signed_copy``) at
    the content-addressed name of the signed bytes too, as someone with write access would."""
    _, _, targets, _ = chain(repo)
    key = f"staging/{version}/gates.json"
    sha = targets["signed"]["targets"][key]["hashes"]["sha256"]
    gates = json.loads(repo.get(key))
    for results in gates.values():
        for result in results.values():
            result.update(status="passed", reason="")
    flipped = dumps(gates)
    repo.put(key, flipped)
    if signed_copy:
        repo.put(hashed_name(key, sha), flipped)


# -- (a) a target planted in unsigned metadata is never signed over -------------------------------------------------
@pytest.mark.parametrize("command", ["publish", "promote"])
def test_a_target_planted_in_the_targets_file_stops_publish_and_promote(keys, tmp_path, command):
    repo = Dir(tmp_path / "repo")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), "--stage-only", *to]))
    targets_key = plant_in_place(repo)
    before = repo.state()
    if command == "publish":
        proc = cairn(["publish", str(write_sample_bundle(tmp_path / "b", version="5.2.4", families=("gfx90a",))), *to])
    else:
        proc = cairn(["promote", "--version", "5.2.3", "--channel", "dev", *to])
    line = refused(proc, targets_key, "does not verify against the pinned root")
    assert "nothing was written" in line
    assert repo.state() == before  # not one object written: no blob, no record, no metadata


def test_a_whole_unsigned_metadata_chain_is_refused_at_its_timestamp(keys, tmp_path):
    repo = Dir(tmp_path / "repo")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), *to]))
    plant_new_chain(repo)
    before = repo.state()
    refused(cairn(["publish", str(write_sample_bundle(tmp_path / "b", version="5.2.4", families=("gfx90a",))), *to]),
            "metadata/timestamp.json")
    assert repo.state() == before


# -- (b) a flipped staged record is refused, never promoted ------------------------------------------------------
def test_a_gate_record_flipped_in_place_is_refused_by_promote(keys, tmp_path):
    repo = Dir(tmp_path / "repo")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",), gates=HELD)), "--stage-only", *to]))
    flip_gates(repo, "5.2.3")
    before = repo.state()
    refused(cairn(["promote", "--version", "5.2.3", "--channel", "nightly", *to]),
            "staging/5.2.3/gates.json", "is not the file its signed targets list")
    assert repo.state() == before
    assert not (repo.root / "channels" / "nightly").exists()


def test_a_flipped_plain_name_is_not_what_promote_reads(keys, tmp_path):
    """Only the plain name flipped (the content-addressed copy still holds the signed bytes): promote reads the
    signed verdict, and the cell whose required gate failed stays held."""
    repo = Dir(tmp_path / "repo")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",), gates=HELD)), "--stage-only", *to]))
    flip_gates(repo, "5.2.3", signed_copy=False)
    report = json.loads(ok(cairn(["promote", "--version", "5.2.3", "--channel", "nightly", "--json", *to])).stdout)
    assert report["promoted"] == []
    [(cell, reasons)] = report["held"].items()
    assert "gfx90a" in cell and any(r.startswith("in-container: failed") for r in reasons)
    matrix = json.loads((repo.root / "channels" / "nightly" / "matrix.json").read_text())
    assert matrix["cells"] == []


def test_a_staged_record_nobody_signed_is_refused(keys, tmp_path):
    """A ``release.json`` written straight into staging (never a signed target) is not promoted."""
    repo = Dir(tmp_path / "repo")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), "--stage-only", *to]))
    for name in ("release.json", "gates.json"):
        repo.put(f"staging/6.6.6/{name}", repo.get(f"staging/5.2.3/{name}").replace(b"5.2.3", b"6.6.6"))
    before = repo.state()
    refused(cairn(["promote", "--version", "6.6.6", "--channel", "dev", *to]),
            "staging/6.6.6/release.json", "not a signed target")
    assert repo.state() == before


# -- (c) a forged publish record or timestamp does not drive the fast path --------------------------------------
def _forged_record(repo: Dir | Bucket, bundle: Path, keys: Path, timestamp_version: int) -> bytes:
    """The record ``cairn publish bundle`` would find its own: everything in its fingerprint is known to anyone who
    can read the bundle (a reproducible build makes it known to anyone at all)."""
    root_signed = json.loads((keys / "root.json").read_bytes())["signed"]
    public = json.loads((keys / "public.json").read_bytes())
    mine = fastpath.fingerprint(bundle, "dev", False, root_signed, public, True)
    record = fastpath.record_bytes(mine, timestamp_version, {"version": "5.2.4", "channel": "dev", "promoted": [],
                                                             "held": {}, "images": {}})
    repo.put(fastpath.RECORD_KEY, record)
    return record


def _forge_record_attack(repo: Dir | Bucket, keys: Path, tmp_path: Path, environ: dict[str, str] | None = None) -> None:
    to = ["--to", repo.url, "--keys", str(keys), "--json"]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), *to], env=environ))
    bundle = write_sample_bundle(tmp_path / "b", version="5.2.4", families=("gfx90a",))
    timestamp, _, _, _ = chain(repo)
    _forged_record(repo, bundle, keys, timestamp["signed"]["version"])  # names the real, signed timestamp
    report = json.loads(ok(cairn(["publish", str(bundle), *to], env=environ)).stdout)
    assert not report.get("already_published") and report["signed"]
    assert "staging/5.2.4/release.json" in chain(repo)[2]["signed"]["targets"]  # 5.2.4 really is published now
    assert json.loads(ok(cairn(["publish", str(bundle), *to], env=environ)).stdout)["already_published"]  # and now it may skip


def test_a_forged_publish_record_does_not_freeze_a_publish(keys, tmp_path):
    _forge_record_attack(Dir(tmp_path / "repo"), keys, tmp_path)


def test_a_forged_timestamp_does_not_freeze_a_publish(keys, tmp_path):
    _forge_timestamp_attack(Dir(tmp_path / "repo"), keys, tmp_path)


def _forge_timestamp_attack(repo: Dir | Bucket, keys: Path, tmp_path: Path, environ: dict[str, str] | None = None) -> None:
    """Record and timestamp both forged (the timestamp keeps old signatures): the fast path does not skip, and
    the full run refuses the timestamp in one line with nothing written."""
    to = ["--to", repo.url, "--keys", str(keys), "--json"]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), *to], env=environ))
    bundle = write_sample_bundle(tmp_path / "b", version="5.2.4", families=("gfx90a",))
    timestamp, _, _, _ = chain(repo)
    version = timestamp["signed"]["version"] + 1
    record = _forged_record(repo, bundle, keys, version)
    timestamp["signed"].update(version=version, expires=(datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    timestamp["signed"][RECORD_FIELD] = {"length": len(record), "hashes": {"sha256": hashlib.sha256(record).hexdigest()}}
    repo.put("metadata/timestamp.json", dumps(timestamp))
    before = repo.state()
    proc = cairn(["publish", str(bundle), *to], env=environ)
    assert "already_published" not in proc.stdout
    refused(proc, "metadata/timestamp.json", "does not verify")
    assert repo.state() == before


def test_a_timestamp_without_the_record_field_is_signed_again(keys):
    """A repository signed before the timestamp named the publish record gets a timestamp that does (else its fast
    path would never answer again)."""
    from cairn.sign.tuf import known_target, sign_state

    keyset = load_keys(keys)
    targets = {fastpath.RECORD_KEY: known_target(fastpath.RECORD_KEY, 3, "ab" * 32)}
    signed = sign_state(keyset, make_root(keyset), RepoState(None, None, None), targets)
    assert signed is not None
    ts = Metadata[Timestamp].from_bytes(signed.files[-1][1])
    state = RepoState(ts, None, Metadata.from_bytes(signed.files[2][1]))  # type: ignore[arg-type]
    assert ts.signed.unrecognized_fields[RECORD_FIELD] == {"length": 3, "hashes": {"sha256": "ab" * 32}}
    assert not needs_signing(state, targets)
    del ts.signed.unrecognized_fields[RECORD_FIELD]
    assert needs_signing(state, targets)


def test_an_expired_timestamp_is_renewed_by_the_next_publish(keys, tmp_path):
    """Expiry is the one check the publisher's refresh leaves out: a repository nobody published to for a day
    still takes the next publish, which signs a fresh timestamp (``cairn verify`` then passes)."""
    repo = Dir(tmp_path / "repo")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), *to]))
    timestamp = Metadata[Timestamp].from_bytes(repo.get("metadata/timestamp.json"))
    timestamp.signed.expires = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    timestamp.signatures.clear()
    timestamp.sign(load_keys(keys).signer("online"))
    repo.put("metadata/timestamp.json", timestamp.to_bytes(JSONSerializer(compact=False)))
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "b", version="5.2.4", families=("gfx90a",))), *to]))
    ok(cairn(["verify", str(repo.root), "--root", str(keys / "root.json")], env={**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf")}))


# -- (d) cairn verify --root of a file that is not a root -------------------------------------------------------------
@pytest.mark.parametrize("kind", ["text", "public-keys", "timestamp", "not-self-signed"])
def test_verify_with_a_root_that_is_not_a_root_is_one_line(keys, tmp_path, kind):
    repo = Dir(tmp_path / "repo")
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), "--to", repo.url, "--keys", str(keys)]))
    given = tmp_path / "given.json"
    if kind == "text":
        given.write_text("hello\n")
    elif kind == "public-keys":
        given.write_bytes((keys / "public.json").read_bytes())
    elif kind == "timestamp":
        given.write_bytes(repo.get("metadata/timestamp.json"))
    else:
        root = json.loads((keys / "root.json").read_bytes())
        root["signed"]["version"] = 7  # what the root keys signed no longer
        given.write_bytes(dumps(root))
    proc = cairn(["verify", str(repo.root), "--root", str(given)], env={**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf")})
    line = refused(proc, str(given))
    assert proc.returncode == 2 and "TUF root" in line and "--root" in line


# -- (e) promote on a malformed staged record ------------------------------------------------------------------------
def _sign_in(repo: Path, keys: Path, objs: list[Obj]) -> None:
    """Put ``objs`` into the repository as signed targets, as a publish run would (the run's own code)."""
    keyset = load_keys(keys)
    root = Metadata.from_bytes((keys / "root.json").read_bytes())
    run = Run(FileBackend(repo), SigningSession(keyset, root), lambda _: None)  # type: ignore[arg-type]
    run.upload("test objects", objs)
    run.commit(Report(repo.as_uri(), "x", "dev"))


@pytest.mark.parametrize("record", [b"not json at all\n", b"[1, 2]\n", b'{"release": {"version": "7.0.0"}}\n',
                                    b'{"release": {"version": "7.0.0", "required_gates": {}}, "cells": [{"release": "7.0.0"}]}\n'])
def test_promote_of_a_malformed_signed_staged_record_is_one_line(keys, tmp_path, record):
    repo = Dir(tmp_path / "repo")
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), "--to", repo.url, "--keys", str(keys)]))
    _sign_in(repo.root, keys, [Obj("staging/7.0.0/release.json", record, JSON, True)])
    before = repo.state()
    refused(cairn(["promote", "--version", "7.0.0", "--channel", "dev", "--to", repo.url, "--keys", str(keys)]),
            "staging/7.0.0/release.json")
    assert repo.state() == before


def test_promote_of_a_garbled_staged_record_is_one_line(keys, tmp_path):
    """Garbage written over both copies of a signed record: refused as not the signed bytes, in one line."""
    repo = Dir(tmp_path / "repo")
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), "--stage-only",
              "--to", repo.url, "--keys", str(keys)]))
    key = "staging/5.2.3/release.json"
    sha = chain(repo)[2]["signed"]["targets"][key]["hashes"]["sha256"]
    for name in (key, hashed_name(key, sha)):
        repo.put(name, b"\x00garbage{")
    before = repo.state()
    refused(cairn(["promote", "--version", "5.2.3", "--channel", "dev", "--to", repo.url, "--keys", str(keys)]), key)
    assert repo.state() == before


# -- the same attacks on S3 (moto) --------------------------------------------------------------------------------------
BUCKET = "cairn-supply-chain"


# -- (f) an older signed state put back is a rollback, refused by a machine that verified the newer one -----------
def _rollback_attack(repo: Dir | Bucket, keys: Path, tmp_path: Path, environ: dict[str, str]) -> None:
    """Two publishes; then every metadata file the first one left is put back (all validly signed, the newer files
    left beside them): a client starting from the root alone would accept that state, and a publisher would re-sign
    it with fresh expiry, dropping 5.2.4. This machine verified timestamp version 2 there, so the run is refused in
    one line and nothing is written; a machine with no such memory is not protected (the module docstring of
    cairn.sign.trusted says so)."""
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), *to], env=environ))
    first = {k: repo.get(k) for k in ("metadata/timestamp.json", *(f"metadata/{n}" for n in ("1.snapshot.json", "1.targets.json")))}
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "b", version="5.2.4", families=("gfx90a",))), *to], env=environ))
    assert "staging/5.2.4/release.json" in chain(repo)[2]["signed"]["targets"]
    for key, data in first.items():
        repo.put(key, data)
    assert "staging/5.2.4/release.json" not in chain(repo)[2]["signed"]["targets"]  # the state the attacker wants
    before = repo.state()
    line = refused(cairn(["publish", str(write_sample_bundle(tmp_path / "c", version="5.2.5", families=("gfx90a",))), *to],
                         env=environ), "metadata/timestamp.json", "an older signed state than this machine verified")
    assert "timestamp version 1 < 2" in line and "nothing was written" in line
    assert repo.state() == before
    refused(cairn(["promote", "--version", "5.2.3", "--channel", "dev", *to], env=environ), "older signed state")
    assert repo.state() == before


def test_an_older_signed_state_put_back_is_refused_as_a_rollback(keys, tmp_path):
    _rollback_attack(Dir(tmp_path / "repo"), keys, tmp_path, {**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf")})


def test_a_repository_reset_on_purpose_starts_over_and_says_so(keys, tmp_path):
    """Removed whole (a release engineer's fresh start): the next publish is a first publish, which sets this
    machine's memory of the old repository aside, saying so, and the publish after it builds on the new one."""
    import shutil

    repo = Dir(tmp_path / "repo")
    environ = {**os.environ, "CAIRN_TUF_CACHE": str(tmp_path / "tuf")}
    to = ["--to", repo.url, "--keys", str(keys)]
    for version in ("5.2.3", "5.2.4"):
        ok(cairn(["publish", str(write_sample_bundle(tmp_path / version, version=version, families=("gfx90a",))), *to], env=environ))
    shutil.rmtree(repo.root)
    again = ok(cairn(["publish", str(write_sample_bundle(tmp_path / "c", version="5.2.5", families=("gfx90a",))), *to], env=environ))
    assert "a new repository — this machine had verified timestamp version 2 there; that state is set aside" in again.stdout + again.stderr
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "d", version="5.2.6", families=("gfx90a",))), *to], env=environ))
    assert "staging/5.2.6/release.json" in chain(repo)[2]["signed"]["targets"]


@pytest.fixture(scope="module")
def s3():
    from support import need_module
    from support.servers import moto_s3

    need_module("boto3")
    need_module("moto.server")
    with moto_s3(BUCKET) as server:
        yield server


def s3_env(s3, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CAIRN_S3_ENDPOINT": s3["endpoint"], "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1", "CAIRN_TUF_CACHE": str(tmp_path / "tuf-cache")}


@pytest.mark.s3
@pytest.mark.parametrize("plant", ["in-place", "new-chain"])
def test_s3_a_planted_target_stops_promote(s3, keys, tmp_path, plant):
    environ, repo = s3_env(s3, tmp_path), Bucket(s3, f"plant-{plant}")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), "--stage-only", *to], env=environ))
    named = plant_in_place(repo) if plant == "in-place" else (plant_new_chain(repo) or "metadata/timestamp.json")
    before = repo.state()
    refused(cairn(["promote", "--version", "5.2.3", "--channel", "dev", *to], env=environ), named)
    assert repo.state() == before


@pytest.mark.s3
def test_s3_a_flipped_gate_record_is_refused_by_promote(s3, keys, tmp_path):
    environ, repo = s3_env(s3, tmp_path), Bucket(s3, "flipped")
    to = ["--to", repo.url, "--keys", str(keys)]
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",), gates=HELD)), "--stage-only", *to], env=environ))
    staged = json.loads(repo.get("staging/5.2.3/release.json"))
    assert cell_id(staged["cells"][0]) in json.loads(repo.get("staging/5.2.3/gates.json"))
    flip_gates(repo, "5.2.3")
    before = repo.state()
    refused(cairn(["promote", "--version", "5.2.3", "--channel", "nightly", *to], env=environ), "staging/5.2.3/gates.json")
    assert repo.state() == before


@pytest.mark.s3
def test_s3_a_forged_publish_record_does_not_freeze_a_publish(s3, keys, tmp_path):
    _forge_record_attack(Bucket(s3, "frozen"), keys, tmp_path, s3_env(s3, tmp_path))


def test_the_fast_path_reads_what_the_signer_writes(keys, tmp_path):
    """The fast path's copies (record key and field, canonical JSON) agree with the signing code, and it accepts
    the timestamp a real publish signed — and no longer once one signature byte is changed."""
    from securesystemslib.formats import encode_canonical

    from cairn.sign import tuf

    assert (fastpath.RECORD_KEY, fastpath.RECORD_FIELD) == (tuf.RECORD_KEY, tuf.RECORD_FIELD)
    repo = Dir(tmp_path / "repo")
    ok(cairn(["publish", str(write_sample_bundle(tmp_path / "a", families=("gfx90a",))), "--to", repo.url, "--keys", str(keys)]))
    timestamp = json.loads(repo.get("metadata/timestamp.json"))
    assert fastpath.canonical_json(timestamp["signed"]) == encode_canonical(timestamp["signed"])
    root_signed = json.loads((keys / "root.json").read_bytes())["signed"]
    assert fastpath.names_record(timestamp, repo.get(fastpath.RECORD_KEY))
    assert fastpath.signed_by_timestamp_keys(timestamp, root_signed)
    sig = timestamp["signatures"][0]["sig"]
    timestamp["signatures"][0]["sig"] = ("0" if sig[0] != "0" else "1") + sig[1:]
    assert not fastpath.signed_by_timestamp_keys(timestamp, root_signed)


@pytest.mark.s3
def test_s3_a_forged_timestamp_does_not_freeze_a_publish(s3, keys, tmp_path):
    _forge_timestamp_attack(Bucket(s3, "forged-timestamp"), keys, tmp_path, s3_env(s3, tmp_path))


@pytest.mark.s3
def test_s3_an_older_signed_state_put_back_is_refused_as_a_rollback(s3, keys, tmp_path):
    _rollback_attack(Bucket(s3, "rollback"), keys, tmp_path, s3_env(s3, tmp_path))
