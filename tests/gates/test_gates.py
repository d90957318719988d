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
    assert figs["families"]["gfx90a"] == {"passed": 1, "gated": 1, "not_gated": 0, "pass_rate": 1.0}
    # gfx1030's runtime did not run in-container: a cell not gated rates nothing, parity names the gap
    assert figs["families"]["gfx1030"] == {"passed": 0, "gated": 0, "not_gated": 1, "pass_rate": None}
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
    assert figs["families"]["gfx94X-dcgpu"] == {"passed": 1, "gated": 1, "not_gated": 0, "pass_rate": 1.0}
    assert figs["parity"] is True
    # its framework's user-install verdict (failed: the pip command installs, then the plugin cannot load) is a
    # row of the same cell; it stays in the table but does not make the blocked image a cell that skips its gates
    # (the cold build of the default release: `cairn gate` exited 1 on "every family skips static-coverage")
    rows.append(Row("user-install", "jax", "gfx942", "gfx94X-dcgpu", "failed", "debian-sid (glibc 2.43): … cannot open"))
    figs = figures(rows, ("static-coverage", "in-container"), ("gfx94X-dcgpu",), {})
    assert figs["families"]["gfx94X-dcgpu"] == {"passed": 1, "gated": 1, "not_gated": 0, "pass_rate": 1.0}
    assert figs["parity"] is True and figs["parity_gaps"] == []


def test_a_family_of_several_targets_is_judged_per_target_image() -> None:
    """gfx110X-dgpu builds its runtime for gfx1100, gfx1101 and gfx1102: three images, each gated. Counting
    images by name once made 9 of 3 gates pass (300 %), and `cairn gate` — the front door's last check — fail.
    A cell is one image for one target; it passes when every required gate of it passed."""
    rows = [Row(gate, "runtime", target, "gfx110X-dgpu", "passed", "")
            for target in ("gfx1100", "gfx1101", "gfx1102") for gate in ("static-coverage", "in-container")]
    figs = figures(rows, ("static-coverage",), ("gfx110X-dgpu",), {})
    assert figs["families"]["gfx110X-dgpu"] == {"passed": 3, "gated": 3, "not_gated": 0, "pass_rate": 1.0}
    assert figs["parity"] is True
    rows[-2] = Row("static-coverage", "runtime", "gfx1102", "gfx110X-dgpu", "not-run", "image not built")
    figs = figures(rows, ("static-coverage",), ("gfx110X-dgpu",), {})
    assert figs["families"]["gfx110X-dgpu"] == {"passed": 2, "gated": 2, "not_gated": 1, "pass_rate": 1.0}
    assert figs["parity_gaps"] == ["gfx110X-dgpu skips static-coverage"]
    rows[0] = Row("static-coverage", "runtime", "gfx1100", "gfx110X-dgpu", "failed", "no gfx1100 code")
    figs = figures(rows, ("static-coverage",), ("gfx110X-dgpu",), {})
    assert figs["families"]["gfx110X-dgpu"] == {"passed": 1, "gated": 2, "not_gated": 1, "pass_rate": 0.5}


def test_the_user_install_verdict_counts_for_every_image_of_its_target() -> None:
    """user-install judges a target's published wheels, not one image (its rows' image is ``wheels``): its verdict is
    every image cell's of that target, and it makes no cell of its own that lacks the image gates."""
    required = ("static-coverage", "user-install")
    rows = [Row("static-coverage", "runtime", "gfx1151", "gfx1151", "passed", ""),
            Row("static-coverage", "smoke", "gfx1151", "gfx1151", "passed", ""),
            Row("user-install", "wheels", "gfx1151", "gfx1151", "passed", "")]
    figs = figures(rows, required, ("gfx1151",), {})
    assert figs["families"]["gfx1151"] == {"passed": 2, "gated": 2, "not_gated": 0, "pass_rate": 1.0}
    assert figs["parity"] is True
    failed = [*rows[:2], Row("user-install", "wheels", "gfx1151", "gfx1151", "failed", "debian-13 …: libfmt.so.11")]
    assert figures(failed, required, ("gfx1151",), {})["families"]["gfx1151"]["passed"] == 0
    figs = figures(rows[:2], required, ("gfx1151",), {})  # never ran: not gated, and parity names it
    assert figs["families"]["gfx1151"]["not_gated"] == 2 and figs["parity_gaps"] == ["gfx1151 skips user-install"]
