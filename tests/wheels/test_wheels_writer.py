"""The wheel writer: byte-identical across umask, mtimes and working directory; valid for pip's tools."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from cairn.wheels.wheelfile import Member, Metadata, read_metadata, repack, write_wheel

EPOCH = 1700000000


def _tree(root: Path, mtime: int) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "sub" / "data.bin").write_bytes(bytes(range(256)) * 1000)
    tool = root / "pkg" / "tool.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    for path in root.rglob("*"):
        os.utime(path, (mtime, mtime))
    return root


def _build(base: Path, umask: int, mtime: int) -> Path:
    old = os.umask(umask)
    try:
        src = _tree(base / "src", mtime)
        cwd = os.getcwd()
        os.chdir(base)
        try:
            members = [Member.file(p.relative_to(src).as_posix(), p) for p in sorted(src.rglob("*")) if p.is_file()]
            meta = Metadata(name="demo-pkg", version="1.0", summary="demo", requires_dist=("packaging>=23",))
            return write_wheel(base / "out", meta, "py3-none-any", members, source_date_epoch=EPOCH, purelib=True)
        finally:
            os.chdir(cwd)
    finally:
        os.umask(old)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_identical_bytes_across_umask_mtime_and_cwd(tmp_path):
    first = _build(tmp_path / "a", 0o022, 1_600_000_000)
    second = _build(tmp_path / "b", 0o077, 1_750_000_000)
    assert first.name == second.name == "demo_pkg-1.0-py3-none-any.whl"
    assert _sha(first) == _sha(second)


def test_members_sorted_normalized_and_recorded(tmp_path):
    wheel = _build(tmp_path, 0o077, 1_600_000_000)
    with zipfile.ZipFile(wheel) as archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names[-1] == "demo_pkg-1.0.dist-info/RECORD"
        payload = [n for n in names if ".dist-info/" not in n]
        assert payload == sorted(payload)
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
        assert modes["pkg/tool.sh"] == 0o755 and modes["pkg/__init__.py"] == 0o644
        assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
        record = archive.read("demo_pkg-1.0.dist-info/RECORD").decode().splitlines()
    assert len(record) == len(names)
    assert read_metadata(wheel)["Requires-Dist"] == ["packaging>=23"]


def test_pip_installs_it(tmp_path):
    wheel = _build(tmp_path, 0o022, 1_600_000_000)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", target, wheel],
                   check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert (target / "pkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert os.access(target / "pkg" / "tool.sh", os.X_OK)


def test_repack_is_deterministic_and_renames_version(tmp_path):
    wheel = _build(tmp_path / "a", 0o022, 1_600_000_000)
    one = repack(wheel, tmp_path / "r1", source_date_epoch=EPOCH, version="1.0+rocm.7.14.0", extra_requires=("x==1",))
    two = repack(wheel, tmp_path / "r2", source_date_epoch=EPOCH, version="1.0+rocm.7.14.0", extra_requires=("x==1",))
    assert one.name == "demo_pkg-1.0+rocm.7.14.0-py3-none-any.whl"
    assert _sha(one) == _sha(two)
    meta = read_metadata(one)
    assert meta["Version"] == ["1.0+rocm.7.14.0"]
    assert meta["Requires-Dist"] == ["packaging>=23", "x==1"]


def test_twin_is_the_wheel_write_wheel_would_write(tmp_path):
    """A device wheel's variant twin copies the plain wheel's compressed members: the result must be the very
    bytes of writing the same payload from scratch under the twin's name, label and dist-info, a member over the
    16 MiB level-1 threshold and an executable one included, and pip must install it."""
    from cairn.wheels.wheelfile import write_twin

    payload = tmp_path / "big.bin"
    payload.write_bytes(os.urandom(1 << 20) * 17)  # over BIG_MEMBER: deflated at level 1
    members = [Member.file("pkg/big.bin", payload), Member.text("pkg/__init__.py", "VALUE = 2\n"),
               Member.text("pkg/run.sh", "#!/bin/sh\n", executable=True)]
    plain_meta = Metadata(name="demo-device-gfx1100", version="2.0", summary="plain")
    twin_meta = Metadata(name="demo-device", version="2.0", summary="the variant")
    extra = [Member.text("variant.json", '{"a": 1}\n'), Member.text("licenses/COPYING", "MIT\n")]
    plain = write_wheel(tmp_path / "plain", plain_meta, "py3-none-any", members, source_date_epoch=EPOCH,
                        extra_dist_info=[Member.text("licenses/COPYING", "MIT\n")])
    twin = write_twin(plain, tmp_path / "twin", twin_meta, "py3-none-any", source_date_epoch=EPOCH,
                      label="aabbccdd", extra_dist_info=extra)
    direct = write_wheel(tmp_path / "direct", twin_meta, "py3-none-any", members, source_date_epoch=EPOCH,
                         label="aabbccdd", extra_dist_info=extra)
    assert twin.name == direct.name == "demo_device-2.0-py3-none-any-aabbccdd.whl"
    assert twin.read_bytes() == direct.read_bytes()
    with zipfile.ZipFile(twin) as archive:
        assert archive.testzip() is None
        assert archive.read("pkg/big.bin") == payload.read_bytes()
        assert (archive.getinfo("pkg/run.sh").external_attr >> 16) & 0o111
        assert "demo_device-2.0.dist-info/variant.json" in archive.namelist()
    assert not list((tmp_path / "twin").glob(".*partial"))
