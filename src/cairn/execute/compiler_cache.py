"""A compiler cache in S3 for the compiles that run in the build image: sccache, with its S3 backend.

``cairn build --compiler-cache s3://bucket/prefix`` (or ``$CAIRN_COMPILER_CACHE``) puts sccache in front of
every compile of the ``cmake`` kind (C, C++ and HIP: llama.cpp's ~370 translation units) and of the ``hip``
kind (Cairn's own kernels). The action cache (``--cache``) skips an action whose key is known; this cache
speeds up an action that must run, for instance after a change to one source file or one flag, or on a
fresh store with no action cache.

Why a hit can never cross a toolchain or a target change: sccache's own key covers the compiler binary, the
arguments (``--offload-arch=…`` included) and the preprocessed source, but not the device libraries' bitcode
that clang links into every code object, nor anything else of the image it does not read. So objects live
under ``<prefix>/sccache/<toolchain image digest>/<targets>/``: another build image (any package changed,
whatever sccache hashes) or another target list starts from an empty cache.

The cache changes no output. The action key does not include it, and a build with a warm cache must give the
bytes of a build without one (``bench/compiler_cache_bench.py`` checks the digests; tests compare the trees).

The build container keeps ``--network none``: sccache reaches S3 through the HTTP proxy variables, which point
at a relay whose only way out is ``cairn.execute.egress``'s proxy, which connects to the cache's endpoint and
refuses everything else. Credentials come from ``$CAIRN_COMPILER_CACHE_ACCESS_KEY_ID`` and
``$CAIRN_COMPILER_CACHE_SECRET_ACCESS_KEY`` when set — a credential that may touch the compiler cache's prefix
alone, so the build container never holds the action cache's or anything else's (the CI workflow sets them) —
else from the same chain as every cairn S3 user (``cairn.remote.s3http``), and enter the container as
environment variables named on the command line without their values.

If the cache cannot be used (sccache's server does not start, for example because the bucket cannot be
reached), the build compiles without it and its log says so: a cache is never a reason for a build to fail.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from cairn.errors import CairnError
from cairn.execute.egress import RELAY_PORT, RELAY_SOURCE
from cairn.names import BUCKET_NAME

EGRESS_IN_IMAGE = "/cairn-egress"
_RELAY, _RELAY_OUT = "/tmp/cairn-egress-relay.py", "/tmp/cairn-egress-relay.out"
_SCCACHE_LOG = "/tmp/sccache-error.log"
_PREFIX_PART = re.compile(r"[A-Za-z0-9._-]+")
_DIGEST = re.compile(r"@sha256:([0-9a-f]{64})$")
_TARGET = re.compile(r"[a-z0-9-]+(:[a-z0-9+-]+)*")


@dataclass(frozen=True)
class CompilerCache:
    url: str
    bucket: str
    prefix: str
    endpoint: str | None  # None: AWS itself
    region: str

    @classmethod
    def from_url(cls, url: str) -> CompilerCache:
        """Parse ``s3://bucket[/prefix]``; the endpoint and region come from the environment as for publishing."""
        # lazy: email, cairn.remote, _hashlib, 32 ms at start-up (python -X importtime)
        from cairn.remote.s3http import find_endpoint, find_region

        parts = urlsplit(url)
        prefix = parts.path.strip("/")
        if parts.scheme != "s3" or not BUCKET_NAME.fullmatch(parts.netloc or ""):
            raise CairnError(f"--compiler-cache {url!r} is not an S3 URL — use s3://BUCKET/PREFIX")
        if prefix and not all(_PREFIX_PART.fullmatch(p) and p not in (".", "..") for p in prefix.split("/")):
            raise CairnError(f"--compiler-cache {url!r}: the prefix may hold letters, digits, '.', '_', '-' and '/' only")
        endpoint = find_endpoint()
        if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
            raise CairnError(f"S3 endpoint {endpoint!r} is not an http:// or https:// URL — fix $CAIRN_S3_ENDPOINT")
        return cls(url, parts.netloc, prefix, endpoint.rstrip("/") if endpoint else None, find_region())

    def key_prefix(self, toolchain_image: str, targets: Sequence[str]) -> str:
        """``<prefix>/sccache/<image digest>/<targets>/``: where this build's objects live in the bucket."""
        digest = _DIGEST.search(toolchain_image)
        if digest is None:
            raise CairnError(f"the build image {toolchain_image!r} is not pinned by digest: no compiler cache key for it")
        if not all(_TARGET.fullmatch(t) for t in targets):
            raise CairnError(f"targets {list(targets)} cannot name a compiler cache folder")
        wanted = "+".join(sorted(set(targets))) or "host"
        return "/".join(part for part in (self.prefix, "sccache", digest[1], wanted) if part) + "/"

    def allows(self, host: str, port: int) -> bool:
        """The one destination the build container may reach: the cache's endpoint."""
        if self.endpoint:
            url = urlsplit(self.endpoint)
            return host == url.hostname and port == (url.port or (443 if url.scheme == "https" else 80))
        aws = {f"s3.{self.region}.amazonaws.com", f"{self.bucket}.s3.{self.region}.amazonaws.com",
               "s3.amazonaws.com", f"{self.bucket}.s3.amazonaws.com"}
        return port == 443 and host in aws

    def container_env(self, toolchain_image: str, targets: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
        """``(plain, secret)`` variables for the container: the secret ones are passed by name only."""
        # lazy: cairn.remote, email, _hashlib, 22 ms at start-up (python -X importtime)
        from cairn.remote.s3http import Credentials, find_credentials

        proxy = f"http://127.0.0.1:{RELAY_PORT}"
        plain = {"SCCACHE_BUCKET": self.bucket, "SCCACHE_S3_KEY_PREFIX": self.key_prefix(toolchain_image, targets),
                 "SCCACHE_REGION": self.region, "SCCACHE_IDLE_TIMEOUT": "0", "SCCACHE_ERROR_LOG": _SCCACHE_LOG,
                 "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy}
        if self.endpoint:
            plain["SCCACHE_ENDPOINT"] = self.endpoint
            plain["SCCACHE_S3_USE_SSL"] = "true" if self.endpoint.startswith("https://") else "false"
        own = (os.environ.get("CAIRN_COMPILER_CACHE_ACCESS_KEY_ID"), os.environ.get("CAIRN_COMPILER_CACHE_SECRET_ACCESS_KEY"))
        credentials = (Credentials(own[0], own[1], os.environ.get("CAIRN_COMPILER_CACHE_SESSION_TOKEN", ""))
                       if own[0] and own[1] else find_credentials())
        secret = {"AWS_ACCESS_KEY_ID": credentials.access_key, "AWS_SECRET_ACCESS_KEY": credentials.secret_key}
        if credentials.token:
            secret["AWS_SESSION_TOKEN"] = credentials.token
        return plain, secret


def start_lines() -> list[str]:
    """Shell lines that start the relay and sccache's server and set ``$CAIRN_CC`` to ``sccache`` when both run
    (empty otherwise, so the build compiles without the cache and says why)."""
    return [f"cat > {_RELAY} <<'EOF'", RELAY_SOURCE.strip(), "EOF",
            f"python3 {_RELAY} {EGRESS_IN_IMAGE}/proxy.sock {RELAY_PORT} > {_RELAY_OUT} 2>&1 &",
            f"for _ in $(seq 100); do grep -q ready {_RELAY_OUT} 2>/dev/null && break; sleep 0.1; done",
            'CAIRN_CC=""',
            "if sccache --start-server; then CAIRN_CC=sccache; echo '# compiler cache: sccache, S3 bucket '\"$SCCACHE_BUCKET\"', prefix '\"$SCCACHE_S3_KEY_PREFIX\"",
            "else echo '# compiler cache: sccache did not start, compiling without it'; "
            f"tail -n 20 {_SCCACHE_LOG} 2>/dev/null || true; fi"]


def stats_lines() -> list[str]:
    """Shell lines that log what the cache did (hits and misses per language) and stop its server."""
    return ['if [ -n "$CAIRN_CC" ]; then echo "# compiler cache statistics"; sccache --show-stats; '
            "sccache --stop-server > /dev/null 2>&1 || true; fi"]
