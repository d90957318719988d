"""The suite's order: modules that read the default slice run after every other module, so the slice's build
(started in the background at the first test, see tests/conftest.py) overlaps the tests that do not need it."""

from __future__ import annotations

import subprocess
import sys

from support import ROOT

SLICE_READER = "tests/audit/test_split_real.py"  # its tests ask for default_slice
MARKED_READER = "tests/engines/test_llama_hip_image.py"  # marked default_slice: asks for it by name
PLAIN = "tests/wheels/test_wheels_plan.py"  # none of its tests does


def _collected_modules(*paths: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not engine_build",
                          *paths], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    modules: list[str] = []
    for line in out.stdout.splitlines():
        module = line.split("::")[0]
        if "::" in line and module not in modules:
            modules.append(module)
    return modules


def test_a_module_that_reads_the_slice_runs_after_one_that_does_not_whatever_order_it_was_given_in() -> None:
    assert _collected_modules(SLICE_READER, PLAIN) == [PLAIN, SLICE_READER]
    assert _collected_modules(PLAIN, SLICE_READER) == [PLAIN, SLICE_READER]
    assert _collected_modules(MARKED_READER, PLAIN) == [PLAIN, MARKED_READER]
