"""Parse what ``rocminfo``, ``amd-smi`` and ``rocm-smi`` print into the same small record per GPU.

These tools are a second opinion: the KFD topology in sysfs is the primary source, and the GPU check
cross-checks its targets against what the runtime (rocminfo) and the management library (amd-smi; ROCm
10.1 removed rocm-smi) report. Under ``HSA_OVERRIDE_GFX_VERSION`` rocminfo reports the spoofed target,
which is evidence worth showing. Parsers are lenient: an unknown line is ignored, never an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_ISA_RE = re.compile(r"amdgcn-amd-amdhsa--(gfx[0-9a-z]+(?::[a-z0-9]+[+-])*)")


@dataclass(frozen=True)
class ToolGpu:
    """One GPU as a tool reports it; ``node`` is the KFD node id when the tool says."""

    tool: str
    index: int
    target: str  # gfx name, possibly with features: gfx942:sramecc+:xnack-
    name: str = ""  # marketing name
    node: int | None = None

    @property
    def processor(self) -> str:
        return self.target.split(":", 1)[0]


def parse_rocminfo(text: str) -> tuple[ToolGpu, ...]:
    """GPU agents from ``rocminfo``: blocks that start ``Agent N`` and say ``Device Type: GPU``."""
    gpus = []
    for index, block in enumerate(re.split(r"\n\*{5,}\s*\nAgent \d+\s*\n\*{5,}\s*\n", "\n" + text)[1:]):
        block = block.split("\n*******", 1)[0]
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if not line.startswith("  ") or line.startswith("   "):
                continue  # agent-level fields are indented by exactly two spaces
            key, _, value = line.strip().partition(":")
            fields.setdefault(key.strip(), value.strip())
        if fields.get("Device Type") != "GPU":
            continue
        isa = _ISA_RE.search(block)
        target = isa[1] if isa else fields.get("Name", "")
        node = fields.get("Node", "")
        gpus.append(ToolGpu("rocminfo", index, target, fields.get("Marketing Name", ""), int(node) if node.isdigit() else None))
    return tuple(gpus)


def rocminfo_error(text: str) -> str:
    """The one line rocminfo prints when it cannot reach the driver (e.g. "ROCk module is NOT loaded")."""
    lines = text.splitlines()
    for marker in ("unable to open /dev/kfd", "not loaded", "hsa_status_error"):
        for line in lines:
            if marker in line.lower():
                return line.strip()
    return ""


def parse_amd_smi(text: str) -> tuple[ToolGpu, ...]:
    """``amd-smi static --asic`` in its text form (``GPU: N`` blocks) or its ``--json`` form."""
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            return _amd_smi_json(json.loads(stripped))
        except ValueError:
            return ()
    gpus = []
    for block in re.split(r"^GPU: ", text, flags=re.M)[1:]:
        head, _, rest = block.partition("\n")
        fields: dict[str, str] = {}
        for line in rest.splitlines():
            key, sep, value = line.strip().partition(":")
            if sep:
                fields.setdefault(key.strip().upper(), value.strip())
        target = fields.get("TARGET_GRAPHICS_VERSION", "")
        if head.strip().isdigit() and target:
            node = fields.get("NODE_ID", "")
            gpus.append(ToolGpu("amd-smi", int(head.strip()), target, fields.get("MARKET_NAME", ""),
                                int(node) if node.isdigit() else None))
    return tuple(gpus)


def _amd_smi_json(doc: object) -> tuple[ToolGpu, ...]:
    items = doc.get("gpu_data", []) if isinstance(doc, dict) else doc
    gpus: list[ToolGpu] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        asic = item.get("asic", {}) if isinstance(item.get("asic"), dict) else {}
        target = str(asic.get("target_graphics_version", ""))
        if target:
            gpus.append(ToolGpu("amd-smi", int(item.get("gpu", len(gpus))), target, str(asic.get("market_name", ""))))
    return tuple(gpus)


def parse_rocm_smi(text: str) -> tuple[ToolGpu, ...]:
    """``rocm-smi --showproductname``: ``GPU[0] : GFX Version: gfx1100`` and ``Card Series`` lines."""
    found: dict[int, dict[str, str]] = {}
    for match in re.finditer(r"^GPU\[(\d+)\]\s*:\s*([^:]+):\s*(.*)$", text, flags=re.M):
        found.setdefault(int(match[1]), {})[match[2].strip()] = match[3].strip()
    return tuple(
        ToolGpu("rocm-smi", index, fields["GFX Version"], fields.get("Card Series", ""), _node(fields))
        for index, fields in sorted(found.items())
        if fields.get("GFX Version", "").startswith("gfx")
    )


def _node(fields: dict[str, str]) -> int | None:
    node = fields.get("Node ID", "")
    return int(node) if node.isdigit() else None


PARSERS = {"rocminfo": parse_rocminfo, "amd-smi": parse_amd_smi, "rocm-smi": parse_rocm_smi}
