"""Headless Chromium, for the tests that read the matrix page as a browser renders it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support.requirements import need_tool


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    exe = need_tool("chromium", "chromium")
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--no-first-run", "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
                           *args], capture_output=True, text=True, timeout=120)


def dom(page: Path, fragment: str, tmp_path: Path) -> str:
    proc = chromium(tmp_path, "--dump-dom", page.as_uri() + fragment)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout



# a GPU's row on the matrix page: its target, its product and whether the filter hides it
ROW = re.compile(r'<tr class="row" data-target="([^"]+)" data-product="([^"]*)" data-search="[^"]*"( hidden="")?>')


def shown(html: str) -> list[tuple[str, str]]:
    """(target, product) of every row the page's filter left visible, sorted."""
    return sorted((target, product) for target, product, hidden in ROW.findall(html) if not hidden)
