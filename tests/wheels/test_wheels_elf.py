"""Honest platform tags (cross-checked with auditwheel) and libraries that load from site-packages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.wheels import elf
from cairn.wheels.wheelfile import Member, Metadata, write_wheel
from support import need, need_tool

EPOCH = 1700000000


def _cc(tmp: Path, name: str, code: str, *libs: str) -> Path:
    gcc = need_tool("gcc")
    src = tmp / f"{name}.c"
    src.write_text(code)
    out = tmp / f"lib{name}.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", out, src, f"-Wl,-soname,lib{name}.so", f"-L{tmp}", *libs], check=True)
    return out


def _auditwheel_tag(wheel: Path) -> str:
    tool = need_tool("auditwheel", "auditwheel (pip install auditwheel)")
    proc = subprocess.run([tool, "show", str(wheel)], capture_output=True, text=True)
    text = " ".join((proc.stdout + proc.stderr).split())
    found = re.search(r'platform tag: "([a-z0-9_]+)"', text)
    assert found, text
    return found.group(1)


def _wheel(tmp: Path, libs: list[Path], name: str = "tagdemo") -> tuple[Path, elf.PlatformTag]:
    infos = [elf.inspect(p) for p in libs]
    tag = elf.platform_tag([i for i in infos if i])
    members = [Member(f"{name}/lib/{p.name}", source=p, executable=True) for p in libs]
    members.append(Member.text(f"{name}/__init__.py", ""))
    wheel = write_wheel(tmp / "dist", Metadata(name=name, version="1.0"), f"py3-none-{tag.tag}", members,
                        source_date_epoch=EPOCH)
    return wheel, tag


def test_glibc_only_library_is_manylinux_and_auditwheel_agrees(tmp_path):
    lib = _cc(tmp_path, "plain", "#include <string.h>\nint plain(const char *s) { return (int)strlen(s); }\n")
    wheel, tag = _wheel(tmp_path, [lib])
    assert tag.tag.startswith("manylinux_2_") and not tag.external
    theirs = _auditwheel_tag(wheel)
    assert theirs.startswith("manylinux_2_")
    # ours is never laxer than auditwheel's: it may only claim an equal or newer glibc
    assert int(tag.tag.split("_")[2]) >= int(theirs.split("_")[2])


def test_library_needing_a_non_whitelisted_system_library_is_linux(tmp_path):
    need(Path("/usr/lib/x86_64-linux-gnu/libnuma.so.1").exists(), "libnuma1 not installed (apt-get install libnuma1)")
    (tmp_path / "libnuma.so").symlink_to("/usr/lib/x86_64-linux-gnu/libnuma.so.1")
    lib = _cc(tmp_path, "numa_user", "int numa_available(void);\nint probe(void) { return numa_available(); }\n", "-lnuma")
    wheel, tag = _wheel(tmp_path, [lib])
    assert tag.tag == "linux_x86_64" and tag.external == ("libnuma.so.1",)
    assert "libnuma.so.1" in tag.reason
    assert _auditwheel_tag(wheel) == "linux_x86_64"


@pytest.mark.slow
def test_origin_rpath_loads_siblings_from_site_packages_without_ld_library_path(tmp_path):
    need_tool("patchelf")
    base = _cc(tmp_path, "base", "int base_value(void) { return 41; }\n")
    user = _cc(tmp_path, "user", "int base_value(void);\nint user_value(void) { return base_value() + 1; }\n", "-lbase")
    # two wheels, as rocm-sdk-core and an extension: user's RPATH reaches base's directory in site-packages
    elf.set_rpath(user, elf.origin_rpath("demo_user/lib", "demo_base/lib"))
    assert elf.inspect(user).runpath == "$ORIGIN:$ORIGIN/../../demo_base/lib"
    w1 = write_wheel(tmp_path / "dist", Metadata(name="demo-base", version="1.0"), "py3-none-linux_x86_64",
                     [Member("demo_base/lib/libbase.so", source=base, executable=True)], source_date_epoch=EPOCH)
    w2 = write_wheel(tmp_path / "dist", Metadata(name="demo-user", version="1.0"), "py3-none-linux_x86_64",
                     [Member("demo_user/lib/libuser.so", source=user, executable=True)], source_date_epoch=EPOCH)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    site = subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, w1, w2],
                   check=True, env={**env, "PIP_CONFIG_FILE": os.devnull})
    code = ("import ctypes, sysconfig; site = sysconfig.get_paths()['purelib'];"
            "lib = ctypes.CDLL(site + '/demo_user/lib/libuser.so'); print(lib.user_value());"
            "print([l.split()[-1] for l in open('/proc/self/maps') if 'libbase.so' in l][0])")
    out = subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True, text=True, env=env, cwd="/")
    assert out.returncode == 0, out.stderr
    value, loaded = out.stdout.split()
    assert value == "42"
    assert loaded == f"{site}/demo_base/lib/libbase.so"
