"""The plan and the executor: caching, exact invalidation, crash recovery and verified fetches.

Sources are real: archives from an HTTP server on loopback, a git repository served over file://, a
directory of this repository. The built trees are checked by what a user would look at.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.execute.executor import execute
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.planner import plan_release
from cairn.plan.probe import Host
from cairn.stages import RUNNERS
from cairn.store.local import LocalStore
from support import need_tool
from support.servers import serve_directory

HOST = Host(tools=frozenset({"git", "apt-get", "dpkg-deb", "pip"}), reachable_hosts=frozenset({"127.0.0.1"}))
DELAY = {"seconds": 0.0}


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "www"
    root.mkdir()
    with serve_directory(root, DELAY) as base:
        yield root, base


def _archive(root: Path, name: str, content: bytes) -> str:
    (root / name).write_bytes(content)
    return hashlib.sha256(content).hexdigest()


def _git_repo(tmp_path: Path) -> tuple[str, str]:
    need_tool("git")
    repo = tmp_path / "upstream"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "hello.txt").write_text("hello from git\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "one"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "config", "uploadpack.allowAnySHA1InWant", "true"], check=True)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return f"file://{repo}", commit


def _manifest(tmp_path: Path, base: str, pins: dict[str, str], git: tuple[str, str]) -> Path:
    parts = ['''[release]
name = "engine-test"
version = "1.0.0"
channel = "dev"
source_date_epoch = 1700000000
base_os = "debian-12"
families = ["gfx90a"]

[core]''']
    for name, sha in pins.items():
        parts.append(f'''[[core.components]]
name = "{name}"
version = "1.0"
source.archive = {{ url = "{base}/{name}.txt", sha256 = "{sha}" }}
build = {{ kind = "copy" }}
''')
    parts.append(f'''[[core.components]]
name = "from-git"
version = "1.0"
source.git = {{ url = "{git[0]}", commit = "{git[1]}" }}
build = {{ kind = "copy" }}
''')
    path = tmp_path / "engine.toml"
    path.write_text("\n".join(parts))
    return path


def _build(manifest_path: Path, store_dir: Path):  # type: ignore[no-untyped-def]
    registry = load_registry()
    manifest = load_manifest(manifest_path, registry)
    plan = plan_release(manifest, registry, HOST, stages=())  # the SDK graph only: later stages test themselves
    store = LocalStore(store_dir)
    store.lock()  # as cairn build does: waits for other builds and clears work dirs of killed ones
    try:
        return plan, execute(plan, store, runners=RUNNERS, jobs=2), store
    finally:
        store.unlock()


@pytest.fixture
def project(tmp_path: Path, http_dir: tuple[Path, str]) -> tuple[Path, Path, str, dict[str, str], tuple[str, str]]:
    root, base = http_dir
    pins = {f"part{n}": _archive(root, f"part{n}.txt", f"payload {n}\n".encode()) for n in range(4)}
    git = _git_repo(tmp_path)
    return tmp_path, root, base, pins, git


def test_first_build_runs_everything_and_second_runs_nothing(project) -> None:  # type: ignore[no-untyped-def]
    tmp_path, _, base, pins, git = project
    manifest = _manifest(tmp_path, base, pins, git)
    plan, first, store = _build(manifest, tmp_path / "store")
    assert first.ok and first.ran() == {a.id for a in plan.actions}
    sdk = store.tree(first.output("assemble:sdk"))
    assert (sdk / "part2.txt").read_text() == "payload 2\n"
    assert (sdk / "hello.txt").read_text() == "hello from git\n"
    assert '"sha256"' in (sdk / "share" / "cairn" / "manifest.json").read_text()
    _, second, _ = _build(manifest, tmp_path / "store")
    assert second.ran() == set()
    assert second.count("cached") == len(plan.actions)
    assert second.output("assemble:sdk") == first.output("assemble:sdk")


def test_changing_one_pin_reruns_exactly_that_component_and_its_dependents(project) -> None:  # type: ignore[no-untyped-def]
    tmp_path, root, base, pins, git = project
    _build(_manifest(tmp_path, base, pins, git), tmp_path / "store")
    pins = dict(pins, part1=_archive(root, "part1.txt", b"payload 1, fixed\n"))
    _, report, store = _build(_manifest(tmp_path, base, pins, git), tmp_path / "store")
    # the manifest is embedded in the SDK tree, so assemble reruns with the component
    assert report.ran() == {"fetch:part1.txt", "build:part1", "assemble:sdk"}
    assert (store.tree(report.output("assemble:sdk")) / "part1.txt").read_text() == "payload 1, fixed\n"


def test_a_changed_upstream_file_fails_its_pin_and_builds_nothing_from_it(project) -> None:  # type: ignore[no-untyped-def]
    tmp_path, root, base, pins, git = project
    (root / "part3.txt").write_bytes(b"tampered\n")
    _, report, _ = _build(_manifest(tmp_path, base, pins, git), tmp_path / "store")
    failed = report.outcomes["fetch:part3.txt"]
    assert failed.status == "failed"
    assert f"the manifest pins {pins['part3']}" in failed.detail
    assert report.outcomes["build:part3"].status == "skipped"
    assert report.outcomes["assemble:sdk"].status == "skipped"
    assert report.outcomes["build:part0"].status == "ran"


def test_keys_do_not_depend_on_where_the_store_or_checkout_is(project, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    tmp_path, _, base, pins, git = project
    plan_a, a, _ = _build(_manifest(tmp_path, base, pins, git), tmp_path / "store-a")
    other = tmp_path_factory.mktemp("elsewhere")
    _, b, _ = _build(_manifest(other, base, pins, git), other / "deep" / "store-b")
    assert {k: o.key for k, o in a.outcomes.items()} == {k: o.key for k, o in b.outcomes.items()}
    for action in plan_a.actions:  # only the manifest's own pins (here a file:// URL) may name a path
        assert str(tmp_path / "store-a") not in repr(action.inputs)
        assert str(tmp_path / "engine.toml") not in repr(action.inputs)


def test_killed_build_resumes_and_ends_with_the_same_outputs(project) -> None:  # type: ignore[no-untyped-def]
    tmp_path, _, base, pins, git = project
    manifest = _manifest(tmp_path, base, pins, git)
    _, clean, _ = _build(manifest, tmp_path / "clean")
    DELAY["seconds"] = 0.4
    try:
        store = tmp_path / "killed"
        cmd = [sys.executable, "-m", "cairn.cli", "build", str(manifest), "--store", str(store), "--jobs", "1",
               "--only", "assemble:sdk"]
        victim = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert victim.stderr is not None
        for line in victim.stderr:  # plain progress lines: one per finished action
            if ": ran" in line:
                break
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        assert victim.returncode == -signal.SIGKILL
    finally:
        DELAY["seconds"] = 0.0
    leftovers = list((store / "tmp").iterdir())
    _, resumed, _ = _build(manifest, store)
    assert resumed.ok
    assert 0 < len(resumed.ran()) < len(resumed.outcomes)
    assert resumed.output("assemble:sdk") == clean.output("assemble:sdk")
    assert not any(p.exists() for p in leftovers)  # a killed build's work dirs are cleared, never trusted


def test_cli_build_reports_counts_and_json(project) -> None:  # type: ignore[no-untyped-def]
    tmp_path, _, base, pins, git = project
    manifest = _manifest(tmp_path, base, pins, git)
    cmd = [sys.executable, "-m", "cairn.cli", "build", str(manifest), "--store", str(tmp_path / "s"), "--json",
           "--only", "assemble:sdk"]
    first = subprocess.run(cmd, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(cmd, capture_output=True, text=True)
    import json

    report = json.loads(again.stdout)
    assert report["counts"]["ran"] == 0
    assert report["counts"]["cached"] == len(report["actions"])
    assert Path(report["sdk_tree"], "part0.txt").read_text() == "payload 0\n"


def test_image_builds_run_one_at_a_time_beside_other_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image build holds its GB tree several times over on disk: two at once filled the disk. With two
    jobs, image builds take turns while another kind of action runs beside them."""
    from cairn import stages
    from cairn.plan.graph import Action, Plan

    lock = threading.Lock()
    running: dict[str, int] = {"image-build": 0, "package": 0}
    peak: dict[str, int] = {"image-build": 0, "both": 0}

    def runner(ctx: object) -> None:
        kind = ctx.action.kind  # type: ignore[attr-defined]
        with lock:
            running[kind] += 1
            peak["image-build"] = max(peak["image-build"], running["image-build"])
            peak["both"] = max(peak["both"], min(running["image-build"], 1) + min(running["package"], 1))
        time.sleep(0.4)
        (ctx.out / "done").write_text(ctx.action.id)  # type: ignore[attr-defined]
        with lock:
            running[kind] -= 1

    for kind in running:
        monkeypatch.setitem(stages.RUNNERS, kind, runner)
    actions = (*(Action(f"image:{n}", "image-build", {"n": n}) for n in range(3)), Action("package:x", "package", {"n": 9}))
    report = execute(Plan("m", "0" * 64, actions), LocalStore(tmp_path / "store"), runners=RUNNERS, jobs=2)
    assert report.ok and peak == {"image-build": 1, "both": 2}
