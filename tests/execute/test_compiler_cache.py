"""The compiler cache (sccache in S3) for compiles in the build image, against a real moto S3 server.

What a release engineer relies on: a second build of the same sources with the same toolchain and targets
compiles nothing (every compile a hit) and gives the same bytes; a change of target or of build image starts
from an empty cache; the build container still reaches nothing but the cache's endpoint (a configure step
that tries to download fails, and the log names what was refused); a cache that cannot be reached costs the
build nothing but time; credentials never reach the log.
"""

from __future__ import annotations

import io
import re
import socket
from pathlib import Path

import pytest

from cairn import proc
from cairn.errors import CairnError
from cairn.execute.cmake import cmake_in_image, cmake_script
from cairn.execute.compiler_cache import CompilerCache
from cairn.execute.egress import SOCKET_NAME, egress_proxy
from cairn.execute.hip import in_image_script
from support import need_module
from support.servers import moto_s3

BUCKET = "cairn-compiler-cache"
DIGEST_A, DIGEST_B = "a" * 64, "b" * 64


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch):
    need_module("moto.server")
    with moto_s3(BUCKET) as server:
        monkeypatch.setenv("CAIRN_S3_ENDPOINT", server["endpoint"])
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-value")
        yield server


# --- the settings: URL, key prefix, the one destination ------------------------------------------------------

@pytest.mark.parametrize("url", ["http://bucket/x", "s3://", "s3://UPPER/x", "s3://bucket/../escape", "s3://bucket/a b"])
def test_a_bad_cache_url_is_one_line_naming_the_fix(url: str) -> None:
    with pytest.raises(CairnError) as caught:
        CompilerCache.from_url(url)
    assert "\n" not in str(caught.value) and "--compiler-cache" in str(caught.value)


def test_objects_are_kept_apart_per_build_image_digest_and_per_target_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_S3_ENDPOINT", "http://127.0.0.1:9")
    cache = CompilerCache.from_url("s3://cairn-cc/team/ci")
    a = cache.key_prefix(f"reg/cairn/toolchain@sha256:{DIGEST_A}", ["gfx11-generic"])
    assert a == f"team/ci/sccache/{DIGEST_A}/gfx11-generic/"
    assert cache.key_prefix(f"reg/cairn/toolchain@sha256:{DIGEST_B}", ["gfx11-generic"]) != a
    assert cache.key_prefix(f"reg/cairn/toolchain@sha256:{DIGEST_A}", ["gfx1100"]) != a
    assert cache.key_prefix(f"r/t@sha256:{DIGEST_A}", ["gfx942", "gfx90a"]).endswith("/gfx90a+gfx942/")
    with pytest.raises(CairnError, match="not pinned by digest"):
        cache.key_prefix("reg/cairn/toolchain:latest", ["gfx1100"])


def test_the_container_may_reach_the_cache_endpoint_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_S3_ENDPOINT", "http://127.0.0.1:9000")
    local = CompilerCache.from_url("s3://cairn-cc")
    assert local.allows("127.0.0.1", 9000)
    assert not local.allows("127.0.0.1", 9001) and not local.allows("10.0.0.1", 9000)
    for name in ("CAIRN_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    aws = CompilerCache.from_url("s3://cairn-cc")
    assert aws.allows("s3.eu-west-1.amazonaws.com", 443) and aws.allows("cairn-cc.s3.eu-west-1.amazonaws.com", 443)
    assert not aws.allows("s3.eu-west-1.amazonaws.com", 80) and not aws.allows("pypi.example", 443)


def test_the_container_gets_the_compiler_caches_own_credential_when_one_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workflow's jobs hold the action cache's write credential too: only the compiler cache's own one, which
    may touch its prefix alone, enters the build container when it is set."""
    monkeypatch.setenv("CAIRN_S3_ENDPOINT", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "action-cache-writer")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "action-cache-secret")
    cache = CompilerCache.from_url("s3://cairn-cc/ci/compilers")
    image = f"reg/cairn/toolchain@sha256:{DIGEST_A}"
    assert cache.container_env(image, ["gfx1100"])[1]["AWS_ACCESS_KEY_ID"] == "action-cache-writer"
    monkeypatch.setenv("CAIRN_COMPILER_CACHE_ACCESS_KEY_ID", "compilers-only")
    monkeypatch.setenv("CAIRN_COMPILER_CACHE_SECRET_ACCESS_KEY", "compilers-secret")
    plain, secret = cache.container_env(image, ["gfx1100"])
    assert secret == {"AWS_ACCESS_KEY_ID": "compilers-only", "AWS_SECRET_ACCESS_KEY": "compilers-secret"}
    assert "action-cache" not in repr(plain) + repr(secret)


def test_without_a_cache_the_scripts_name_no_sccache_and_with_one_every_compile_goes_through_it() -> None:
    args = {"cmake_args": ["-DX=1"]}
    plain = cmake_script(args, ["gfx1100"], 0, 2)
    assert "sccache" not in plain and "CAIRN_CC" not in plain
    cached = cmake_script(args, ["gfx1100"], 0, 2, compiler_cache=True)
    for lang in ("C", "CXX", "HIP"):
        assert f'"-DCMAKE_{lang}_COMPILER_LAUNCHER=python3;/tmp/cairn-cpu-seconds.py${{CAIRN_CC:+;$CAIRN_CC}}"' in cached
    assert "sccache --show-stats" in cached
    hip = in_image_script(["a.hip"], ["gfx1100"], "libk.so", "/dl", compiler_cache=True)
    assert "$CAIRN_CC hipcc -c" in hip and "sccache" not in in_image_script(["a.hip"], ["gfx1100"], "libk.so", "/dl")


def test_credentials_handed_to_a_tool_never_reach_the_log() -> None:
    log = io.StringIO()
    proc.run(["true"], env={"AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_SESSION_TOKEN": "t0ken-value", "SCCACHE_BUCKET": "b"}, log=log)
    assert "s3cr3t-value" not in log.getvalue() and "t0ken-value" not in log.getvalue()
    assert "SCCACHE_BUCKET=b" in log.getvalue() and "AWS_SECRET_ACCESS_KEY=<redacted>" in log.getvalue()


# --- the egress proxy, from the container's side of its socket ------------------------------------------------

def _through(proxy_dir: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(20)
        conn.connect(str(proxy_dir / SOCKET_NAME))
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):  # every answer here ends with the connection closed
            data += chunk
        return data


@pytest.mark.s3
def test_the_proxy_forwards_to_the_allowed_endpoint_and_refuses_every_other_destination(s3_env) -> None:
    port = s3_env["port"]
    with egress_proxy(lambda host, p: (host, p) == ("127.0.0.1", port)) as proxy:
        answer = _through(proxy.directory, f"GET http://127.0.0.1:{port}/{BUCKET} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                                           "Connection: close\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 ") and b"403 Forbidden" not in answer.split(b"\r\n", 1)[0]
        assert b"AccessDenied" in answer or b"ListBucketResult" in answer or b"Signature" in answer  # moto answered
        for request in (b"CONNECT 192.0.2.1:443 HTTP/1.1\r\nHost: 192.0.2.1:443\r\n\r\n",
                        b"GET http://192.0.2.1/x HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n",
                        f"GET http://127.0.0.1:{port + 1}/ HTTP/1.1\r\n\r\n".encode(),
                        b"GET /not-a-proxy-request HTTP/1.1\r\n\r\n"):
            assert _through(proxy.directory, request).startswith(b"HTTP/1.1 403 Forbidden")
        assert proxy.forwarded == 1
        assert sorted(proxy.refused) == sorted(["192.0.2.1:443", "192.0.2.1:80", "GET /not-a-proxy-request HTTP/1.1",
                                                f"127.0.0.1:{port + 1}"])
    assert not proxy.directory.exists()


# --- real compiles in the build image -------------------------------------------------------------------------

CMAKELISTS = """cmake_minimum_required(VERSION 3.21)
project(cachetest LANGUAGES C CXX HIP)
# a configure step that tries to download: it must fail, compiler cache or not
execute_process(COMMAND python3 -c "import urllib.request; urllib.request.urlopen('http://192.0.2.1/x', timeout=5)"
                RESULT_VARIABLE download ERROR_QUIET OUTPUT_QUIET)
file(WRITE ${CMAKE_BINARY_DIR}/download.txt "${download}")
add_library(k SHARED k.hip host.cpp util.c)
set_source_files_properties(k.hip PROPERTIES LANGUAGE HIP)
install(TARGETS k LIBRARY DESTINATION lib)
install(FILES ${CMAKE_BINARY_DIR}/download.txt DESTINATION share)
"""
KERNEL = """#include <hip/hip_runtime.h>
__global__ void scale(float *x, float a) { x[blockIdx.x * blockDim.x + threadIdx.x] *= a; }
extern "C" int cachetest_launch(float *x, float a) { hipLaunchKernelGGL(scale, dim3(1), dim3(64), 0, 0, x, a); return 0; }
"""
ARGS = {"cmake_args": ["-DCMAKE_C_COMPILER=clang-22", "-DCMAKE_CXX_COMPILER=clang++-22", "-DCMAKE_HIP_COMPILER=clang++-22"],
        "device_libraries": ["libk.so"]}


def _project(root: Path) -> Path:
    source = root / "src"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(CMAKELISTS)
    (source / "k.hip").write_text(KERNEL)
    (source / "host.cpp").write_text('#include <string>\nextern "C" int cachetest_host() { return (int)std::string("cairn").size(); }\n')
    (source / "util.c").write_text("int cachetest_util(int x) { return 2 * x; }\n")
    return source


def _build(source: Path, out: Path, image: str, targets: list[str], cache: CompilerCache | None) -> str:
    out.mkdir()
    log = io.StringIO()
    cmake_in_image(source, [], out, image=image, args=ARGS, targets=targets, log=log, compiler_cache=cache)
    return log.getvalue()


def _stat(log: str, name: str) -> int:
    found = re.search(rf"^{re.escape(name)}\s+(\d+)\s*$", log, re.MULTILINE)
    assert found, f"no '{name}' line in the sccache statistics:\n{log[-3000:]}"
    return int(found[1])


def _tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.docker
@pytest.mark.registry
@pytest.mark.s3
@pytest.mark.slow
def test_a_second_build_compiles_nothing_gives_the_same_bytes_and_a_target_change_misses(
        toolchain_image: str, s3_env, tmp_path: Path) -> None:
    source = _project(tmp_path)
    cache = CompilerCache.from_url(f"s3://{BUCKET}/ci")
    uncached_log = _build(source, tmp_path / "plain", toolchain_image, ["gfx1100"], None)
    cold = _build(source, tmp_path / "cold", toolchain_image, ["gfx1100"], cache)
    warm = _build(source, tmp_path / "warm", toolchain_image, ["gfx1100"], cache)

    assert "CAIRN_CC" not in uncached_log and "compiler cache" not in uncached_log
    assert "# compiler cache: sccache, S3 bucket cairn-compiler-cache" in cold
    assert _stat(cold, "Cache misses") == 3 and _stat(cold, "Cache hits") == 0
    assert _stat(warm, "Cache hits") == 3 and _stat(warm, "Cache misses") == 0
    assert _stat(warm, "Cache hits (HIP)") == 1
    # the cache changes no output: the same tree with a cold cache, a warm one and none
    assert _tree(tmp_path / "plain") == _tree(tmp_path / "cold") == _tree(tmp_path / "warm")
    # the configure step's download failed in every build, and the proxy says what it refused
    assert (tmp_path / "warm" / "share" / "download.txt").read_text() not in ("", "0")
    assert (tmp_path / "plain" / "share" / "download.txt").read_text() not in ("", "0")
    assert "refused: 192.0.2.1:80" in warm
    digest = toolchain_image.rpartition("@sha256:")[2]
    keys = [o["Key"] for o in s3_env["client"].list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert keys and all(k.startswith(f"ci/sccache/{digest}/gfx1100/") for k in keys)
    assert "test-secret-value" not in cold + warm

    other = _build(source, tmp_path / "other", toolchain_image, ["gfx1101"], cache)
    assert _stat(other, "Cache hits") == 0 and _stat(other, "Cache misses") == 3


@pytest.mark.docker
@pytest.mark.registry
@pytest.mark.slow
def test_a_cache_that_cannot_be_reached_costs_the_build_nothing_but_time(
        toolchain_image: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from support.servers import free_port

    monkeypatch.setenv("CAIRN_S3_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    source = _project(tmp_path)
    log = _build(source, tmp_path / "out", toolchain_image, ["gfx1100"], CompilerCache.from_url(f"s3://{BUCKET}/x"))
    assert (tmp_path / "out" / "lib" / "libk.so").is_file()
    assert "# compiler cache: sccache did not start, compiling without it" in log
