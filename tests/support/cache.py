"""The shared action cache's test machines: a trusted cache writer's key and trust list, and "machines" (their own
working directory, HOME and store; one bucket or one cache directory) that run ``cairn build --json`` as separate
processes; and the two places a cache lives (``BucketPlace``, ``DirectoryPlace``), as someone who can write there
sees them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from support.s3 import aws_env

CACHE_BUCKET = "cairn-cache"

WRITER: dict[str, Path] = {}  # "key": the trusted writer's PEM, "trust": the trust list naming it


def make_writer(where: Path) -> dict[str, Path]:
    """A cache-writer key in ``where`` and the trust list that names it (as ``cairn keys cache-writer`` makes them),
    now the machines' ``WRITER``."""
    from cairn.store.signing import add_to_trust, make_writer_key

    key, entry = make_writer_key(where / "writer", "ed25519", "ci")
    add_to_trust(where / "cache-writers.json", entry)
    WRITER.update(key=key, trust=where / "cache-writers.json")
    return WRITER


def writer_env() -> dict[str, str]:
    """The environment of a trusted cache writer (readers need only the trust list, which it holds too)."""
    return {"CAIRN_CACHE_TRUST": str(WRITER["trust"]), "CAIRN_CACHE_SIGNING_KEY": str(WRITER["key"])}


def record_body(data: bytes) -> dict:
    """The JSON a signed record (a DSSE envelope) carries."""
    import base64

    return json.loads(base64.b64decode(json.loads(data)["payload"]))


def signed_record(body: dict) -> bytes:
    """``body`` as the trusted writer signs a record."""
    from cairn.dsse import load_signer
    from cairn.store.signing import sign_record

    return sign_record(body, load_signer(WRITER["key"].read_bytes(), WRITER["key"], ""))


def machine(tmp_path: Path, name: str, s3: dict | None) -> dict:
    """Another machine: its own working directory, HOME and store; the same bucket (``s3``), or with ``s3`` None
    the same cache directory (given by URL: the machine needs no S3 settings)."""
    home = tmp_path / name / "home"
    home.mkdir(parents=True, exist_ok=True)
    if s3 is None:
        unset = ("AWS_", "CAIRN_S3_")  # nothing here could reach S3: a directory cache needs none of it
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(unset)}, "HOME": str(home), **writer_env()}
    else:
        env = aws_env(s3["endpoint"], HOME=str(home), CAIRN_S3_RETRY_SECONDS="5", **writer_env())
    env.pop("CAIRN_CACHE", None)
    return {"cwd": tmp_path / name, "env": env, "store": tmp_path / name / "store"}


def build_command(machine: dict, manifest: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cairn.cli", "build", str(manifest), "--store", str(machine["store"]), "--json",
            "--jobs", "1", "--only", "assemble:sdk", *extra]


def build(machine: dict, manifest: Path, *extra: str) -> tuple[dict, str]:
    proc = subprocess.run(build_command(machine, manifest, *extra), cwd=machine["cwd"], env=machine["env"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout), proc.stderr


def ran(report: dict) -> set[str]:
    return {a for a, o in report["actions"].items() if o["status"] == "ran"}


class Place:
    """Where the cache of one test lives, and what someone who can write there (but holds no trusted key) does
    with it: put and read objects by their name below the cache's root."""

    s3: dict | None = None  # the moto server, for the machines' environment (None: a directory)

    @property
    def url(self) -> str:
        raise NotImplementedError

    def put(self, name: str, body: bytes) -> None:
        raise NotImplementedError

    def get(self, name: str) -> bytes:
        raise NotImplementedError

    def count(self) -> int:
        """How many objects the cache holds."""
        raise NotImplementedError

    def has(self, name: str) -> bool:
        raise NotImplementedError


class BucketPlace(Place):
    def __init__(self, s3: dict) -> None:
        self.s3, self.prefix = s3, f"run-{uuid.uuid4().hex[:8]}"

    @property
    def url(self) -> str:
        return f"s3://{CACHE_BUCKET}/{self.prefix}"

    def put(self, name: str, body: bytes) -> None:
        assert self.s3 is not None
        self.s3["client"].put_object(Bucket=CACHE_BUCKET, Key=f"{self.prefix}/{name}", Body=body)

    def get(self, name: str) -> bytes:
        assert self.s3 is not None
        return self.s3["client"].get_object(Bucket=CACHE_BUCKET, Key=f"{self.prefix}/{name}")["Body"].read()

    def count(self) -> int:
        assert self.s3 is not None
        return int(self.s3["client"].list_objects_v2(Bucket=CACHE_BUCKET, Prefix=f"{self.prefix}/").get("KeyCount", 0))

    def has(self, name: str) -> bool:
        assert self.s3 is not None
        listed = self.s3["client"].list_objects_v2(Bucket=CACHE_BUCKET, Prefix=f"{self.prefix}/{name}")
        return any(o["Key"] == f"{self.prefix}/{name}" for o in listed.get("Contents", []))


class DirectoryPlace(Place):
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def put(self, name: str, body: bytes) -> None:  # as the attacker writes it: over whatever is there
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(body)

    def get(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def count(self) -> int:
        return sum(1 for path in self.root.rglob("*") if not path.is_dir())

    def has(self, name: str) -> bool:
        return os.path.lexists(self.root / name)
