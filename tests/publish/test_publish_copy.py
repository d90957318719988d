"""Big objects cross the wire once: the content-addressed copy of a wheel is made by the server (CopyObject),
conditional like every immutable write, with the headers and bytes a client expects of that name; and pages
are written only after everything they link."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from cairn.errors import CairnError
from cairn.matrix.bundle import load_bundle
from cairn.names import hashed_name
from cairn.publish.publisher import publish
from cairn.publish.sample import write_sample_bundle
from cairn.publish.writer import COPY_MIN
from cairn.remote.backend import IMMUTABLE_CACHE, FileBackend, S3Backend
from cairn.sign.keys import load_keys
from cairn.sign.tuf import load_root
from cairn.sign.verify import verify_repository

BUCKET = "cairn-releases"  # the bucket of this module's ``s3`` fixture (support.s3)
HASHED = re.compile(r"/[0-9a-f]{64}\.")


@pytest.mark.s3
def test_big_wheel_is_uploaded_once_and_copied_by_the_server(s3, keys, tmp_path, monkeypatch):
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    bundle = load_bundle(write_sample_bundle(tmp_path / "b", version="9.0.0", families=("gfx90a",), payload_bytes=COPY_MIN + (1 << 20)))
    wheel = next(a for a in bundle.artifacts if a.kind == "wheel")
    assert os.path.getsize(bundle.file(wheel)) >= COPY_MIN
    backend = S3Backend(BUCKET, "copied", s3["endpoint"])
    sent: list[tuple[str, str, dict[str, str]]] = []  # (operation, path, headers) as they leave for the server
    backend.client.observers.append(lambda method, path, headers: sent.append(
        ("CopyObject" if "x-amz-copy-source" in headers else method, path, headers)))

    publish(bundle, backend, load_keys(keys), load_root(keys / "root.json"))

    plain = f"packages/gfx90a/{wheel.name}"
    hashed = hashed_name(plain, wheel.sha256)
    copies = [h for op, _url, h in sent if op == "CopyObject"]
    assert backend.counters.copies == len(copies) == 1  # the one big object; small ones keep two PUTs (cheaper)
    copy = copies[0]
    assert copy["x-amz-copy-source"].endswith(f"copied/{plain}") and copy["if-none-match"] == "*"
    # the wheel's bytes went up once (its plain name), not a second time under its content-addressed name
    big_puts = [url for op, url, h in sent if op == "PUT" and int(h.get("content-length", 0)) >= COPY_MIN]
    assert len(big_puts) == 1 and big_puts[0].endswith(plain)
    head = s3["client"].head_object(Bucket=BUCKET, Key=f"copied/{hashed}")
    assert head["CacheControl"] == IMMUTABLE_CACHE and head["ContentType"] == "application/zip"  # a wheel is a zip archive
    assert head["Metadata"]["sha256"] == wheel.sha256
    body = s3["client"].get_object(Bucket=BUCKET, Key=f"copied/{hashed}")["Body"].read()
    assert body == bundle.file(wheel).read_bytes()
    verify_repository(f"{s3['endpoint']}/{BUCKET}/copied/", (keys / "root.json").read_bytes(), tmp_path / "cache")

    # unchanged re-publish: nothing copied or written again
    again = S3Backend(BUCKET, "copied", s3["endpoint"])
    report = publish(bundle, again, load_keys(keys), load_root(keys / "root.json"))
    assert report.uploaded == 0 and again.counters.copies == 0 and again.counters.puts == 0


class _Recording(FileBackend):
    """A real file backend that also notes the order in which writes complete."""

    def __init__(self, root) -> None:  # type: ignore[no-untyped-def]
        super().__init__(root)
        self.order: list[str] = []

    def put(self, key, data, **kwargs):  # type: ignore[no-untyped-def, override]
        wrote = super().put(key, data, **kwargs)
        self.order.append(key)
        return wrote

    def put_file(self, key, path, **kwargs):  # type: ignore[no-untyped-def, override]
        wrote = super().put_file(key, path, **kwargs)  # an artifact: linked from the bundle's file
        self.order.append(key)
        return wrote


def test_pages_are_written_after_what_they_link(keys, tmp_path):
    # sixteen projects per family: the family root page is then bigger than a project page, so "largest first"
    # alone would write it before the pages it links
    bundle = load_bundle(write_sample_bundle(tmp_path / "b", version="9.1.0", families=("gfx90a",), wheels_per_family=16))
    backend = _Recording(tmp_path / "repo")
    publish(bundle, backend, load_keys(keys), load_root(keys / "root.json"))
    at = {key: n for n, key in enumerate(backend.order)}
    for prefix in ("staging/9.1.0", "channels/dev"):
        base = f"{prefix}/simple/gfx90a/"
        root = at[base]  # pages are written at their directory keys, the URLs pip reads
        projects = [n for key, n in at.items() if key.startswith(base) and key.count("/") == base.count("/") + 1
                    and key.endswith("/") and not HASHED.search(key)]
        assert len(projects) == 16 and max(projects) < root, f"{base} was written before a project page it links"
        wheels = [n for key, n in at.items() if key.startswith("packages/") and key.endswith(".whl")]
        assert max(wheels) < min(projects), "a project page was written before a wheel it links"
    assert backend.order[-1] == "metadata/timestamp.json"


def test_an_object_shared_by_several_cells_is_written_once(keys, tmp_path):
    from cairn.publish.objects import JSON, Obj
    from cairn.publish.upload import Run
    from cairn.sign.session import SigningSession

    backend = _Recording(tmp_path / "repo")
    run = Run(backend, SigningSession(load_keys(keys), load_root(keys / "root.json")), lambda _: None)
    record = Obj("images/1.0.0/gfx90a-0.json", b'{"reference": "r@sha256:00"}\n', JSON, True)
    run.upload("images", [record, record, Obj(record.key, record.data, JSON, True)])
    assert backend.order.count(record.key) == 1 and len(backend.order) == 2  # the plain name and its content-addressed copy
    assert run.uploaded == 2


@pytest.mark.parametrize("role", ["targets", "online"])
def test_a_key_set_that_cannot_sign_the_metadata_writes_no_publish_record(keys, tmp_path, role):
    # the check that anything needs signing finds the missing key before the publish record goes up: a record
    # must never name a timestamp that was not signed
    partial = tmp_path / "keys"
    shutil.copytree(keys, partial)
    (partial / f"{role}.pem").unlink()
    bundle = load_bundle(write_sample_bundle(tmp_path / "b", version="9.3.0", families=("gfx90a",)))
    with pytest.raises(CairnError) as refused:
        publish(bundle, FileBackend(tmp_path / "repo"), load_keys(partial), load_root(partial / "root.json"))
    assert str(refused.value) == f"no private key for '{role}' in {partial} — run cairn keys init or copy the key there"
    assert (tmp_path / "repo" / "staging" / "9.3.0" / "release.json").is_file()  # the blobs and pages went up first
    assert not (tmp_path / "repo" / "channels" / "published.json").exists()
    assert not (tmp_path / "repo" / "metadata").exists()
