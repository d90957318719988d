"""The pinned llama-cpp-python sdist, its vocab and the gate inputs, shared by the llama gate tests.

The sdist (76 MB) is cached in ``$CAIRN_TEST_CACHE/sdists`` and fetched with pip (checked against the pin)
when absent, which needs the package index: without it a developer's run skips, CI fails.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from cairn.digest import file_sha256
from cairn.engines.llama.vocab import SDIST
from support.requirements import need


def llama_sdist(cache_dir: Path) -> Path:
    path = cache_dir / "sdists" / SDIST["filename"]
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
            pin = Path(scratch) / "requirements.txt"
            pin.write_text(f"{SDIST['name']}=={SDIST['version']} --hash=sha256:{SDIST['sha256']}\n")
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:",
                                   "--require-hashes", "-r", str(pin), "-d", scratch], capture_output=True, text=True)
            need(done.returncode == 0, f"pip download {SDIST['name']}=={SDIST['version']} failed: "
                                       f"{done.stderr.strip()[-300:]}")
            (Path(scratch) / SDIST["filename"]).replace(path)
    assert file_sha256(path) == SDIST["sha256"]
    return path
