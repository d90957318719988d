"""The doctor's advice: the newest matrix cell whose gates passed for this host, or why none fits."""

from __future__ import annotations

import os
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cairn.doctor import diagnose
from cairn.errors import InputError
from cairn.matrix.model import (
    VersionRange,
)
from support import doctor_hosts as hosts
from support import requires
from support.matrices import DIGEST, cell, publish
from support.repositories import signed_sample_repository

pytestmark = requires(os.geteuid() == 0, "run as root: fixture device nodes are chowned to render/video gids")


def test_picks_newest_passing_cell_with_digest_and_index(tmp_path: Path) -> None:
    hosts.mi300x_node(tmp_path / "host")
    old = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx942")])
    new = publish(tmp_path / "pub", "10.1.0", [cell("10.1.0", "gfx942"), cell("10.1.0", "gfx1100")])
    doc = diagnose(str(tmp_path / "host"), [str(old), str(new / "matrix.json")])
    advice = doc["advice"]
    assert advice["status"] == "ok"
    assert advice["summary"] == "gfx942: cairn 10.1.0 (stable, unverified) passed its gates for this host"
    pick = advice["picks"][0]
    assert pick["image"] == f"registry.example/cairn/pytorch@{DIGEST}"
    assert pick["pip"] == f"pip install --index-url {new.resolve().as_uri()}/simple/gfx942/ 'torch==2.12.0'"
    assert all("(unverified: not inside a signed Cairn repository)" in source for source in advice["matrices"])
    driver = next(c for c in doc["checks"] if c["id"] == "driver")
    assert driver["status"] == "ok" and "cairn 10.1.0's supported range" in driver["summary"]


def test_failed_gate_and_kernel_rule_cells_out(tmp_path: Path) -> None:
    hosts.mi300x_node(tmp_path / "host")
    newest = publish(tmp_path / "pub", "10.1.0", [cell("10.1.0", "gfx942", gpu="failed")])
    older = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx942", kernel=VersionRange("6.0", ""))])
    doc = diagnose(str(tmp_path / "host"), [str(newest), str(older)])
    advice = doc["advice"]
    assert advice["status"] == "none"
    assert "every cell in 7.14.0, 10.1.0 is ruled out" in advice["summary"]
    reasons = " | ".join(advice["reasons"])
    assert "gate gpu failed" in reasons and "kernel 5.15.0-119-generic outside >=6.0" in reasons


def test_driver_outside_matrix_range_fails(tmp_path: Path) -> None:
    hosts.mi300x_node(tmp_path / "host")
    pub = publish(tmp_path / "pub", "10.1.0", [cell("10.1.0", "gfx942", kernel=VersionRange("6.8", "6.13"))])
    driver = next(c for c in diagnose(str(tmp_path / "host"), [str(pub)])["checks"] if c["id"] == "driver")
    assert driver["status"] == "fail"
    assert driver["summary"] == "kernel 5.15.0-119-generic is outside cairn 10.1.0's supported range >=6.8,<6.13"


def test_strix_halo_gets_no_override_advice(tmp_path: Path) -> None:
    hosts.strix_halo_laptop(tmp_path / "host")
    pub = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx1100"), cell("7.14.0", "gfx942")])
    advice = diagnose(str(tmp_path / "host"), [str(pub)])["advice"]
    assert advice["status"] == "none"
    assert advice["summary"].startswith("gfx1151 has no validated image or wheel in 7.14.0; nearest: gfx1100 (same gfx11-generic")


def test_no_gpu_advice_names_what_the_matrix_covers(tmp_path: Path) -> None:
    hosts.bare_host(tmp_path / "host")
    pub = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx1100"), cell("7.14.0", "gfx942")])
    advice = diagnose(str(tmp_path / "host"), [str(pub)])["advice"]
    assert advice["status"] == "no-gpu"
    assert advice["summary"] == "no AMD GPU here, so no artifact fits; 7.14.0 covers gfx1100, gfx942"


def test_matrix_over_http(tmp_path: Path) -> None:
    hosts.rx7900xtx_desktop(tmp_path / "host")
    pub = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx1100", python="3.11")])
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(pub)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/matrix.json"
        advice = diagnose(str(tmp_path / "host"), [url])["advice"]
    finally:
        server.shutdown()
    assert advice["status"] == "ok"
    pick = advice["picks"][0]
    assert pick["image"].endswith(DIGEST)
    # the host's Python is unknown in this tree, so the pip line is still given for the cell's index
    assert pick["pip"].startswith(f"pip install --index-url http://127.0.0.1:{server.server_port}/simple/gfx1100/")


def test_bad_matrix_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cairn.cli import COMMANDS, main

    COMMANDS.setdefault("doctor", ("cairn.doctor.command", "diagnose a ROCm host"))
    hosts.bare_host(tmp_path / "host")
    (tmp_path / "matrix.json").write_text("{not json")
    code = main(["doctor", "--root", str(tmp_path / "host"), "--matrix", str(tmp_path / "matrix.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not JSON" in err


def test_signed_repository_is_verified_and_tampering_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signed_sample_repository(tmp_path, monkeypatch)
    hosts.container_without_kfd(tmp_path / "host")  # two gfx90a GPUs
    advice = diagnose(str(tmp_path / "host"), [str(tmp_path / "repo")])["advice"]
    assert advice["matrices"][0].startswith(f"{tmp_path / 'repo'} (verified: signed target ")
    for pick in advice["picks"]:
        assert pick["verified"] and "/simple/gfx90a/" in (pick["pip"] or "/simple/gfx90a/")
    matrix = next((tmp_path / "repo").glob("channels/*/matrix.json"), None) or next((tmp_path / "repo").glob("staging/*/matrix.json"))
    matrix.write_text(matrix.read_text().replace("gfx90a", "gfx90b", 1))
    with pytest.raises(InputError, match="the matrix failed verification"):
        diagnose(str(tmp_path / "host"), [str(matrix)])
