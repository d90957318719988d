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


def test_an_image_blocked_by_its_linkage_check_is_not_counted_against_the_family() -> None:
    """Like an image blocked at planning (which has no gate actions at all): the JAX image whose pjrt needs
    sonames the release lacks is named in the table, but the family's runtime image still gates at 100 %."""
    blocked = "image blocked: jax 0.10.0: 7 libraries its wheels link are not in the release's ROCm 7.2.4 image: …"
    rows = [Row("static-coverage", "runtime", "gfx942", "gfx94X-dcgpu", "passed", ""),
            Row("in-container", "runtime", "gfx942", "gfx94X-dcgpu", "passed", ""),
            Row("static-coverage", "jax", "gfx942", "gfx94X-dcgpu", "not-run", blocked),
            Row("in-container", "jax", "gfx942", "gfx94X-dcgpu", "not-run", blocked)]
    figs = figures(rows, ("static-coverage", "in-container"), ("gfx94X-dcgpu",), {})
    assert figs["families"]["gfx94X-dcgpu"] == {"passed": 2, "expected": 2, "pass_rate": 1.0}
    assert figs["parity"] is True
