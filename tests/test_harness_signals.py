"""The test harness itself: a run stopped with SIGTERM (``timeout``, a cancelled CI job) tears its session fixtures
down, so the private Docker Engine and registry it started do not outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}  # `-p conftest`: this suite's own conftest
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
