"""An installer-side consumer of PEP 825 variant wheels that is not Cairn's (variantlib), run in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SELECT = """
import json, sys
from variantlib.api import get_variants_by_priority
from variantlib.variants_json import VariantsJson
ranked = get_variants_by_priority(variants_json=VariantsJson(json.load(open(sys.argv[1]))))
print(json.dumps([v.label for v in ranked]))
"""


def select(variants_json: Path, gpus: str) -> list[str]:
    """The variant labels variantlib ranks for a machine whose GPUs are ``gpus``, best first."""
    env = {**os.environ, "ROCM_BOOTSTRAP_FORCE_GFX_ARCH": gpus}
    done = subprocess.run([sys.executable, "-c", SELECT, str(variants_json)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return [label for label in json.loads(done.stdout) if label != "null"]  # null: the variant without properties

