"""The shared S3 action cache against a real (moto) S3 server: two "machines" (separate stores, HOMEs and working
directories) share one build; a build killed between tree and record, a racing pair and a tampered tree never
leave the cache pointing at anything wrong; read-only jobs never write; an archive cannot write outside its tree.

Every build is ``python -m cairn.cli build`` in its own process, read through its ``--json`` report. Every machine
here is a trusted writer: it signs its records with one cache-writer key, which its trust list names
(``WRITER``; the attacks on that signature are in ``test_cache_signing.py``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from cairn.store.archive import Bound, DamagedArchive, PastBound, pack, unpack
from support import ROOT, need_module, need_tool
from support.cache import (
    CACHE_BUCKET,
    BucketPlace,
    DirectoryPlace,
    Place,
    build,
    build_command,
    machine,
    make_writer,
    ran,
    record_body,
    signed_record,
    writer_env,
)
from support.s3 import aws_env, point_at
from support.servers import archive_release, moto_s3, serve_directory

boto3 = need_module("boto3")
moto_server = need_module("moto.server")

BUCKET = CACHE_BUCKET
PARTS = 3
DELAY = {"seconds": 0.0}


@pytest.fixture(autouse=True, scope="module")
def cache_writer(tmp_path_factory):
    """One cache-writer key for the module's machines."""
    return make_writer(tmp_path_factory.mktemp("cache-writer"))


@pytest.fixture
def s3():
    """A bucket of the test's own: versioned (to count overwrites) and so keeping every object a test deletes;
    gone with the test, so no test's GBs outlive it (the two-machine test alone pushes a release's SDK)."""
    with moto_s3(BUCKET, versioning=True) as server:
        yield server


@pytest.fixture
def manifest(tmp_path: Path):
    """A release of PARTS archive components served over loopback HTTP (slowed down by DELAY when asked)."""
    www = tmp_path / "www"
    www.mkdir()
    with serve_directory(www, DELAY) as base:
        yield archive_release(tmp_path, www, base, name="cache-test", families=("gfx90a",), parts=PARTS)


@pytest.fixture
def prefix() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


def _objects(s3: dict, prefix: str) -> dict[str, int]:
    """key (below the prefix) → number of versions the bucket holds of it."""
    out: dict[str, int] = {}
    for page in s3["client"].get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for version in page.get("Versions", []):
            key = version["Key"][len(prefix) + 1:]
            out[key] = out.get(key, 0) + 1
    return out


def _current(s3: dict, prefix: str) -> set[str]:
    """The keys (below the prefix) a reader finds now: deleted ones are only old versions in this bucket."""
    pages = s3["client"].get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return {o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", [])}


def _assert_every_record_has_its_tree(s3: dict, prefix: str) -> None:
    """Every record's tree is in the bucket, and so is every blob that tree names."""
    objects = _current(s3, prefix)
    for key in [k for k in objects if k.startswith("ac/")]:
        record = record_body(s3["client"].get_object(Bucket=BUCKET, Key=f"{prefix}/{key}")["Body"].read())
        tree = f"trees/{record['output']}.v2.tar.zst"
        assert tree in objects, f"{key} points at a tree the bucket lacks"
        for blob in _blobs_named(s3["client"].get_object(Bucket=BUCKET, Key=f"{prefix}/{tree}")["Body"].read()):
            assert f"blobs/{blob.sha256}.zst" in objects, f"{tree} names {blob.path}, a blob the bucket lacks"


def _blobs_named(archive: bytes) -> list:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        blobs: list = []
        unpack(archive, Path(scratch), blobs=blobs)
        return blobs


def _distinct_files(store: Path) -> int:
    return len({p.stat().st_ino for p in (store / "trees").rglob("*") if p.is_file() and not p.is_symlink()})


def _sdk_text(report: dict, name: str) -> str:
    return Path(report["sdk_tree"], name).read_text()


@pytest.mark.s3
def test_a_second_machine_runs_nothing_the_first_built(s3, manifest, prefix, tmp_path) -> None:
    cache = ["--cache", f"s3://{BUCKET}/{prefix}"]
    first, _ = build(machine(tmp_path, "a", s3), manifest, *cache)
    actions = set(first["actions"])
    assert ran(first) == actions and len(actions) == 2 * PARTS + 1
    assert set(first["cache"]["uploaded"]) == actions

    second, _ = build(machine(tmp_path, "b", s3), manifest, *cache)
    assert second["counts"]["ran"] == 0 and second["counts"]["cached"] == len(actions)
    assert set(second["cache"]["fetched"]) == actions and second["cache"]["damaged"] == []
    assert str(tmp_path / "b" / "store") in second["sdk_tree"]
    assert _sdk_text(second, "part1.txt") == "payload 1\n"
    assert second["actions"]["assemble:sdk"]["output"] == first["actions"]["assemble:sdk"]["output"]
    _assert_every_record_has_its_tree(s3, prefix)
    # the fetched trees share files by hard links as the built ones do: no more distinct files than machine a holds
    assert _distinct_files(tmp_path / "b" / "store") <= _distinct_files(tmp_path / "a" / "store")


@pytest.mark.s3
def test_a_store_built_before_the_cache_existed_seeds_it(s3, manifest, prefix, tmp_path) -> None:
    a = machine(tmp_path, "a", s3)
    build(a, manifest)
    assert _objects(s3, prefix) == {}
    seeded, _ = build(a, manifest, "--cache", f"s3://{BUCKET}/{prefix}")
    assert seeded["counts"]["ran"] == 0 and set(seeded["cache"]["uploaded"]) == set(seeded["actions"])
    other, _ = build(machine(tmp_path, "b", s3), manifest, "--cache", f"s3://{BUCKET}/{prefix}")
    assert other["counts"]["ran"] == 0


@pytest.mark.s3
def test_read_only_reads_the_cache_and_never_writes_it(s3, manifest, prefix, tmp_path) -> None:
    empty = f"{prefix}-empty"
    alone, _ = build(machine(tmp_path, "pr1", s3), manifest, "--cache", f"s3://{BUCKET}/{empty}", "--cache-read-only")
    assert ran(alone) == set(alone["actions"]) and alone["cache"]["uploaded"] == []
    assert _objects(s3, empty) == {}

    build(machine(tmp_path, "a", s3), manifest, "--cache", f"s3://{BUCKET}/{prefix}")
    before = _objects(s3, prefix)
    pr, _ = build(machine(tmp_path, "pr2", s3), manifest, "--cache", f"s3://{BUCKET}/{prefix}", "--cache-read-only")
    assert pr["counts"]["ran"] == 0 and pr["cache"]["read_only"] is True
    assert _objects(s3, prefix) == before
    pr3 = machine(tmp_path, "pr3", s3)
    plain = subprocess.run([c for c in build_command(pr3, manifest, "--cache", f"s3://{BUCKET}/{prefix}", "--cache-read-only") if c != "--json"],
                           cwd=pr3["cwd"], env=pr3["env"], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert f"cache s3://{BUCKET}/{prefix} (read-only): {len(pr['actions'])} fetched, 0 uploaded" in plain.stdout


_KILL_AT_FIRST_RECORD = """
import os, signal, sys
from cairn.remote import s3http
real = s3http.S3Client.request
def request(self, method, bucket, key="", **kwargs):
    if method == "PUT" and "/ac/" in key:
        os.kill(os.getpid(), signal.SIGKILL)  # killed after its tree went up, before its record does
    return real(self, method, bucket, key, **kwargs)
s3http.S3Client.request = request
from cairn.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.s3
def test_a_build_killed_mid_upload_leaves_no_record_and_the_next_machine_rebuilds(s3, manifest, prefix, tmp_path) -> None:
    a = machine(tmp_path, "a", s3)
    command = [sys.executable, "-c", _KILL_AT_FIRST_RECORD, *build_command(a, manifest, "--cache", f"s3://{BUCKET}/{prefix}")[3:]]
    victim = subprocess.run(command, cwd=a["cwd"], env=a["env"], capture_output=True, text=True, timeout=300)
    assert victim.returncode == -9, victim.stderr
    left = _objects(s3, prefix)
    assert [k for k in left if k.startswith("trees/")] and not [k for k in left if k.startswith("ac/")]

    b, _ = build(machine(tmp_path, "b", s3), manifest, "--cache", f"s3://{BUCKET}/{prefix}")
    assert ran(b) == set(b["actions"]) and b["cache"]["fetched"] == []
    assert _sdk_text(b, "part0.txt") == "payload 0\n"
    _assert_every_record_has_its_tree(s3, prefix)


_CACHE_GOES_AWAY = """
import sys
from cairn.remote import s3http
real, calls = s3http.S3Client.request, []
def request(self, method, bucket, key="", **kwargs):
    calls.append(method)
    if len(calls) > 1:  # the start-up probe gets through, then the server is gone
        raise s3http.ConnectionFailed("connection refused")
    return real(self, method, bucket, key, **kwargs)
s3http.S3Client.request = request
from cairn.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.s3
def test_a_cache_that_goes_away_mid_build_is_reported_once_and_the_build_runs_locally(s3, manifest, prefix, tmp_path) -> None:
    build(machine(tmp_path, "a", s3), manifest, "--cache", f"s3://{BUCKET}/{prefix}")
    b = machine(tmp_path, "b", s3)
    b["env"]["CAIRN_S3_RETRY_SECONDS"] = "1"
    command = [sys.executable, "-c", _CACHE_GOES_AWAY, *build_command(b, manifest, "--cache", f"s3://{BUCKET}/{prefix}")[3:]]
    proc = subprocess.run(command, cwd=b["cwd"], env=b["env"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert ran(report) == set(report["actions"]) and _sdk_text(report, "part0.txt") == "payload 0\n"
    assert len(report["cache"]["failed"]) == 1 and report["cache"]["offline"]
    assert proc.stderr.count("giving up on") == 1


@pytest.mark.s3
def test_a_racing_pair_leaves_one_record_per_action(s3, manifest, prefix, tmp_path) -> None:
    DELAY["seconds"] = 2.0  # every fetch takes 2 s, so both machines miss on the same actions and both run them
    try:
        machines = [machine(tmp_path, name, s3) for name in ("a", "b")]
        procs = [subprocess.Popen(build_command(m, manifest, "--cache", f"s3://{BUCKET}/{prefix}"), cwd=m["cwd"], env=m["env"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for m in machines]
        outputs = [p.communicate(timeout=300) for p in procs]
    finally:
        DELAY["seconds"] = 0.0
    assert all(p.returncode == 0 for p in procs), outputs
    reports = [json.loads(out) for out, _ in outputs]
    raced = [a for r in reports for a in r["cache"]["raced"]]
    assert raced, "the two builds never raced on an action"
    assert all(len(r["cache"]["uploaded"]) + len(r["cache"]["raced"]) == len(ran(r)) for r in reports), [r["cache"] for r in reports]
    records = {k: n for k, n in _objects(s3, prefix).items() if k.startswith("ac/")}
    assert len(records) == 2 * PARTS + 1 and set(records.values()) == {1}, records  # never overwritten
    _assert_every_record_has_its_tree(s3, prefix)
    third, _ = build(machine(tmp_path, "c", s3), manifest, "--cache", f"s3://{BUCKET}/{prefix}")
    assert third["counts"]["ran"] == 0


@pytest.mark.s3
@pytest.mark.parametrize("damage", ["other files", "truncated"])
def test_a_tampered_tree_is_reported_never_used_and_rebuilt(s3, manifest, prefix, tmp_path, damage) -> None:
    cache = ["--cache", f"s3://{BUCKET}/{prefix}"]
    first, _ = build(machine(tmp_path, "a", s3), manifest, *cache)
    digest = first["actions"]["assemble:sdk"]["output"]  # the one tree no other action also produces
    key = f"{prefix}/trees/{digest}.v2.tar.zst"
    original = s3["client"].get_object(Bucket=BUCKET, Key=key)["Body"].read()
    if damage == "truncated":
        forged = original[: len(original) // 2]
    else:
        fake = tmp_path / "fake"
        fake.mkdir()
        (fake / "part2.txt").write_text("payload 2, but not the one that was built\n")
        forged = pack(fake)
    s3["client"].put_object(Bucket=BUCKET, Key=key, Body=forged)

    second, stderr = build(machine(tmp_path, "b", s3), manifest, *cache)
    assert ran(second) == {"assemble:sdk"}
    assert _sdk_text(second, "part2.txt") == "payload 2\n"
    assert len(second["cache"]["damaged"]) == 1 and "assemble:sdk" in second["cache"]["damaged"][0]
    assert f"trees/{digest}.v2.tar.zst failed verification" in stderr and "not used" in stderr

    third, _ = build(machine(tmp_path, "c", s3), manifest, *cache)  # the rebuild put the right tree back
    assert third["counts"]["ran"] == 0 and third["cache"]["damaged"] == []


@pytest.mark.s3
@pytest.mark.parametrize("older", ["tar.zst", "tar.gz"])
def test_a_whole_tree_an_earlier_version_stored_is_fetched(s3, manifest, prefix, tmp_path, older) -> None:
    """A bucket filled before blobs (``trees/<digest>.tar.zst``, every file inside) or before zstd (``.tar.gz``):
    the record names only the digest, and the tree is found under the older name."""
    import gzip

    import zstandard

    cache = ["--cache", f"s3://{BUCKET}/{prefix}"]
    first, _ = build(machine(tmp_path, "a", s3), manifest, *cache)
    digest = first["actions"]["assemble:sdk"]["output"]
    key = f"{prefix}/trees/{digest}.v2.tar.zst"
    archive = s3["client"].get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert _blobs_named(archive) == []  # small files only: the same tar an earlier version wrote whole
    tar = zstandard.ZstdDecompressor().decompressobj().decompress(archive)
    body = gzip.compress(tar) if older == "tar.gz" else archive
    s3["client"].put_object(Bucket=BUCKET, Key=f"{prefix}/trees/{digest}.{older}", Body=body)
    s3["client"].delete_object(Bucket=BUCKET, Key=key)

    second, _ = build(machine(tmp_path, "b", s3), manifest, *cache)
    assert second["counts"]["ran"] == 0 and second["cache"]["damaged"] == []
    assert "assemble:sdk" in second["cache"]["fetched"]
    assert _sdk_text(second, "part2.txt") == "payload 2\n"


@pytest.mark.s3
def test_a_damaged_record_is_reported_removed_and_written_again(s3, manifest, prefix, tmp_path) -> None:
    cache = ["--cache", f"s3://{BUCKET}/{prefix}"]
    first, _ = build(machine(tmp_path, "a", s3), manifest, *cache)
    key = Path(first["actions"]["assemble:sdk"]["log"]).stem  # logs/<action key>.log
    # signed by the trusted writer (a bug of its own): the signature verifies, the record does not
    s3["client"].put_object(Bucket=BUCKET, Key=f"{prefix}/ac/{key}.v3.json", Body=signed_record({"key": "not this one"}))

    second, stderr = build(machine(tmp_path, "b", s3), manifest, *cache)
    assert ran(second) == {"assemble:sdk"} and f"ac/{key}.v3.json is not a cache record" in stderr
    record = record_body(s3["client"].get_object(Bucket=BUCKET, Key=f"{prefix}/ac/{key}.v3.json")["Body"].read())
    assert record["key"] == key and record["output"] == first["actions"]["assemble:sdk"]["output"]


@pytest.mark.s3
def test_bad_cache_arguments_get_one_line(s3, manifest, tmp_path) -> None:
    m = machine(tmp_path, "a", s3)
    cases = [(["--cache", "http://example.invalid/x"], "not an s3://bucket/prefix URL"),
             (["--cache-read-only"], "--cache-read-only needs --cache"),
             (["--cache", "s3://no-such-bucket/x"], "no-such-bucket")]
    for extra, expected in cases:
        proc = subprocess.run(build_command(m, manifest, *extra), cwd=m["cwd"], env=m["env"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not (m["store"] / "trees").exists() or not any((m["store"] / "trees").iterdir())


def test_bad_cache_directories_get_one_line(manifest, tmp_path) -> None:
    """A directory cache that is not there (a mistyped path, a share not mounted) is refused before the build, not
    made on this machine's disk where no other machine would see it; so are a file and a file URL naming a host."""
    m = machine(tmp_path, "a", None)
    (tmp_path / "a-file").write_text("not a directory\n")
    cases = [(["--cache", (tmp_path / "absent").as_uri()], f"{tmp_path / 'absent'} is not a directory — make it"),
             (["--cache", str(tmp_path / "a-file")], f"{tmp_path / 'a-file'} is not a directory"),
             (["--cache", "file://otherhost/srv/cache"], "names the host 'otherhost'")]
    for extra, expected in cases:
        proc = subprocess.run(build_command(m, manifest, *extra), cwd=m["cwd"], env=m["env"], capture_output=True, text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr
    assert not (tmp_path / "absent").exists() and not (m["store"] / "trees").exists()


def test_a_second_machine_builds_nothing_through_a_directory_given_as_a_plain_path(manifest, tmp_path) -> None:
    """The cache as a plain path (``--cache /mnt/ci-cache``): the second machine fetches every action the first built."""
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    first, _ = build(machine(tmp_path, "a", None), manifest, "--cache", str(shared))
    second, _ = build(machine(tmp_path, "b", None), manifest, "--cache", str(shared), "--cache-read-only")
    assert ran(first) == set(first["actions"]) and set(first["cache"]["uploaded"]) == set(first["actions"])
    assert second["counts"]["ran"] == 0 and set(second["cache"]["fetched"]) == set(first["actions"])
    assert second["cache"]["url"] == shared.as_uri()
    assert {a: o["output"] for a, o in second["actions"].items()} == {a: o["output"] for a, o in first["actions"].items()}
    assert Path(second["sdk_tree"]).is_relative_to(tmp_path / "b" / "store") and any(Path(second["sdk_tree"]).iterdir())


def _tar(entries: list[tuple[str, str, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, kind, value in entries:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value.encode()))
    return buffer.getvalue()


@pytest.mark.parametrize("entries", [
    [("escape", "link", str(Path("/tmp"))), ("escape/planted", "file", "x")],
    [("../planted", "file", "x")],
    [("/tmp/planted", "file", "x")],
    [("sub/planted", "file", "x")],  # a file before its directory
    [("twice", "file", "x"), ("twice", "file", "y")],  # a name twice: the second would replace the first
], ids=["through-a-symlink", "dot-dot", "absolute", "no-parent", "a-name-twice"])
def test_an_archive_from_the_bucket_never_writes_outside_its_tree(tmp_path, entries) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(DamagedArchive):
        unpack(_tar(entries), dest)
    assert not Path("/tmp/planted").exists() and not (tmp_path / "planted").exists()


def test_pack_then_unpack_gives_the_same_tree_and_the_same_bytes(tmp_path) -> None:
    from cairn.digest import tree_digest

    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "tool").write_text("#!/bin/sh\n")
    (src / "bin" / "tool").chmod(0o755)
    (src / "lib.so.1").write_bytes(b"\x7fELF")
    (src / "lib.so").symlink_to("lib.so.1")
    (src / "empty").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    unpack(pack(src), out)
    assert tree_digest(out) == tree_digest(src)
    assert pack(src) == pack(out)


def test_an_archive_costs_compressed_bytes_no_more_than_stored_shrinks_text_and_any_tar_reads_it(tmp_path) -> None:
    """A library-like file (compressible symbols around random "code objects"), a deb-like random file and
    headers: GNU tar with the zstd tool reads the archive and gives back the same tree; the random bytes cost no
    more than stored, the text shrinks; packing twice gives the same bytes."""
    import random

    from cairn.digest import tree_digest

    rng = random.Random(7)
    noise = rng.randbytes(3 << 20)
    text = "".join(f"template <typename T{i}> struct kernel_{i} {{ T{i} value; }};\n" for i in range(60000)).encode()
    src = tmp_path / "src"
    (src / "include").mkdir(parents=True)
    (src / "include" / "kernels.hpp").write_bytes(text)
    (src / "lib.so").write_bytes(text[: 2 << 20] + noise + text[-(1 << 20):])
    (src / "pkg.deb").write_bytes(noise)
    archive = tmp_path / "tree.tar.zst"
    archive.write_bytes(pack(src))
    assert pack(src) == archive.read_bytes()
    size = archive.stat().st_size
    assert size < len(noise) * 2 + len(text) // 2  # the noise twice, stored, and the text (7 MB of it) compressed
    assert subprocess.run([need_tool("zstd"), "-tq", str(archive)]).returncode == 0
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([need_tool("tar"), "--zstd", "-xf", str(archive), "-C", str(out)], check=True)
    assert tree_digest(out) == tree_digest(src)


def test_a_tree_an_earlier_version_put_in_the_cache_as_a_gzipped_tar_is_still_used(tmp_path) -> None:
    """Before zstd, trees went to ``trees/<digest>.tar.gz``; a record written then names only the digest, so the
    reader still unpacks such an archive, checked like any other."""
    import io
    import tarfile

    from cairn.digest import tree_digest

    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "libx.so").write_bytes(b"\x7fELF" + bytes(range(256)) * 40)
    (src / "lib" / "libx.so.1").symlink_to("libx.so")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(src.rglob("*")):
            tar.add(path, arcname=path.relative_to(src).as_posix(), recursive=False)
    out = tmp_path / "out"
    out.mkdir()
    files = unpack(buffer.getvalue(), out)
    assert tree_digest(out) == tree_digest(src) and [f[0] for f in files] == ["lib/libx.so"]
    with pytest.raises(DamagedArchive, match="neither zstd nor gzip"):
        unpack(b"PK\x03\x04 a zip is not an archive pack wrote", tmp_path / "other")


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.docker
def test_two_machines_share_the_default_release_sdk(s3, prefix, tmp_path, default_slice) -> None:
    """The default release's SDK for one family, built on one machine and fetched by another: nothing runs twice.

    The first machine is the session's default slice, built before the cache existed: its local hits seed the
    empty bucket (the way a store built before the cache was turned on joins it), so the SDK is not fetched and
    unpacked a third time on this disk."""
    from support import DEFAULT_SLICE_FAMILY

    reports = []
    for name, store in (("a", default_slice), ("b", tmp_path / "b" / "store")):
        box = machine(tmp_path, name, s3)
        box["env"]["CAIRN_ROOT"] = str(ROOT)
        command = [sys.executable, "-m", "cairn.cli", "build", "--family", DEFAULT_SLICE_FAMILY, "--only", "assemble:sdk",
                   "--jobs", "2", "--store", str(store), "--json", "--cache", f"s3://{BUCKET}/{prefix}"]
        started = time.monotonic()
        proc = subprocess.run(command, cwd=box["cwd"], env=box["env"], capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-2000:]
        reports.append(json.loads(proc.stdout))
        print(f"machine {name}: {reports[-1]['counts']} in {time.monotonic() - started:.1f} s")
    first, second = reports
    everything = sorted(first["actions"])
    assert first["counts"]["failed"] == 0 and first["counts"]["cached"] == len(everything)
    assert sorted(first["cache"]["uploaded"]) == everything  # the slice's own work, now in the bucket
    assert second["counts"]["ran"] == 0 and second["counts"]["cached"] == len(everything)
    assert sorted(second["cache"]["fetched"]) == everything and second["cache"]["uploaded"] == []
    assert second["actions"]["assemble:sdk"]["output"] == first["actions"]["assemble:sdk"]["output"]
    assert (Path(second["sdk_tree"]) / "include" / "hip" / "hip_runtime.h").is_file()
    fetched = {p.name for p in (tmp_path / "b" / "store" / "trees").iterdir()}
    assert fetched and fetched <= {p.name for p in (default_slice / "trees").iterdir()}


# a machine that pushes, then another that fetches, one big output tree; each prints its peak RSS
_BIG_TREE = r"""
import os, sys
from pathlib import Path
from cairn.store.base import ActionRecord
from cairn.store.local import LocalStore
from cairn.store.shared import SharedCache
role, root, url, size = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
store, cache = LocalStore(root), SharedCache(url)
if role == "push":
    work = store.workdir("big")
    with open(work / "payload.bin", "wb") as out:
        for _ in range(size >> 20):
            out.write(os.urandom(1 << 20))  # incompressible: the archive is as big as the tree
    record = ActionRecord(key="k" * 64, action="big", output=store.commit(work))
    cache.push(record, store)
    print(record.output, cache.report.uploaded, file=sys.stderr)
else:
    record = cache.fetch("k" * 64, store)
    print(record.output if record else None, cache.report.fetched, file=sys.stderr)
# VmHWM: this process's own peak (ru_maxrss would include the forking test process's, carried over exec)
print(next(int(line.split()[1]) >> 10 for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


@pytest.mark.s3
def test_a_big_tree_goes_through_the_cache_without_being_held_in_memory(s3, prefix, tmp_path):
    """A 192 MiB output, pushed in 8 MiB multipart parts and fetched by another store: neither process grows by
    anything near the tree's size (the archive and the blob are written to, and read from, files in the store's
    work area)."""
    size = 192 << 20
    env = aws_env(s3["endpoint"], CAIRN_MULTIPART_THRESHOLD=str(64 << 20), CAIRN_MULTIPART_PART=str(8 << 20), **writer_env())
    url = f"s3://{BUCKET}/{prefix}"
    runs = {}
    for role in ("push", "fetch"):
        proc = subprocess.run([sys.executable, "-c", _BIG_TREE, role, str(tmp_path / role), url, str(size)], env=env,
                              capture_output=True, text=True, timeout=600, check=True)
        runs[role] = (int(proc.stdout.strip()), proc.stderr.split())
    pushed, fetched = runs["push"][1], runs["fetch"][1]
    assert pushed[1:] == ["['big']"] and fetched == [pushed[0], "['big']"]
    assert (tmp_path / "fetch" / "trees" / pushed[0] / "payload.bin").stat().st_size == size
    listed = lambda under: s3["client"].list_object_versions(Bucket=BUCKET, Prefix=f"{prefix}/{under}/").get("Versions", [])  # noqa: E731
    trees, blobs = listed("trees"), listed("blobs")
    assert len(trees) == 1 and trees[0]["Size"] < 4096  # the archive names the payload, a blob: it does not hold it
    assert len(blobs) == 1 and int(blobs[0]["ETag"].strip('"').split("-")[1]) >= 24  # one object, sent in parts
    for role, (peak_mib, _) in runs.items():
        assert peak_mib < 140, f"{role}: peak RSS {peak_mib} MiB for a {size >> 20} MiB tree"
    for role in ("push", "fetch"):  # no scratch file of an archive or a blob is left behind
        assert not list((tmp_path / role / "tmp").glob(".*")), list((tmp_path / role / "tmp").iterdir())


def _small_tree(store, name: str) -> str:
    work = store.workdir(name)
    (work / "out.txt").write_text(name)
    return store.commit(work)


@pytest.mark.s3
def test_a_full_disk_is_this_machines_failure_not_the_caches(s3, prefix, tmp_path, monkeypatch) -> None:
    """No space for the archive while pushing: reported, the build goes on, nothing is recorded. No space while
    unpacking a fetched tree: reported, the action runs, and the tree in the bucket is kept — it is not damaged."""
    import errno

    from cairn.store import shared
    from cairn.store.base import ActionRecord
    from cairn.store.local import LocalStore

    point_at(monkeypatch, s3["endpoint"])
    for name, value in writer_env().items():
        monkeypatch.setenv(name, value)
    full = OSError(errno.ENOSPC, "No space left on device")

    def no_space(*_args, **_kwargs):
        raise full

    first, cache = LocalStore(tmp_path / "first"), shared.SharedCache(f"s3://{BUCKET}/{prefix}")
    record = ActionRecord(key="a" * 64, action="demo", output=_small_tree(first, "demo"))
    with monkeypatch.context() as patch:
        patch.setattr(shared, "pack_to", no_space)
        cache.push(record, first)  # never raises: the local build is complete
    assert cache.report.uploaded == [] and "No space left on device" in " ".join(cache.report.failed)
    assert shared.SharedCache(f"s3://{BUCKET}/{prefix}").fetch(record.key, LocalStore(tmp_path / "x")) is None

    shared.SharedCache(f"s3://{BUCKET}/{prefix}").push(record, first)  # the next build, with room again: uploaded
    second = shared.SharedCache(f"s3://{BUCKET}/{prefix}")
    with monkeypatch.context() as patch:
        patch.setattr(shared, "unpack", no_space)
        assert second.fetch(record.key, LocalStore(tmp_path / "second")) is None
    assert second.report.damaged == [] and "unpacking" in " ".join(second.report.failed)
    assert shared.SharedCache(f"s3://{BUCKET}/{prefix}").fetch(record.key, LocalStore(tmp_path / "third")) == record


def _cache_env(monkeypatch, s3: dict) -> None:
    point_at(monkeypatch, s3["endpoint"])
    for name, value in writer_env().items():
        monkeypatch.setenv(name, value)


def _tree_with(store, name: str, big: bytes) -> str:
    """A tree holding ``big`` (a blob) at two places, and a small file of its own."""
    work = store.workdir(name)
    (work / "lib").mkdir()
    (work / "lib" / "libbig.so").write_bytes(big)
    (work / f"{name}.whl").write_bytes(big)
    (work / "name.txt").write_text(name)
    return store.commit(work)


def _gets(cache) -> list[str]:
    """Every object ``cache`` downloads to a file from now on, in order."""
    names: list[str] = []
    real = cache.backend.get_file

    def get_file(key, dest, **limits):
        names.append(key)
        return real(key, dest, **limits)

    cache.backend.get_file = get_file
    return names


@pytest.mark.s3
def test_a_file_many_trees_hold_is_one_blob_in_the_bucket_and_one_download(s3, prefix, tmp_path, monkeypatch) -> None:
    """Three trees with the same 2 MiB file twice each (a wheel in a package, an index and a bundle): the bucket
    holds it once, and a machine fetching all three downloads it once and hard-links the other five."""
    from cairn.digest import tree_digest
    from cairn.store.base import ActionRecord
    from cairn.store.local import LocalStore
    from cairn.store.shared import SharedCache

    _cache_env(monkeypatch, s3)
    big = os.urandom(2 << 20)
    first, url = LocalStore(tmp_path / "first"), f"s3://{BUCKET}/{prefix}"
    records = [ActionRecord(key=f"{n}" * 64, action=f"package:{n}", output=_tree_with(first, f"t{n}", big)) for n in range(3)]
    pusher = SharedCache(url)
    for record in records:
        pusher.push(record, first)
    assert sorted(pusher.report.uploaded) == [r.action for r in records]
    objects = _objects(s3, prefix)
    assert [k for k in objects if k.startswith("blobs/")] == [f"blobs/{hashlib.sha256(big).hexdigest()}.zst"]
    assert all(v["Size"] < 4096 for v in s3["client"].list_object_versions(Bucket=BUCKET, Prefix=f"{prefix}/trees/")["Versions"])
    _assert_every_record_has_its_tree(s3, prefix)

    second, fetcher = LocalStore(tmp_path / "second"), SharedCache(url)
    downloads = _gets(fetcher)
    assert [fetcher.fetch(r.key, second) for r in records] == records
    assert [d.split("/")[0] for d in downloads].count("blobs") == 1, downloads
    assert fetcher.report.linked_blobs == 5  # the six copies: one download, five hard links
    for report in (pusher.report, fetcher.report):  # random bytes: the blob costs its size once, the archives little
        moved = report.sent_bytes or report.received_bytes
        assert len(big) < moved < len(big) + 3 * 4096, (report.sent_bytes, report.received_bytes)
    for record in records:
        tree = second.tree(record.output)
        assert tree_digest(tree) == record.output == tree_digest(first.tree(record.output))
    copies = [p for p in (tmp_path / "second" / "trees").rglob("*") if p.is_file() and p.stat().st_size == len(big)]
    assert len(copies) == 6 and len({p.stat().st_ino for p in copies}) == 1


@pytest.mark.s3
@pytest.mark.parametrize("damage", ["other bytes", "missing", "not zstd", "a bomb", "too big"])
def test_a_tampered_or_missing_blob_is_reported_never_used_and_put_back(s3, prefix, tmp_path, monkeypatch, damage) -> None:
    """A blob whose bytes are not the ones its name says (or that is gone, is not zstd, or is a zstd bomb that would
    write a GiB where the tree names 2 MiB: decompression stops past the size named) fails the fetch of every
    tree naming it: reported, never used, and removed with that tree, so the rebuild's push puts both back. A
    read-only job reports the same and removes nothing."""
    import zstandard

    from cairn.store.base import ActionRecord
    from cairn.store.local import LocalStore
    from cairn.store.shared import SharedCache

    _cache_env(monkeypatch, s3)
    big = os.urandom(2 << 20)
    first, url = LocalStore(tmp_path / "first"), f"s3://{BUCKET}/{prefix}"
    record = ActionRecord(key="b" * 64, action="bundle:release", output=_tree_with(first, "bundle", big))
    SharedCache(url).push(record, first)
    blob = f"{prefix}/blobs/{hashlib.sha256(big).hexdigest()}.zst"
    if damage == "missing":
        s3["client"].delete_object(Bucket=BUCKET, Key=blob)
    else:
        forged = {"other bytes": zstandard.ZstdCompressor().compress(os.urandom(len(big))),
                  "a bomb": zstandard.ZstdCompressor().compress(bytes(1 << 30)),  # 1 GiB of zeros in 32 kB
                  "not zstd": big,
                  "too big": os.urandom(3 << 20)}[damage]  # more than zstd makes of 2 MiB: not downloaded past that
        s3["client"].put_object(Bucket=BUCKET, Key=blob, Body=forged)

    reader = SharedCache(url, read_only=True)
    assert reader.fetch(record.key, LocalStore(tmp_path / "pr")) is None
    assert len(reader.report.damaged) == 1 and "bundle:release" in reader.report.damaged[0]
    assert "removed" not in reader.report.damaged[0]
    assert f"trees/{record.output}.v2.tar.zst" in _objects(s3, prefix)  # read-only: nothing deleted

    victim, cache = LocalStore(tmp_path / "victim"), SharedCache(url)
    assert cache.fetch(record.key, victim) is None and not victim.has_tree(record.output)
    message = cache.report.damaged[0]
    expected = {"other bytes": "failed verification (its bytes", "missing": "is not in the cache",
                "not zstd": "is not zstd", "a bomb": f"more than the {len(big)} bytes",
                "too big": f"more bytes than zstd makes of the {len(big)}"}[damage]
    assert expected in message and "not used" in message and "with the tree that names it" in message, message
    left = _current(s3, prefix)
    assert f"trees/{record.output}.v2.tar.zst" not in left and blob[len(prefix) + 1:] not in left
    assert not list((tmp_path / "victim" / "tmp").iterdir())  # the half-filled tree is gone too

    SharedCache(url).push(record, first)  # what the rebuild that follows does
    third = LocalStore(tmp_path / "third")
    assert SharedCache(url).fetch(record.key, third) == record
    assert (third.tree(record.output) / "lib" / "libbig.so").read_bytes() == big


@pytest.mark.parametrize("headers", [
    {"CAIRN.blob.sha256": "0" * 64, "CAIRN.blob.size": "5"},
    {"CAIRN.blob.sha256": "../../etc/passwd", "CAIRN.blob.size": "5"},
    {"CAIRN.blob.sha256": "0" * 64, "CAIRN.blob.size": "-1"},
    {"CAIRN.blob.size": "5"},
], ids=["in-a-whole-tree", "bad-sha256", "bad-size", "no-sha256"])
def test_an_archive_naming_a_blob_badly_is_damaged(tmp_path, headers) -> None:
    """A member naming a blob is refused in an archive that holds whole trees, and wherever its name is not a
    sha256 or its size not a number: the blob's name becomes an object key, never anything else."""
    buffer = io.BytesIO()
    zstd = __import__("zstandard").ZstdCompressor().stream_writer(buffer, closefd=False)
    with tarfile.open(fileobj=zstd, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("lib.so")
        info.pax_headers = headers
        tar.addfile(info)
    zstd.close()
    dest = tmp_path / "dest"
    dest.mkdir()
    blobs = None if headers.get("CAIRN.blob.sha256") == "0" * 64 and headers["CAIRN.blob.size"] == "5" else []
    with pytest.raises(DamagedArchive, match="names a blob"):
        unpack(buffer.getvalue(), dest, blobs=blobs)


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, read as a file and never held whole in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def _tree_bomb(inflated: int, *, pax: int = 0) -> bytes:
    """A zstd tar of a few kB holding one file of ``inflated`` zero bytes (or, with ``pax``, a member whose PAX
    header alone is that many bytes, which ``tarfile`` would read into memory)."""
    import zstandard

    buffer = io.BytesIO()
    with zstandard.ZstdCompressor(level=19).stream_writer(buffer, closefd=False) as zstd, \
            tarfile.open(fileobj=zstd, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("bomb.bin")
        if pax:
            info.pax_headers = {"comment": "x" * pax}
            tar.addfile(info)
        else:
            info.size = inflated
            tar.addfile(info, _Zeros(inflated))
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["file", "pax header"])
def test_a_tree_bomb_stops_at_the_bound_its_record_names(tmp_path, kind) -> None:
    """An 8 kB archive that inflates to 256 MiB (one file of zeros, or one PAX header that big): with the bound a
    record names, unpacking stops before the member that would pass it, having written at most the bound."""
    bomb = _tree_bomb(256 << 20) if kind == "file" else _tree_bomb(0, pax=64 << 20)
    assert len(bomb) < 16 << 10, len(bomb)  # a few kB in the bucket
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(PastBound, match="more than the"):
        unpack(bomb, dest, bound=Bound(entries=3, size=4096))
    assert sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) <= 4096


def test_a_tree_archive_within_its_bound_unpacks(tmp_path) -> None:
    """The bound is exact enough for what pack writes: a tree's own measure lets its archive through, and one
    byte or one entry less does not."""
    from cairn.store.archive import measure

    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "a.so").write_bytes(os.urandom(5000))
    (src / "b.txt").write_text("b")
    os.symlink("lib/a.so", src / "c")
    bound = measure(src)
    assert bound == Bound(entries=4, size=5001)
    archive = pack(src)
    (tmp_path / "ok").mkdir()
    assert len(unpack(archive, tmp_path / "ok", bound=bound)) == 2
    for tight in (Bound(bound.entries - 1, bound.size), Bound(bound.entries, bound.size - 1)):
        dest = tmp_path / f"tight-{tight.entries}-{tight.size}"
        dest.mkdir()
        with pytest.raises(PastBound):
            unpack(archive, dest, bound=tight)


@pytest.fixture(params=["directory", pytest.param("s3", marks=pytest.mark.s3)])
def place(request, tmp_path, monkeypatch) -> Place:
    """The cache of an in-process test: a directory, or a moto bucket (only that case is marked ``s3``), with this
    process's environment a trusted writer's (and pointed at moto for the bucket)."""
    for name, value in writer_env().items():
        monkeypatch.setenv(name, value)
    if request.param == "directory":
        return DirectoryPlace(tmp_path / "shared-cache")
    s3 = request.getfixturevalue("s3")
    point_at(monkeypatch, s3["endpoint"])
    return BucketPlace(s3)


def test_a_tree_bomb_in_the_cache_stops_at_its_bound_with_one_line(place, tmp_path) -> None:
    """The attack through the cache: a writer of the bucket (or directory) replaces a tree's archive by 8 kB that
    inflate to 256 MiB. The fetch stops at the bound the record names (a few bytes), reports one line, leaves
    nothing in the store's work area, and (not read-only) removes the archive with its record so the rebuild puts
    back both."""
    from cairn.store.base import ActionRecord
    from cairn.store.local import LocalStore
    from cairn.store.shared import SharedCache

    first, url = LocalStore(tmp_path / "first"), place.url
    work = first.workdir("small")
    (work / "name.txt").write_text("small")
    record = ActionRecord(key="c" * 64, action="index:small", output=first.commit(work))
    SharedCache(url).push(record, first)
    stored = record_body(place.get(f"ac/{record.key}.v3.json"))
    assert (stored["entries"], stored["size"]) == (1, 5)
    tree = f"trees/{record.output}.v2.tar.zst"
    place.put(tree, _tree_bomb(256 << 20))

    lines: list[str] = []
    victim = LocalStore(tmp_path / "victim")
    cache = SharedCache(url, warn=lines.append)
    assert cache.fetch(record.key, victim) is None and not victim.has_tree(record.output)
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "index:small" in lines[0] and "more than the 5 bytes its record names" in lines[0], lines[0]
    assert "removed from the cache with its record" in lines[0], lines[0]
    assert not list((tmp_path / "victim" / "tmp").iterdir())
    assert not place.has(tree) and not place.has(f"ac/{record.key}.v3.json")

    SharedCache(url).push(record, first)  # the rebuild's push
    assert SharedCache(url).fetch(record.key, LocalStore(tmp_path / "third")) == record


@pytest.mark.s3
@pytest.mark.parametrize("body", [
    {"entries": 1},  # no size
    {"entries": -1, "size": 5},
    {"entries": 1, "size": "5"},
    {"entries": 1.5, "size": 5},
])
def test_a_record_without_a_whole_bound_is_not_used(s3, prefix, tmp_path, monkeypatch, body) -> None:
    """A record that names no bound (or not two whole numbers) could point at an archive of any size: not used."""
    from cairn.store.base import ActionRecord
    from cairn.store.local import LocalStore
    from cairn.store.shared import SharedCache

    _cache_env(monkeypatch, s3)
    first, url = LocalStore(tmp_path / "first"), f"s3://{BUCKET}/{prefix}"
    work = first.workdir("small")
    (work / "name.txt").write_text("small")
    record = ActionRecord(key="d" * 64, action="index:small", output=first.commit(work))
    SharedCache(url).push(record, first)
    forged = {**json.loads(record.to_json()), **body}
    s3["client"].put_object(Bucket=BUCKET, Key=f"{prefix}/ac/{record.key}.v3.json", Body=signed_record(forged))
    lines: list[str] = []
    assert SharedCache(url, read_only=True, warn=lines.append).fetch(record.key, LocalStore(tmp_path / "v")) is None
    assert len(lines) == 1 and "is not a cache record" in lines[0], lines


def test_a_tree_archive_bigger_than_its_bound_allows_is_not_downloaded_past_it(place, tmp_path) -> None:
    """An archive object far bigger than any archive of the tree its record bounds (here 1 MiB of random bytes for a
    5-byte tree) is refused once the download passes that, with one line; nothing of it stays on disk."""
    from cairn.store.base import ActionRecord
    from cairn.store.local import LocalStore
    from cairn.store.shared import SharedCache

    first, url = LocalStore(tmp_path / "first"), place.url
    work = first.workdir("small")
    (work / "name.txt").write_text("small")
    record = ActionRecord(key="e" * 64, action="index:small", output=first.commit(work))
    SharedCache(url).push(record, first)
    tree = f"trees/{record.output}.v2.tar.zst"
    place.put(tree, os.urandom(1 << 20))

    lines: list[str] = []
    victim = LocalStore(tmp_path / "victim")
    assert SharedCache(url, warn=lines.append).fetch(record.key, victim) is None
    assert len(lines) == 1 and "not read further" in lines[0] and "removed from the cache with its record" in lines[0], lines
    assert not list((tmp_path / "victim" / "tmp").iterdir())
    assert not place.has(tree)
