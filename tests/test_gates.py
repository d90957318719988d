"""Gate figures: gating pass rate per family and parity that names the family skipping a gate.

The broken-image gate tests live with the real images in test_containers_build.py (one build per session).
"""

from __future__ import annotations

import json

from cairn.gates.summary import Row, figures


def test_pass_rate_and_parity_name_the_family_that_skips() -> None:
    rows = [Row("static-coverage", "runtime", "gfx90a", "gfx90a", "passed", ""),
            Row("in-container", "runtime", "gfx90a", "gfx90a", "passed", ""),
            Row("static-coverage", "runtime", "gfx1030", "gfx1030", "passed", ""),
            Row("in-container", "runtime", "gfx1030", "gfx1030", "not-run", "blocked")]
    figs = figures(rows, ("static-coverage", "in-container"), ("gfx90a", "gfx1030"), {})
    assert figs["families"]["gfx90a"]["pass_rate"] == 1.0
    assert figs["families"]["gfx1030"]["pass_rate"] == 0.5
    assert figs["parity"] is False and figs["parity_gaps"] == ["gfx1030 skips in-container"]
    assert json.dumps(figs)
