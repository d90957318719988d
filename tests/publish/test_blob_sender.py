"""The bundle's blobs go up while the signing libraries load (``cairn.publish.blob_sender``), and every guarantee of
publishing still holds: nothing is written for a modified bundle or into a repository of another root, every key
is written once, the counts are the keys written, and the repository verifies."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cairn.matrix.bundle import load_bundle
from cairn.names import hashed_name
from cairn.publish.blob_sender import EarlyBlobs
from cairn.publish.publisher import publish
from cairn.publish.repo_reads import first_root_of
from cairn.publish.sample import write_sample_bundle
from cairn.remote.backend import S3Backend
from cairn.sign.keys import init_keys, load_keys, make_root
from cairn.sign.tuf import load_root
from cairn.sign.verify import verify_repository
from support import cairn
from support.s3 import env

BUCKET = "cairn-releases"  # the bucket of this module's ``s3`` fixture (support.s3)
pytestmark = pytest.mark.s3


def objects(client, prefix: str) -> dict[str, str]:
    """Every key under ``prefix`` with its ETag: any write changes it."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return out


def test_reading_a_bundle_and_its_blobs_loads_no_signing_library(tmp_path):
    """What the early thread needs must not import tuf, securesystemslib or cryptography, or it would wait for
    them like the rest of the run."""
    bundle = write_sample_bundle(tmp_path / "b", version="6.0.0", families=("gfx90a",))
    code = ("import sys; from pathlib import Path; from cairn.matrix.bundle import load_bundle; "
            "from cairn.publish.blobs import read_blobs; import cairn.publish.blob_sender, cairn.publish.command; "
            f"blobs = read_blobs(load_bundle(Path({str(bundle)!r}))); assert blobs; "
            "print(sorted(m for m in ('tuf', 'securesystemslib', 'cryptography') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_blobs_go_up_first_and_every_key_is_written_once(s3, keys, tmp_path, monkeypatch):
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    bundle = load_bundle(write_sample_bundle(tmp_path / "b", version="6.1.0", families=("gfx90a", "gfx1030")))
    backend = S3Backend(BUCKET, "early", s3["endpoint"])
    writes: list[str] = []
    backend.client.observers.append(lambda method, path, headers: writes.append(path.split("?")[0])
                                    if method == "PUT" and "/early/" in path else None)

    early = EarlyBlobs(backend, bundle, first_root_of(keys / "root.json"), True, lambda _: None)
    writer = early.writer()  # before the run loads its keys: only the blobs, with their content-addressed copies
    wheels = [a for a in bundle.artifacts if a.kind == "wheel"]
    expected = set()
    for artifact in wheels:
        key = f"packages/{artifact.family}/{artifact.name}"
        sidecar = next(b.sidecar for b in early.blobs() if b.obj.key == key)
        expected |= {key, hashed_name(key, artifact.sha256), f"{key}.metadata", hashed_name(f"{key}.metadata", sidecar.sha256)}
    written_early = {w.split("/early/", 1)[1] for w in writes}
    assert expected <= written_early
    assert all(not w.endswith((".intoto.jsonl", ".json", "/")) for w in writes), "only blobs go up before signing"
    assert writer.uploaded == len(writes) and writer.skipped == 0 and set(writer.confirmed) == written_early

    report = publish(bundle, backend, load_keys(keys), load_root(keys / "root.json"), early=early)
    assert len(writes) == len(set(writes)), "a key was written twice"
    assert report.uploaded == len(writes) and report.skipped == 0
    assert set(objects(s3["client"], "early")) == {w.split("/", 2)[2] for w in writes}
    verify_repository(f"{s3['endpoint']}/{BUCKET}/early/", (keys / "root.json").read_bytes(), tmp_path / "cache")


def test_a_modified_bundle_writes_nothing(s3, keys, tmp_path):
    bundle = write_sample_bundle(tmp_path / "b", version="6.2.0", families=("gfx90a",))
    wheel = next((bundle / "files").rglob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    proc = cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/modified", "--keys", str(keys)], env=env(s3, tmp_path))
    assert proc.returncode != 0
    assert "bundle was modified" in proc.stderr and "Traceback" not in proc.stderr
    assert objects(s3["client"], "modified") == {}


def test_a_repository_of_another_root_gets_nothing(s3, keys, tmp_path):
    """Published under one key set; ``cairn publish`` with another is refused by the run, and the early thread,
    which sees a different first root, has written nothing before that."""
    environ = env(s3, tmp_path)
    first = write_sample_bundle(tmp_path / "one", version="6.3.0", families=("gfx90a",))
    cairn(["publish", str(first), "--to", f"s3://{BUCKET}/rooted", "--keys", str(keys), "--json"], env=environ, check=True)
    before = objects(s3["client"], "rooted")

    other = init_keys(tmp_path / "other")
    from tuf.api.serialization.json import JSONSerializer

    (other.directory / "root.json").write_bytes(make_root(other).to_bytes(JSONSerializer(compact=False)))
    second = write_sample_bundle(tmp_path / "two", version="6.4.0", families=("gfx1030",))
    proc = cairn(["publish", str(second), "--to", f"s3://{BUCKET}/rooted", "--keys", str(other.directory)], env=environ)
    assert proc.returncode != 0 and "signed under another TUF root" in proc.stderr
    assert objects(s3["client"], "rooted") == before


def test_first_root_of_reads_only_a_version_one_root(keys, tmp_path):
    assert first_root_of(keys / "root.json") == (keys / "root.json").read_bytes()
    later = json.loads((keys / "root.json").read_bytes())
    later["signed"]["version"] = 2
    (tmp_path / "later.json").write_text(json.dumps(later))
    (tmp_path / "bad.json").write_text("{not json")
    assert first_root_of(tmp_path / "later.json") is None
    assert first_root_of(tmp_path / "bad.json") is None
    assert first_root_of(tmp_path / "missing.json") is None


def test_a_first_publish_asks_for_nothing_it_knows_is_absent(s3, keys, tmp_path, monkeypatch):
    """Into an empty prefix: one LIST, the bucket's access settings (read while the bundle is checked), the policy
    write and its confirmation, the multipart uploads a killed run may have left under the prefix (a LIST of
    objects does not show them), then only writes — no GET of a key the LIST did not show (the first root, the
    timestamp) — with the publish record before the timestamp, which is the last request."""
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    bundle = load_bundle(write_sample_bundle(tmp_path / "b", version="6.5.0", families=("gfx90a",)))
    backend = S3Backend(BUCKET, "fresh", s3["endpoint"])
    sent: list[tuple[str, str]] = []
    backend.client.observers.append(lambda method, path, _headers: sent.append((method, path)))
    early = EarlyBlobs(backend, bundle, first_root_of(keys / "root.json"), True, lambda _: None)
    publish(bundle, backend, load_keys(keys), load_root(keys / "root.json"), early=early)

    reads = sorted((m, p) for m, p in sent if m != "PUT")
    assert reads == sorted([("GET", f"/{BUCKET}?list-type=2&prefix=fresh%2F"), ("GET", f"/{BUCKET}?publicAccessBlock="),
                            ("GET", f"/{BUCKET}?policy="), ("GET", f"/{BUCKET}?policy="),
                            ("GET", f"/{BUCKET}?prefix=fresh%2F&uploads=")])
    puts = [p for m, p in sent if m == "PUT"]
    assert puts[-1] == f"/{BUCKET}/fresh/metadata/timestamp.json"
    assert puts.index(f"/{BUCKET}/fresh/channels/published.json") < len(puts) - 1
    verify_repository(f"{s3['endpoint']}/{BUCKET}/fresh/", (keys / "root.json").read_bytes(), tmp_path / "cache")


def test_a_modified_bundle_fails_at_once_when_the_endpoint_is_down(keys, tmp_path):
    """The LIST goes out while the bundle is checked; with nothing listening it would retry for a minute, but
    the bundle's own error is reported at once and nothing waits for those retries."""
    import socket
    import time

    bundle = write_sample_bundle(tmp_path / "b", version="6.6.0", families=("gfx90a",))
    wheel = next((bundle / "files").rglob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = {**env({"endpoint": f"http://127.0.0.1:{port}"}, tmp_path), "CAIRN_S3_RETRY_SECONDS": "60"}
    started = time.monotonic()
    proc = cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/down", "--keys", str(keys)], env=environ)
    assert proc.returncode != 0 and "bundle was modified" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - started < 30


def test_the_bytes_in_flight_stay_under_the_budget(tmp_path, monkeypatch):
    """Sixteen threads, but never more than the budget's bytes handed to the server at once (a bigger object
    alone): the release's biggest wheels would otherwise all be in moto's memory together."""
    import threading
    import time

    from cairn.publish import writer as writer_module
    from cairn.publish.objects import Obj
    from cairn.remote.backend import FileBackend

    monkeypatch.setattr(writer_module, "_IN_FLIGHT", writer_module._Budget(3000))
    now, most, lock = [0], [0], threading.Lock()

    class Watched(FileBackend):
        def put(self, key, data, **kwargs):
            with lock:
                now[0] += len(data)
                most[0] = max(most[0], now[0])
            time.sleep(0.02)
            try:
                return super().put(key, data, **kwargs)
            finally:
                with lock:
                    now[0] -= len(data)

    objs = [Obj(f"files/o{n}", bytes([n]) * size, "application/octet-stream", True) for n, size in
            enumerate([1000] * 12 + [5000])]
    writer = writer_module.Writer(Watched(tmp_path / "repo"), lambda _: None)
    writer.upload("test", objs)
    assert writer.uploaded == 2 * len(objs)  # each with its content-addressed copy
    assert most[0] == 5000 or most[0] <= 3000  # the big one alone; the rest three at a time at most
    assert most[0] <= 5000 and most[0] >= 2000


def _broken_keys(key_dir, tmp_path, role: str, content: bytes | None):
    """A copy of the key set with ``role``'s private key file replaced by ``content`` (None: removed)."""
    import shutil

    copy = tmp_path / "broken-keys"
    shutil.copytree(key_dir, copy)
    if content is None:
        (copy / f"{role}.pem").unlink()
    else:
        (copy / f"{role}.pem").write_bytes(content)
    return copy


@pytest.mark.parametrize(("role", "content", "said"), [
    ("targets", b"garbage\n", "targets.pem: not a PKCS#8 PEM private key"),
    ("provenance", b"", "provenance.pem: not a PKCS#8 PEM private key"),
    ("online", None, "no private key for 'online'"),
])
def test_keys_that_cannot_sign_stop_the_publish_before_its_first_write(s3, keys, tmp_path, role, content, said):
    """The blobs go up before the keys are loaded; a key file that is damaged or missing must stop the run before
    that, in one line naming the file — not with a traceback after unsigned blobs are in the bucket."""
    broken = _broken_keys(keys, tmp_path, role, content)
    bundle = write_sample_bundle(tmp_path / "b", version="6.6.0", families=("gfx90a",))
    proc = cairn(["publish", str(bundle), "--to", f"s3://{BUCKET}/badkeys-{role}", "--keys", str(broken)], env=env(s3, tmp_path))
    assert proc.returncode == 2
    assert said in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert objects(s3["client"], f"badkeys-{role}") == {}


def test_a_key_file_of_another_key_set_is_refused_by_name(keys, tmp_path):
    """A well-formed PEM that is not the key ``public.json`` names for its role would sign metadata no client accepts."""
    from cairn.errors import CairnError

    other = init_keys(tmp_path / "other")
    broken = _broken_keys(keys, tmp_path, "targets", (other.directory / "targets.pem").read_bytes())
    with pytest.raises(CairnError, match=r"targets\.pem: holds another key than .*public\.json names for targets"):
        load_keys(broken)
    (broken / "public.json").write_text("{not json")
    with pytest.raises(CairnError, match=r"public\.json: not a key set's public\.json"):
        load_keys(broken)
