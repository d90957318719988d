"""The test harness itself: a run stopped with SIGTERM (``timeout``, a cancelled CI job) tears its session fixtures
down, so the private Docker Engine and registry it started do not outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support import TESTS, need_tool

PROBE = '''
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def service():
    yield
    (HERE / "torn-down").write_text("yes")


def test_long(service):
    (HERE / "started").write_text("yes")
    time.sleep(120)
'''


def test_a_run_stopped_with_sigterm_still_tears_its_session_fixtures_down(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}  # `-p conftest`: this suite's own conftest (and its support)
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-p", "no:cacheprovider",
                            str(tmp_path / "test_probe.py")], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0][-2000:]
            time.sleep(0.1)
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=60)[0]
    finally:
        run.kill()
    assert (tmp_path / "torn-down").exists(), output[-2000:]
    assert run.returncode != 0, output[-2000:]  # stopped is not passed
    assert "SIGTERM" in output, output[-2000:]


STARTER = '''
import json, sys, time
from pathlib import Path
from cairn.services.daemons import start
state, _ = start(Path(sys.argv[1]), die_with_parent=True)
print(json.dumps([state.dockerd_pid, state.registry_pid]), flush=True)
time.sleep(600)
'''


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_services_a_test_session_starts_end_when_it_is_killed(tmp_path: Path) -> None:
    """SIGKILL (a hard timeout, the OOM killer) runs no teardown: the kernel ends the session's daemons instead."""
    import json
    import shutil

    need_tool("dockerd", "docker.io")
    need_tool("docker-registry", "docker-registry")
    root = Path(__import__("tempfile").mkdtemp(prefix="cairn-svc-", dir="/tmp"))  # a unix socket path must be short
    owner = subprocess.Popen([sys.executable, "-c", STARTER, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pids = json.loads(owner.stdout.readline())
        assert all(_running(pid) for pid in pids)
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 60
        while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(pid) for pid in pids), f"still running after their owner was killed: {pids}"
    finally:
        owner.kill()
        from cairn.services.daemons import stop

        stop(root)
        shutil.rmtree(root, ignore_errors=True)
