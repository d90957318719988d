"""Honest platform tags (cross-checked with auditwheel) and libraries that load from site-packages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cairn.errors import CheckFailed
from cairn.formats import elf
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


def test_library_needing_a_non_whitelisted_system_library_is_refused(tmp_path):
    need(Path("/usr/lib/x86_64-linux-gnu/libnuma.so.1").exists(), "libnuma1 not installed (apt-get install libnuma1)")
    (tmp_path / "libnuma.so").symlink_to("/usr/lib/x86_64-linux-gnu/libnuma.so.1")
    lib = _cc(tmp_path, "numa_user", "int numa_available(void);\nint probe(void) { return numa_available(); }\n", "-lnuma")
    wheel, tag = _wheel(tmp_path, [lib])
    assert tag.external == ("libnuma.so.1",) and tag.needed_by == (("libnuma.so.1", "libnuma_user.so"),)
    assert _auditwheel_tag(wheel) == "linux_x86_64"  # auditwheel agrees: this wheel alone promises nothing
    with pytest.raises(CheckFailed, match=r"tagdemo: libnuma_user.so needs libnuma.so.1, which neither this wheel"):
        tag.check("tagdemo")
    # the same library resolves when a wheel it requires carries libnuma.so.1
    assert not elf.platform_tag([elf.inspect(lib)], provided=["libnuma.so.1"]).external


def test_tag_is_the_newest_glibc_symbol_version_even_past_auditwheels_policies(tmp_path):
    lib = _cc(tmp_path, "plain2", "#include <string.h>\nint plain(const char *s) { return (int)strlen(s); }\n")
    info = elf.inspect(lib)
    assert elf.platform_tag([info]).tag == "manylinux_2_17_x86_64"  # strlen@GLIBC_2.2.5 only
    # a symbol of a newer glibc than auditwheel's newest policy (sid's sqrtf@GLIBC_2.43): PEP 600's tag by glibc
    newer = replace(info, versions=(*info.versions, ("libm.so.6", "GLIBC_2.43")), glibc_minor=43)
    tag = elf.platform_tag([newer])
    assert tag.tag == "manylinux_2_43_x86_64" and tag.policy == ""
    # GLIBCXX_3.4.32 (GCC 13) with an old glibc: auditwheel's policy says 2_39, and so does the tag
    cxx = replace(info, versions=(*info.versions, ("libstdc++.so.6", "GLIBCXX_3.4.32")), needed=("libstdc++.so.6",))
    assert elf.platform_tag([cxx]).tag == "manylinux_2_39_x86_64"
    # versions a sibling in the wheel set defines are not the host's business
    own = replace(info, versions=(("libLLVM.so.22.1", "LLVM_22.1"),), needed=("libLLVM.so.22.1",))
    assert elf.platform_tag([own], provided=["libLLVM.so.22.1"]).tag == "manylinux_2_17_x86_64"


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
