"""``cairn.io`` reads every kind of URL a user may give (path, file://, http(s)://, s3://) with one error line, and
every S3 user gets its wrapper from one factory with one endpoint rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.doctor.advice import load as load_advice_matrix
from cairn.errors import CairnError, InputError, UrlError
from cairn.matrix.model import load_matrix
from cairn.remote.backend import open_backend, s3_backend
from cairn.remote.s3http import find_endpoint
from cairn.remote.url import download, exists, read_status, read_url
from support.matrices import sample
from support.servers import moto_s3, serve_directory

BUCKET = "cairn-io"
ENDPOINT_VARIABLES = ("CAIRN_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


# -- the endpoint rule ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("environ", "expected"), [
    ({}, None),
    ({"AWS_ENDPOINT_URL": "http://aws-any"}, "http://aws-any"),
    ({"AWS_ENDPOINT_URL": "http://aws-any", "AWS_ENDPOINT_URL_S3": "http://aws-s3"}, "http://aws-s3"),
    ({"AWS_ENDPOINT_URL": "http://aws-any", "AWS_ENDPOINT_URL_S3": "http://aws-s3", "CAIRN_S3_ENDPOINT": "http://cairn"}, "http://cairn"),
    ({"CAIRN_S3_ENDPOINT": "", "AWS_ENDPOINT_URL": "http://aws-any"}, "http://aws-any"),  # set but empty: not set
])
def test_cairn_s3_endpoint_wins_then_the_aws_variables(environ: dict[str, str], expected: str | None) -> None:
    assert find_endpoint(environ) == expected


def test_every_s3_user_gets_the_factorys_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    backend = s3_backend("bucket", "/some/prefix/")
    assert (backend.endpoint, backend.url) == ("http://127.0.0.1:9", "s3://bucket/some/prefix")
    monkeypatch.setenv("CAIRN_S3_ENDPOINT", "http://127.0.0.1:10")
    published = open_backend("s3://bucket/release")
    assert (published.endpoint, published.url) == ("http://127.0.0.1:10", "s3://bucket/release")  # type: ignore[attr-defined]


# -- reading s3:// ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET) as server:
        server["client"].put_object(Bucket=BUCKET, Key="dir/hello.txt", Body=b"hello from s3\n")
        server["client"].put_object(Bucket=BUCKET, Key="channels/dev/matrix.json", Body=sample().to_json().encode())
        yield server


@pytest.fixture
def s3_env(s3, monkeypatch: pytest.MonkeyPatch):
    for name in ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CAIRN_S3_ENDPOINT", s3["endpoint"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("CAIRN_S3_RETRY_SECONDS", "1")
    return s3


@pytest.mark.s3
def test_read_url_download_and_exists_over_s3(s3_env, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/dir/hello.txt"
    assert read_url(url) == b"hello from s3\n"
    assert read_status(url) == (b"hello from s3\n", 200)
    download(url, tmp_path / "hello.txt")
    assert (tmp_path / "hello.txt").read_bytes() == b"hello from s3\n"
    assert exists(url)
    assert not exists(f"s3://{BUCKET}/dir/missing.txt")


@pytest.mark.s3
def test_a_missing_s3_object_is_404_and_one_line(s3_env, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/dir/missing.txt"
    assert read_status(url) == (None, 404)
    with pytest.raises(UrlError) as caught:
        read_url(url)
    assert str(caught.value) == f"cannot read {url}: 404 NoSuchKey"
    with pytest.raises(UrlError) as caught:
        download(url, tmp_path / "missing.txt")
    assert str(caught.value) == f"cannot download {url}: 404 NoSuchKey"
    assert list(tmp_path.iterdir()) == []  # nothing half-written


@pytest.mark.s3
def test_an_unreachable_endpoint_is_one_line_after_the_retries(s3_env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_S3_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    url = f"s3://{BUCKET}/dir/hello.txt"
    with pytest.raises(UrlError) as caught:
        read_status(url)  # nothing answered: no status to return
    assert str(caught.value).startswith(f"cannot read {url}: S3 get failed: ")
    assert str(caught.value).endswith("— check that http://127.0.0.1:9 is reachable and retry")


@pytest.mark.s3
def test_the_matrix_loader_reads_s3(s3_env) -> None:
    assert load_matrix(f"s3://{BUCKET}/channels/dev/matrix.json") == sample()


@pytest.mark.s3
def test_the_doctor_reads_an_s3_matrix_through_the_aws_endpoint_variable(s3_env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_S3_ENDPOINT")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env["endpoint"])  # what the doctor has always read s3:// through
    loaded = load_advice_matrix(f"s3://{BUCKET}/channels/dev/matrix.json")
    assert loaded.matrix == sample()
    assert (loaded.verified, loaded.verify_note) == (False, "unverified: not inside a signed Cairn repository")
    with pytest.raises(InputError) as caught:
        load_advice_matrix(f"s3://{BUCKET}/channels/dev/none.json")
    assert str(caught.value) == (f"s3://{BUCKET}/channels/dev/none.json: cannot fetch the matrix (404 NoSuchKey: no such key) "
                                 "— check the bucket, key and $CAIRN_S3_ENDPOINT (or AWS_ENDPOINT_URL)")


# -- files and http ----------------------------------------------------------------------------------------------
def test_files_and_http_read_the_same_bytes_and_statuses(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"abc")
    assert read_url(str(tmp_path / "a.txt")) == read_url((tmp_path / "a.txt").as_uri()) == b"abc"
    assert read_status((tmp_path / "none.txt").as_uri()) == (None, 404)
    with serve_directory(tmp_path) as base:
        assert read_status(f"{base}/a.txt") == (b"abc", 200)
        assert read_status(f"{base}/none.txt") == (None, 404)
        with pytest.raises(UrlError) as caught:
            read_url(f"{base}/none.txt")
        assert str(caught.value) == f"cannot read {base}/none.txt: File not found"
        assert caught.value.detail == "HTTP Error 404: File not found"


def test_an_unknown_scheme_is_one_line() -> None:
    with pytest.raises(CairnError) as caught:
        read_url("ftp://example.invalid/x")
    assert str(caught.value) == "cannot read ftp://example.invalid/x: only file, http, https and s3 URLs are supported here"


def test_the_matrix_loader_keeps_its_message_for_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(InputError) as caught:
        load_matrix(missing)
    assert str(caught.value) == (f"{missing}: cannot read the matrix ([Errno 2] No such file or directory: '{missing}') "
                                 "— check the path or URL")


def test_the_registry_probe_reads_v2_through_io(tmp_path: Path) -> None:
    from cairn.services.state import registry_ready

    with serve_directory(tmp_path) as base:
        address = base.removeprefix("http://")
        assert not registry_ready(address)  # 404: a web server, not a registry
        (tmp_path / "v2").mkdir()
        (tmp_path / "v2" / "index.html").write_text("{}")
        assert registry_ready(address)
    assert not registry_ready("127.0.0.1:9")  # nothing listens


def test_an_archive_source_is_downloaded_verified_and_renamed(tmp_path: Path) -> None:
    import hashlib

    from cairn.errors import PinMismatch
    from cairn.sources.fetch import fetch_archive

    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "src.tar.gz").write_bytes(b"archive bytes")
    digest = hashlib.sha256(b"archive bytes").hexdigest()
    with serve_directory(tmp_path / "up") as base, open(tmp_path / "log", "w") as log:
        (tmp_path / "ok").mkdir()
        fetch_archive({"url": f"{base}/src.tar.gz", "sha256": digest}, tmp_path / "ok", log)
        assert [p.name for p in (tmp_path / "ok").iterdir()] == ["src.tar.gz"]
        (tmp_path / "bad").mkdir()
        with pytest.raises(PinMismatch):
            fetch_archive({"url": f"{base}/src.tar.gz", "sha256": "0" * 64}, tmp_path / "bad", log)
        with pytest.raises(CairnError) as caught:
            fetch_archive({"url": f"{base}/gone.tar.gz", "sha256": digest}, tmp_path / "bad", log)
    assert str(caught.value) == f"cannot download {base}/gone.tar.gz: HTTP Error 404: File not found"
    assert list((tmp_path / "bad").iterdir()) == []  # nothing unverified or half-written is left
