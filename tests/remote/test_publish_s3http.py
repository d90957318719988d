"""The publisher's own S3 requests: signatures botocore would compute, error bodies read, connections that
drop are reported as retryable."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cairn.remote.s3http import (
    ConnectionFailed,
    Credentials,
    Response,
    S3Client,
    S3Error,
    _error,
    sign,
    xml_text,
)


@pytest.mark.parametrize(("method", "path", "query", "headers"), [
    ("PUT", "/bucket/pre fix/packages/gfx90a/sglang-0.5.10.post1+rocm.5.2.3-py3-none-any.whl", {},
     {"content-type": "application/octet-stream", "cache-control": "public, max-age=31536000, immutable",
      "if-none-match": "*", "x-amz-meta-sha256": "ab" * 32, "x-amz-checksum-sha256": "q83vEjRWeJA=", "content-length": "10"}),
    ("POST", "/bucket/k", {"uploadId": "a/b+c=", "partNumber": "2"}, {"content-length": "0"}),
    ("GET", "/bucket", {"list-type": "2", "prefix": "p/q r", "continuation-token": "x=="}, {"content-length": "0"}),
])
def test_signature_matches_botocore(monkeypatch, method, path, query, headers):
    from urllib.parse import quote

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    now = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    mine = sign(method, "127.0.0.1:5000", path, query, headers, "eu-west-1", Credentials("AKID", "SECRET", "TOKEN"), now)
    url = "http://127.0.0.1:5000" + quote(path, safe="/~")
    request = AWSRequest(method=method, url=url, params=query, headers=dict(headers))
    signer = S3SigV4Auth(BotoCredentials("AKID", "SECRET", "TOKEN"), "s3", "eu-west-1")
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now.replace(tzinfo=None))
    monkeypatch.setattr(signer, "payload", lambda _request: "UNSIGNED-PAYLOAD")
    signer.add_auth(request)
    assert mine["authorization"] == request.headers["Authorization"]


def test_error_bodies_are_read_even_with_status_200():
    body = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code><Message>try again</Message></Error>'
    error = _error(Response(200, {}, body), "PUT")
    assert error is not None and error.code == "InternalError" and error.status == 500
    assert _error(Response(412, {}, b""), "HEAD").code == "PreconditionFailed"
    assert _error(Response(200, {}, b"<CopyObjectResult><ETag>x</ETag></CopyObjectResult>"), "PUT") is None
    assert isinstance(_error(Response(404, {}, b"<Error><Code>NoSuchKey</Code></Error>"), "GET"), S3Error)


def test_listing_is_read_without_namespaces():
    body = (b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><IsTruncated>true</IsTruncated>'
            b"<Contents><Key>a &amp; b</Key><Size>3</Size></Contents><Contents><Key>c</Key><Size>40</Size></Contents>"
            b"<NextContinuationToken>tok</NextContinuationToken></ListBucketResult>")
    assert xml_text(body, "Contents", "Key", "Size") == [["a & b", "3"], ["c", "40"]]
    assert xml_text(body, "NextContinuationToken") == [["tok"]]


def test_a_server_that_is_gone_is_a_retryable_failure():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = S3Client(f"http://127.0.0.1:{port}", "us-east-1", Credentials("a", "b"))
    with pytest.raises(ConnectionFailed):
        client.request("GET", "bucket", "key")


def test_publishing_loads_neither_boto3_nor_botocore():
    import subprocess
    import sys

    code = ("import sys; import cairn.publish.publisher, cairn.remote.backend, cairn.sign.verify; "
            "print(sorted(m for m in ('boto3', 'botocore', 's3transfer') if m in sys.modules)); "
            "import boto3, securesystemslib.signer; print(boto3.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["[]", "boto3"]  # and boto3 still imports normally afterwards
