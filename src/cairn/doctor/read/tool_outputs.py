"""What ``rocminfo``, ``amd-smi`` and ``rocm-smi`` print on this host (``cairn.doctor.tools`` parses it).

On a live host each tool is run when installed; a captured tree keeps their outputs in
``.cairn-doctor/{rocminfo,amd-smi,rocm-smi}.txt``.
"""

from __future__ import annotations

import re
import shutil

from cairn.doctor.read.files import Root, text_of
from cairn.doctor.snapshot import ToolOutput
from cairn.errors import CairnError
from cairn.proc import run

CAPTURE_DIR = ".cairn-doctor"
TOOL_TIMEOUT = 20.0
TOOL_COMMANDS = {
    "rocminfo": ["rocminfo"],
    "amd-smi": ["amd-smi", "static", "--asic", "--driver"],
    "rocm-smi": ["rocm-smi", "--showproductname"],
}


def read_tools(r: Root, live: bool) -> dict[str, ToolOutput]:
    out = {}
    for tool, cmd in TOOL_COMMANDS.items():
        if not live:
            captured = r(f"{CAPTURE_DIR}/{tool}.txt")
            out[tool] = ToolOutput(tool, captured.is_file(), text_of(captured))
            continue
        if not shutil.which(cmd[0]):
            out[tool] = ToolOutput(tool, False)
            continue
        try:
            proc = run(cmd, check=False, timeout=TOOL_TIMEOUT)
        except (OSError, CairnError) as exc:
            out[tool] = ToolOutput(tool, True, str(exc), -1)
            continue
        out[tool] = ToolOutput(tool, True, _strip_ansi(proc.stdout + proc.stderr), proc.returncode)
    return out


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
