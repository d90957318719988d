"""Where ``--to`` (and ``--cache``, ``--compiler-cache``) may point: a URL that cannot name one place in a bucket
or one local directory is refused in one line before anything is read or written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cairn.errors import CairnError
from cairn.remote.backend import FileBackend, S3Backend, open_backend


@pytest.mark.parametrize(("url", "said"), [
    ("s3://", "no bucket"),
    ("s3:///prefix", "no bucket"),
    ("s3://Bad_Bucket/x", "'Bad_Bucket' is not an S3 bucket name"),
    ("s3://bucket/../../other", "the prefix '../../other' has a part that is '..'"),
    ("s3://bucket/a//b", "has an empty part"),
    ("file://relative/x", "names the host 'relative'"),
    ("ftp://host/x", "cannot publish to 'ftp://host/x'"),
])
def test_a_destination_that_names_no_single_place_is_refused(url, said):
    with pytest.raises(CairnError, match=said):
        open_backend(url)


def test_good_destinations_open(tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "test")
    s3 = open_backend("s3://cairn-releases/rocm/7.2/")
    assert isinstance(s3, S3Backend) and (s3.bucket, s3.prefix) == ("cairn-releases", "rocm/7.2/")  # keys go under it
    for url in (f"file://{tmp_path}/repo", f"file://localhost{tmp_path}/repo", str(tmp_path / "repo")):
        backend = open_backend(url)
        assert isinstance(backend, FileBackend) and backend.root == tmp_path / "repo"


def test_cairn_publish_to_a_file_url_with_a_host_writes_nowhere(tmp_path):
    """``file://repo/x`` is the file ``/x`` on the host ``repo``: publishing there wrote a repository at ``/x``."""
    from cairn.publish.sample import write_sample_bundle

    bundle = write_sample_bundle(tmp_path / "b", version="7.0.0", families=("gfx90a",))
    target = tmp_path / "x"
    proc = subprocess.run([sys.executable, "-m", "cairn.cli", "publish", str(bundle), "--to", f"file://repo{target}",
                           "--dev-keys", "--store", str(tmp_path / "store")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"cairn publish: 'file://repo{target}' names the host 'repo' — a local directory is file:///absolute/dir (three slashes) or a plain path"]
    assert not target.exists() and not (tmp_path / "store" / "keys").exists()
