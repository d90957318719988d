"""The front door. ``nox -s build`` builds the default release end to end; ``nox -s tests`` tests it.

Sessions install Cairn into their own virtualenv; the build session also installs the Debian packages
it needs when they are missing (root on Debian) and says what it installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import nox

nox.options.sessions = ["lint", "tests"]
SYSTEM_TMPDIR = os.environ.get("TMPDIR") or "/tmp"  # read before any session's create_tmp() points it into .nox/
nox.options.reuse_existing_virtualenvs = True

# Debian packages a build of the default release uses on the host: tool -> package
HOST_TOOLS = {
    "dpkg-deb": "dpkg",
    "apt-get": "apt",
    "git": "git",
    "hipcc": "hipcc",
    "clang-offload-bundler-15": "clang-tools-15",
    "patchelf": "patchelf",
}
HOST_FILES = {"/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ocml.bc": "rocm-device-libs"}


def ensure_host_packages(session: nox.Session, tools: dict[str, str], files: dict[str, str]) -> None:
    missing = sorted({pkg for tool, pkg in tools.items() if not shutil.which(tool)}
                     | {pkg for path, pkg in files.items() if not os.path.exists(path)})
    if not missing:
        return
    if os.geteuid() != 0:
        session.error(f"missing host packages: {' '.join(missing)} — run as root or apt-get install them")
    session.log(f"installing host packages: {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env)


CONTAINER_TOOLS = {"dockerd": "docker.io", "docker-registry": "docker-registry", "mmdebstrap": "mmdebstrap",
                   "skopeo": "skopeo", "gcc": "gcc"}


def start_services(session: nox.Session) -> dict[str, str]:
    """Start the private Docker Engine and registry when they are not running; say what was started."""
    state = json.loads(session.run("cairn", "services", "start", "--json", silent=True))
    started = ", ".join(state.get("started") or []) or "nothing (already running)"
    session.log(f"services started: {started}; DOCKER_HOST={state['docker_host']} registry={state['registry']}")
    return {"DOCKER_HOST": state["docker_host"], "CAIRN_REGISTRY": state["registry"]}


@nox.session
def build(session: nox.Session) -> None:
    """Build the default release (or the manifest given after --) end to end into .cairn/, then show its gates."""
    ensure_host_packages(session, {**HOST_TOOLS, **CONTAINER_TOOLS}, HOST_FILES)
    session.install("-e", ".")
    env = start_services(session)
    manifest = session.posargs[:1]
    session.run("cairn", "build", *manifest, "--jobs", str(os.cpu_count() or 2), env=env)
    session.run("cairn", "gate", *manifest, env=env)
    # a local build signs with dev keys (said plainly); only the release root in publish/ signs real releases
    session.run("cairn", "publish", "--dev-keys", env=env)
    session.run("cairn", "verify", ".cairn/publish", "--root", ".cairn/keys/dev/root.json", env=env)
    session.run("cairn", "matrix", "--root", ".cairn/keys/dev/root.json", "--format", "html", "--out", ".cairn/matrix.html", env=env)
    session.log("release tree: .cairn/publish  matrix page: .cairn/matrix.html")


@nox.session
def release(session: nox.Session) -> None:
    """nox -s release -- X.Y.Z[rcN]: refuse a dirty tree or wrong version, build, gate, stage, promote, verify."""
    if len(session.posargs) != 1:
        session.error("usage: nox -s release -- X.Y.Z[rcN]")
    ensure_host_packages(session, {**HOST_TOOLS, **CONTAINER_TOOLS}, HOST_FILES)
    session.install("-e", ".")
    env = start_services(session)
    session.run("cairn", "release", session.posargs[0], env=env)
    target = os.environ.get("CAIRN_PUBLISH_TO", ".cairn/publish")
    session.run("cairn", "verify", target, "--root", "publish/root.json", env=env)


@nox.session
def publish(session: nox.Session) -> None:
    """Publish the last build's bundle with the release keys (nox -s publish -- --to s3://bucket/prefix)."""
    session.install("-e", ".")
    session.run("cairn", "publish", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite, real tools included (see .ci/run for the services it expects)."""
    session.install("-e", ".[test]")
    install_llama_cpp(session)
    # the engine builds (llama.cpp with HIP for a family: ≥ 16 CPU-minutes each) are their own session
    # the tests' temporary trees outside the checkout: nox points TMPDIR into .nox/ (session.create_tmp), and a
    # command run there would find this checkout as its project and its .cairn/ as the store
    session.run("pytest", "-m", "not engine_build", *session.posargs, env={"TMPDIR": SYSTEM_TMPDIR})


@nox.session
def engines(session: nox.Session) -> None:
    """The inference-engine tests that build an engine from source in the build image (tests marked engine_build)."""
    ensure_host_packages(session, {**HOST_TOOLS, **CONTAINER_TOOLS}, HOST_FILES)
    session.install("-e", ".[test]")
    env = start_services(session)
    session.run("pytest", "-m", "engine_build", *session.posargs, env={**env, "TMPDIR": SYSTEM_TMPDIR})


def install_llama_cpp(session: nox.Session) -> None:
    """llama-cpp-python from the sdist pinned in ``cairn.engines.llama.vocab``, built for CPU: the llama gate
    tests run it. The build takes many minutes, so a venv that already has the pinned version keeps it."""
    pin = json.loads(session.run("python", "-c", "import json; from cairn.engines.llama.vocab import SDIST; "
                                 "print(json.dumps(SDIST))", silent=True))
    have = session.run("python", "-c", "import llama_cpp; print(llama_cpp.__version__)", silent=True,
                       success_codes=[0, 1])
    if str(have).strip() == pin["version"]:
        return
    requirement = os.path.join(session.create_tmp(), "llama-cpp-python.txt")
    with open(requirement, "w") as handle:
        handle.write(f"{pin['name']}=={pin['version']} --hash=sha256:{pin['sha256']}\n")
    session.install("diskcache>=5.6", "typing-extensions>=4.5")
    session.install("--no-deps", "--no-binary", pin["name"], "--require-hashes", "-r", requirement,
                    env={"CMAKE_ARGS": "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF"})


BENCHMARKS = ["audit", "wheels", "containers", "publish", "publish_memory", "split", "llama_gate", "compiler_cache", "release_build", "two_machines", "shards", "gates", "deflate",
              "device_wheels", "payload"]
# two_machines reads the store release_build made and, as a CI runner's disk goes when its job ends, deletes it
# before machine B starts: the store, the bucket and machine B's store together do not fit a 100 GB disk
BENCH_ARGS = {"two_machines": ["--hand-over"]}


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark in bench/, each side by side with the tool a user would otherwise use (bench/README.md)."""
    ensure_host_packages(session, HOST_TOOLS, HOST_FILES)
    session.install("-e", ".[test]", "awscli")
    chosen = session.posargs or BENCHMARKS
    if "llama_gate" in chosen:
        install_llama_cpp(session)
    for name in chosen:
        script = f"bench/{name}_bench.py"
        if not os.path.exists(script):
            session.error(f"no benchmark {script}")
        session.run("python", script, "--out", f"bench/results/{name}.json", *BENCH_ARGS.get(name, []))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over everything, mypy over src/ against Cairn's real dependencies, and the import floors (lint-imports)."""
    session.install("ruff", "mypy", "types-docker", "import-linter", "-e", ".")
    session.run("ruff", "check", "src", "tests", "bench", "noxfile.py")
    session.run("mypy")
    session.run("lint-imports")  # the floors declared in pyproject.toml: nothing imports upward, no import ignored
