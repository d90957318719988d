"""A publish's memory is bounded by what it sends at once, not by the release: ``cairn publish --to s3://…`` of a
bundle of 400 MB stays far below 400 MB resident (it once held every blob: 10.4 GB for the default release).
``bench/publish_memory_bench.py`` measures the default release; this is the same measurement, small enough for
the test suite, with multipart uploads in it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from cairn.matrix.bundle import write_bundle_json
from cairn.publish.sample import write_sample_bundle
from support import need
from support.s3 import env

BUCKET = "cairn-releases"  # the bucket of this module's ``s3`` fixture (support.s3)
pytestmark = [pytest.mark.s3, pytest.mark.slow]

TIME = "/usr/bin/time"


def test_peak_memory_does_not_grow_with_the_release(s3, keys, tmp_path):
    need(os.path.exists(TIME), "GNU time (apt install time)")
    bundle = write_sample_bundle(tmp_path / "b", version="9.9.0", families=("gfx90a",))
    doc = json.loads((bundle / "bundle.json").read_text())
    for n in range(5):  # 5 x 80 MiB of incompressible bytes; from 32 MiB an object goes up in 8 MiB parts
        path = f"big/blob-{n}.bin"
        (bundle / "files" / "big").mkdir(exist_ok=True)
        (bundle / "files" / path).write_bytes(os.urandom(80 << 20))
        doc["artifacts"].append({"path": path, "kind": "other", "cells": [], "sha256": ""})
    doc.pop("schema")
    write_bundle_json(bundle, doc)
    environ = {**env(s3, tmp_path), "CAIRN_MULTIPART_THRESHOLD": str(32 << 20), "CAIRN_MULTIPART_PART": str(8 << 20)}
    proc = subprocess.run([TIME, "-f", "peak %M", sys.executable, "-m", "cairn.cli", "publish", str(bundle), "--to",
                           f"s3://{BUCKET}/memory", "--keys", str(keys), "--json"], env=environ, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["uploaded"] > 10
    peak = int(re.findall(r"peak (\d+)", proc.stderr)[-1]) << 10
    # 400 MiB published: the interpreter and signing libraries (~70 MiB), 16 writers' 1 MiB blocks and at most
    # 2 multipart uploads' 4 parts of 8 MiB in flight fit in 200 MiB; holding the blobs would not
    assert peak < 200 << 20, f"cairn publish peaked at {peak >> 20} MiB for a 400 MiB release"
    head = s3["client"].head_object(Bucket=BUCKET, Key="memory/files/9.9.0/big/blob-0.bin")
    assert head["ContentLength"] == 80 << 20 and head["ETag"].endswith('-10"')  # ten 8 MiB parts
