"""One mechanism for every external requirement: skipped on a developer's machine, failed under CI, and a CI
run that skipped anything fails.

Each check runs a small pytest in a subprocess against a temp test file next to a copy of this suite's
conftest.py and support package, the way the suite itself uses them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
SKIPS = HERE.parent / ".ci" / "skips.py"

CASES = {
    "tool": "from support import need_tool\n\ndef test_it():\n    need_tool('cairn-no-such-tool', 'cairn-no-such-package')\n",
    "module": "from support import need_module\n\nprobe = need_module('cairn_no_such_module')\n\ndef test_it():\n    pass\n",
    "mark": "from support import requires\n\npytestmark = requires(False, 'run as root')\n\ndef test_it():\n    pass\n",
    "fixture": "import pytest\nfrom support import need\n\n@pytest.fixture\ndef service():\n    need(False, 'a service')\n\n"
               "def test_it(service):\n    pass\n",
    "real-artifact": "from support.audit_fixtures import unavailable\n\ndef test_it():\n    unavailable('download failed')\n",
}


def run_pytest(tmp_path: Path, body: str, ci: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    shutil.copytree(HERE / "support", tmp_path / "support", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "test_probe.py").write_text(body)
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        environ["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-c", os.devnull,
                           "--rootdir", str(tmp_path), *extra, str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_requirement_fails_under_ci(tmp_path: Path, case: str, ci: str) -> None:
    result = run_pytest(tmp_path, CASES[case], ci)
    assert result.returncode != 0, result.stdout
    assert "CI must provide this" in result.stdout
    assert "skipped" not in result.stdout.splitlines()[-1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_missing_requirement_skips_with_its_reason_on_a_developer_machine(tmp_path: Path, case: str) -> None:
    result = run_pytest(tmp_path, CASES[case], None)
    assert result.returncode in (0, 5), result.stdout + result.stderr  # 5: the whole module skipped, nothing ran
    assert re.search(r"\b1 skipped\b", result.stdout.splitlines()[-1]), result.stdout
    reason = {"tool": "'cairn-no-such-tool' not installed (apt-get install cairn-no-such-package)",
              "module": "cairn_no_such_module", "mark": "run as root", "fixture": "a service",
              "real-artifact": "download failed"}[case]
    assert reason in result.stdout


def test_ci_run_fails_on_any_skip_and_says_how_many(tmp_path: Path) -> None:
    """``.ci/skips.py`` on the JUnit report that ``.ci/run`` has pytest write."""
    report = tmp_path / "junit.xml"
    run_pytest(tmp_path, CASES["tool"] + "\ndef test_other():\n    pass\n", None, f"--junitxml={report}")
    out = subprocess.run([sys.executable, str(SKIPS), str(report)], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stdout.splitlines()[0] == "skipped: 1"
    assert "test_probe::test_it: 'cairn-no-such-tool' not installed" in out.stdout

    clean = tmp_path / "clean"
    clean.mkdir()
    run_pytest(clean, "def test_other():\n    pass\n", None, f"--junitxml={report}")
    out = subprocess.run([sys.executable, str(SKIPS), str(report)], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "skipped: 0\n")

    missing = subprocess.run([sys.executable, str(SKIPS), str(tmp_path / "none.xml")], capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stdout.startswith("skipped: unknown")


def test_ci_run_calls_the_readme_test_command_and_checks_the_skip_count() -> None:
    script = (HERE.parent / ".ci" / "run").read_text()
    run_line = next(line for line in script.splitlines() if line.startswith("nox "))
    assert "tests" in run_line.split() and "--junitxml=" in run_line
    assert 'python3 .ci/skips.py "$report" || status=1' in script
    assert "nox -s tests" in (HERE.parent / "README.md").read_text()


BYPASSES = re.compile(r"importorskip|\bskipif\b|pytest\.skip\b|mark\.skip\b|environ\.get\(\s*[\"']CI[\"']|environ\[[\"']CI[\"']\]")


def test_no_test_module_bypasses_the_mechanism() -> None:
    """Every skip in tests/ goes through support.requirements.need: nothing else may skip, or read ``CI`` itself."""
    mechanism = {HERE / "conftest.py", HERE / "support" / "requirements.py", Path(__file__).resolve()}
    offenders = []
    for path in sorted(HERE.rglob("*.py")):
        if path in mechanism:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if BYPASSES.search(line):
                offenders.append(f"{path.relative_to(HERE)}:{number}: {line.strip()}")
    assert offenders == []
