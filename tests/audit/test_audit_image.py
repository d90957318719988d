"""``cairn audit`` on image references: a real image built in the services' Docker Engine, pushed to their
registry, read back by skopeo — by registry reference and by ``docker-daemon:`` — and a bad reference in one line."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from itertools import count

import pytest

from cairn.audit.image_ref import is_reference, skopeo_source
from cairn.cli import main
from support import need_tool
from support.fatbin_writer import bundle_for, section, write_elf

_TAGS = count(1)


@pytest.mark.parametrize(("text", "reference"), [
    ("127.0.0.1:5000/cairn/llama-cpp:7.2.4", True),
    ("registry.example/cairn/pytorch@sha256:" + "ab" * 32, True),
    ("localhost/x", True),
    ("rocm/pytorch:latest", True),
    ("docker-daemon:smoke:1", True),
    ("docker://quay.io/a/b", True),
    ("foo/bar.so", False),  # a mistyped file stays a file: "no such file or directory"
    ("./out/image", False),
    ("/tmp/layout", False),
    ("libamdhip64.so", False),
])
def test_which_words_are_image_references(text: str, reference: bool) -> None:
    assert is_reference(text) is reference


def test_transport_strings() -> None:
    assert skopeo_source("127.0.0.1:5000/a/b:1") == "docker://127.0.0.1:5000/a/b:1"
    assert skopeo_source("docker-daemon:smoke") == "docker-daemon:smoke:latest"
    assert skopeo_source("docker-daemon:reg:5000/smoke:2") == "docker-daemon:reg:5000/smoke:2"


@pytest.fixture(scope="module")
def pushed(services: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(registry reference, docker-daemon reference) of a two-layer image: the bottom layer holds libk.so
    (gfx1100, gfx1151) and libg.so (gfx1030 only), the top layer replaces libg.so with a gfx1100+gfx1151 build —
    so gfx1151 is covered only if the audit sees the container's filesystem, where the later layer wins."""
    from cairn.services import docker_client
    from cairn.services.engine import registry_address

    need_tool("gcc", "gcc")
    need_tool("objcopy", "binutils")
    work = tmp_path_factory.mktemp("image")
    both = section([bundle_for(["gfx1100", "gfx1151"])])
    libk = write_elf(work / "libk.so", both).read_bytes()
    old = write_elf(work / "libg-old.so", section([bundle_for(["gfx1030"])])).read_bytes()
    new = write_elf(work / "libg-new.so", both, data_string="the newer libg").read_bytes()
    client = docker_client()
    name = f"cairn-test/audit-image:{next(_TAGS)}"
    base = _context({"Dockerfile": b"FROM scratch\nCOPY opt /opt\n", "opt/k/lib/libk.so": libk, "opt/k/lib/libg.so": old})
    client.images.build(fileobj=base, custom_context=True, tag=name + "-base", rm=True)
    top = _context({"Dockerfile": f"FROM {name}-base\nCOPY libg.so /opt/k/lib/libg.so\n".encode(), "libg.so": new})
    image, _ = client.images.build(fileobj=top, custom_context=True, tag=name, rm=True)
    registry, _ = registry_address()
    remote = f"{registry}/{name}"
    image.tag(remote)
    for line in client.images.push(remote, stream=True, decode=True):
        assert "error" not in line, line
    yield remote, f"docker-daemon:{name}"
    for tag in (remote, name, name + "-base"):  # the engine's copies; the registry keeps its own
        client.images.remove(tag, force=True)


def _context(files: dict[str, bytes]) -> io.BytesIO:
    """A docker build context as a tarball."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


@pytest.mark.registry
def test_audit_by_registry_reference(pushed: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    remote, _ = pushed
    assert main(["audit", remote, "--target", "gfx1151", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    paths = sorted(b["path"] for b in doc["binaries"])
    assert len(paths) == 2 and all(p.startswith(remote + "@sha256:") for p in paths), paths
    assert [p.rsplit(":", 1)[1] for p in paths] == ["/opt/k/lib/libg.so", "/opt/k/lib/libk.so"]
    assert doc["coverage"][0]["covered"] is True  # the top layer's libg.so replaced the gfx1030-only one
    assert main(["audit", remote, "--target", "gfx1030"]) == 1
    assert "/tmp/" not in capsys.readouterr().out  # the temporary layout never shows


@pytest.mark.registry
def test_audit_by_docker_daemon_reference(pushed: tuple[str, str], capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``docker-daemon:`` reads the engine ``$DOCKER_HOST`` names, as docker does: the private engine's, exported
    as ``cairn services start`` prints it."""
    from cairn.services.engine import engine_host

    _, local = pushed
    monkeypatch.setenv("DOCKER_HOST", engine_host())
    assert main(["audit", local, "--family", "gfx110X-dgpu", "--json"]) == 1  # gfx1101 and gfx1102 are not carried
    doc = json.loads(capsys.readouterr().out)
    assert {c["target"]: c["covered"] for c in doc["coverage"]} == {"gfx1100": True, "gfx1101": False, "gfx1102": False}
    assert all(b["path"].startswith(local + "@sha256:") for b in doc["binaries"])


@pytest.mark.registry
def test_a_bad_reference_is_one_line(pushed: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    remote, _ = pushed
    missing = remote.rsplit(":", 1)[0] + ":no-such-tag"
    assert main(["audit", missing]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"cairn audit: {missing}: cannot read the image: ")
    assert "manifest unknown" in err and "Traceback" not in err
    assert main(["audit", "docker-daemon:cairn-test/never-built:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "docker-daemon:cairn-test/never-built:1: cannot read the image" in err
