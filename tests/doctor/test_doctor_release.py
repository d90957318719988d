"""``cairn doctor`` with no ``--matrix``: it reads the matrix of the release the host installs from (the Cairn
index in pip's or uv's configuration), only as a signed TUF target; and its advice covers every GPU."""

from __future__ import annotations

import os
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cairn.cli import COMMANDS, main
from cairn.doctor import diagnose
from cairn.matrix.model import VersionRange
from support import doctor_hosts as hosts
from support import requires
from support.matrices import DIGEST, cell, publish
from support.repositories import signed_sample_repository

pytestmark = requires(os.geteuid() == 0, "run as root: fixture device nodes are chowned to render/video gids")


# how long the release's signed metadata has left, as doctor says it after the matrix it verified
TIME_LEFT = re.compile(r"; metadata valid for \d+ h \d+ min more \(timestamp expires [0-9-]+ [0-9:]+ UTC\); "
                       r"snapshot \d+ d \d+ h, targets \d+ d \d+ h, root \d+ d \d+ h\)")


def without_time_left(text: str) -> str:
    """``text`` with the time-left clause taken out (")" kept); it must have held exactly one."""
    out, count = TIME_LEFT.subn(")", text)
    assert count == 1, text
    return out


def doctor_out(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    COMMANDS.setdefault("doctor", ("cairn.doctor.command", "diagnose a ROCm host"))
    code = main(["doctor", *args])
    return code, capsys.readouterr().out.splitlines()


@pytest.fixture
def signed_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository cairn publish wrote for gfx90a, and its root pinned through $CAIRN_TUF_ROOT."""
    repo = signed_sample_repository(tmp_path, monkeypatch)
    monkeypatch.delenv("CAIRN_MATRIX", raising=False)
    return repo


def test_reads_the_release_of_the_configured_index(tmp_path: Path, signed_repo: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    host = hosts.container_without_kfd(tmp_path / "host")  # two gfx90a GPUs
    host.pip_conf(f"{signed_repo.as_uri()}/channels/dev/simple/gfx90a/")
    _, local = doctor_out(capsys, "--root", str(tmp_path / "host"), "-v")
    assert not any("127.0.0.1" in line for line in local), "a loopback registry is never a pull command"
    monkeypatch.setenv("CAIRN_PUBLIC_REGISTRY", "registry.example")  # where the sample's images are published
    _, lines = doctor_out(capsys, "--root", str(tmp_path / "host"), "-v")
    advice = lines.index("advice gfx90a: cairn 5.2.3 (dev, verified) passed its gates for this host")
    assert lines[advice + 1].startswith("  docker pull registry.example/cairn/smoke@sha256:")
    assert lines[advice + 2].startswith(f"  pip install --index-url {signed_repo.as_uri()}/channels/dev/simple/gfx90a/ ")
    assert (f"  matrix {signed_repo.as_uri()}/channels/dev/matrix.json (verified: signed target channels/dev/matrix.json of "
            f"{signed_repo.as_uri()}/; the release of /etc/pip.conf [global] index-url)") in [
        without_time_left(line) for line in lines if line.startswith("  matrix ")]


def test_a_staged_release_index_reads_the_staged_matrix(tmp_path: Path, signed_repo: Path) -> None:
    host = hosts.container_without_kfd(tmp_path / "host")
    host.pip_conf(f"{signed_repo.as_uri()}/staging/5.2.3/simple/gfx90a", "opt/venv/pip.conf")
    (tmp_path / "host/opt/venv/lib/python3.12/site-packages").mkdir(parents=True)  # a venv's pip.conf sits at its prefix
    advice = diagnose(str(tmp_path / "host"))["advice"]
    assert advice["status"] == "ok"
    assert [without_time_left(m) for m in advice["matrices"]] == [f"{signed_repo.as_uri()}/staging/5.2.3/matrix.json (verified: signed target "
                                  f"staging/5.2.3/matrix.json of {signed_repo.as_uri()}/; the release of "
                                  "/opt/venv/pip.conf [global] index-url)"]


def test_release_over_http_from_pip_index_url_hides_credentials(tmp_path: Path, signed_repo: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(signed_repo)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/"
    try:
        host = hosts.container_without_kfd(tmp_path / "host")
        host.environ(PIP_INDEX_URL=f"http://deploy:s3cret@127.0.0.1:{server.server_port}/channels/dev/simple/gfx90a/")
        host.pip_conf("https://mirror.example/simple/")  # the variable wins over pip.conf, as in pip
        _, lines = doctor_out(capsys, "--root", str(tmp_path / "host"), "--json")
    finally:
        server.shutdown()
    text = "\n".join(lines)
    assert "s3cret" not in text
    import json

    advice = json.loads(text)["advice"]
    assert advice["status"] == "ok" and all(p["verified"] for p in advice["picks"])
    assert [without_time_left(m) for m in advice["matrices"]] == [f"{base}channels/dev/matrix.json (verified: signed target channels/dev/matrix.json of "
                                  f"{base}; the release of PIP_INDEX_URL)"]
    # the sample's image is on a loopback registry and no public one is configured: no pull, just pip
    assert advice["gpus"][0]["target"] == "gfx90a" and advice["gpus"][0]["install"][0].startswith(
        f"pip install --index-url {base}channels/dev/simple/gfx90a/")


def test_tampered_release_matrix_is_refused_in_one_line(tmp_path: Path, signed_repo: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    host = hosts.container_without_kfd(tmp_path / "host")
    host.pip_conf(f"{signed_repo.as_uri()}/channels/dev/simple/gfx90a/", "root/.config/pip/pip.conf")
    matrix = signed_repo / "channels/dev/matrix.json"
    matrix.write_text(matrix.read_text().replace('"gfx90a"', '"gfx90b"', 1))
    code, lines = doctor_out(capsys, "--root", str(tmp_path / "host"))
    advice = [x for x in lines if x.startswith("advice")]
    assert advice == [f"advice refused the release's matrix {matrix.as_uri()} (the release of /root/.config/pip/pip.conf "
                      f"[global] index-url {signed_repo.as_uri()}/channels/dev/simple/gfx90a/): channels/dev/matrix.json: "
                      "bytes do not match the signed sha256 " + advice[0].split("signed sha256 ")[1]]
    assert advice[0].endswith("— do not trust it") and not any(x.startswith("  docker pull") for x in lines)
    assert code == 2  # the checks ran as usual: this container has no /dev/kfd
    assert any(x.startswith("FAIL devices") for x in lines)


def test_release_matrix_without_a_pinned_root_is_refused(tmp_path: Path, signed_repo: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_TUF_ROOT", str(tmp_path / "nowhere.json"))
    host = hosts.container_without_kfd(tmp_path / "host")
    host.pip_conf(f"{signed_repo.as_uri()}/channels/dev/simple/gfx90a/")
    advice = diagnose(str(tmp_path / "host"))["advice"]
    assert advice["status"] == "refused" and advice["picks"] == []
    assert advice["summary"].endswith("no pinned TUF root to verify it with — set CAIRN_TUF_ROOT to the release's root.json, "
                                      "or pass --matrix URL (a release's channels/<channel>/matrix.json) or set CAIRN_MATRIX")


def test_no_cairn_index_says_so_and_how_to_pass_a_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_MATRIX", raising=False)
    hosts.rx7900xtx_desktop(tmp_path).pip_conf("https://mirror.example/simple/")  # an index, but no Cairn release
    _, lines = doctor_out(capsys, "--root", str(tmp_path))
    assert [x for x in lines if x.startswith("advice")] == [
        "advice no compatibility matrix: no Cairn index is configured for pip or uv on this host (PIP_INDEX_URL, "
        "UV_DEFAULT_INDEX, pip.conf), so its release is unknown — pass --matrix URL (a release's "
        "channels/<channel>/matrix.json) or set CAIRN_MATRIX"]


# -- every GPU gets its command ---------------------------------------------------------------------------
def test_two_kinds_of_gpu_get_one_advice_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts.workstation_two_gpus(tmp_path / "host")
    kernels = VersionRange("6.1", "6.13")
    pub = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx1100", kernel=kernels), cell("7.14.0", "gfx1030", kernel=kernels)])
    _, lines = doctor_out(capsys, "--root", str(tmp_path / "host"), "--matrix", str(pub), "--no-audit")
    start = next(i for i, x in enumerate(lines) if x.startswith("advice"))
    index = pub.resolve().as_uri()
    assert lines[start:start + 6] == [
        "advice gfx1100: cairn 7.14.0 (stable, unverified) passed its gates for this host",
        f"  docker pull registry.example/cairn/pytorch@{DIGEST}",
        f"  pip install --index-url {index}/simple/gfx1100/ 'torch==2.12.0'",
        "advice gfx1030: cairn 7.14.0 (stable, unverified) passed its gates for this host",
        f"  docker pull registry.example/cairn/pytorch@{DIGEST}",
        f"  pip install --index-url {index}/simple/gfx1030/ 'torch==2.12.0'",
    ]


def test_two_gpus_of_one_family_are_sent_to_the_familys_index_not_each_to_its_own(tmp_path: Path,
                                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A target's own index brings that target's code alone: with a 7900 XTX and a 7800 XT in one host, each
    GPU's own index would leave the other without code, so both are sent to gfx110X-dgpu's."""
    from dataclasses import replace

    hosts.workstation_two_rdna3(tmp_path / "host")
    kernels = VersionRange("6.1", "6.13")
    own = [replace(cell("7.14.0", t, kernel=kernels), family="gfx110X-dgpu") for t in ("gfx1100", "gfx1101")]
    pub = publish(tmp_path / "pub", "7.14.0", own)
    _, lines = doctor_out(capsys, "--root", str(tmp_path / "host"), "--matrix", str(pub), "--no-audit")
    index = pub.resolve().as_uri()
    assert [x for x in lines if x.startswith("  pip install")] == [
        f"  pip install --index-url {index}/simple/gfx110X-dgpu/ 'torch==2.12.0'"] * 2
    alone = publish(tmp_path / "alone", "7.14.0", own[:1])
    hosts.rx7900xtx_desktop(tmp_path / "one")
    _, lines = doctor_out(capsys, "--root", str(tmp_path / "one"), "--matrix", str(alone), "--no-audit")
    assert [x for x in lines if x.startswith("  pip install")] == [
        f"  pip install --index-url {alone.resolve().as_uri()}/simple/gfx1100/ 'torch==2.12.0'"]


def test_second_gpu_without_a_cell_is_said_beside_the_first(tmp_path: Path) -> None:
    hosts.workstation_two_gpus(tmp_path / "host")
    pub = publish(tmp_path / "pub", "7.14.0", [cell("7.14.0", "gfx1100", kernel=VersionRange("6.1", "6.13"))])
    advice = diagnose(str(tmp_path / "host"), [str(pub)], audit=False)["advice"]
    assert advice["status"] == "none"
    assert [g["target"] for g in advice["gpus"]] == ["gfx1100", "gfx1030"]
    assert [g["status"] for g in advice["gpus"]] == ["ok", "none"]
    assert advice["gpus"][1]["summary"].startswith("gfx1030 has no validated image or wheel in 7.14.0")
    assert advice["gpus"][1]["install"] == [] and len(advice["gpus"][0]["install"]) == 2
