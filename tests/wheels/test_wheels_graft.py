"""Self-contained, honestly tagged wheels: grafting from a pinned .deb, the tag, the refused local tag and the
glibc floor of our own compiles — with small real ELF files made by gcc and a real .deb made by dpkg-deb."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.digest import file_sha256
from cairn.errors import CheckFailed, ManifestError
from cairn.formats import elf
from cairn.model.manifest import load_manifest
from cairn.model.targets import load_registry
from cairn.plan.prepare import make_plan
from cairn.plan.probe import Host
from cairn.stages import STAGES
from cairn.wheels import graft, index
from cairn.wheels.wheelfile import Metadata, write_wheel
from support import ROOT, need_tool


def _cc(tmp: Path, name: str, code: str, *args: str, soname: str = "") -> Path:
    gcc = need_tool("gcc")
    src = tmp / f"{name}.c"
    src.write_text(code)
    out = tmp / (soname or f"lib{name}.so")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", out, src, f"-Wl,-soname,{soname or out.name}", f"-L{tmp}", *args],
                   check=True)
    return out


def _deb(tmp: Path, package: str, files: dict[str, Path]) -> Path:
    """A real binary package holding ``files`` (path in the package → file) and its copyright."""
    dpkg_deb = need_tool("dpkg-deb", "dpkg")
    root = tmp / f"pkg-{package}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(f"Package: {package}\nVersion: 1.0-1\nArchitecture: amd64\n"
                                             "Maintainer: t <t@example.org>\nDescription: test\n")
    doc = root / "usr" / "share" / "doc" / package
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(f"{package}: MIT\n")
    for rel, source in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(source.read_bytes())
    out = tmp / f"{package}_1.0-1_amd64.deb"
    subprocess.run([dpkg_deb, "--root-owner-group", "-b", str(root), str(out)], check=True, capture_output=True)
    return out


def test_grafting_resolves_needed_under_mangled_sonames_with_origin_rpath(tmp_path):
    need_tool("patchelf")
    lib = "usr/lib/x86_64-linux-gnu"
    inner = _cc(tmp_path, "inner", "int inner(void) { return 40; }\n", soname="libinner.so.2")
    (tmp_path / "libinner.so").symlink_to(inner.name)
    dep = _cc(tmp_path, "dep", "int inner(void);\nint dep(void) { return inner() + 1; }\n", "-linner", soname="libdep.so.1")
    (tmp_path / "libdep.so").symlink_to(dep.name)
    user_dir = tmp_path / "wheel" / "pkg" / "lib"
    user_dir.mkdir(parents=True)
    user = _cc(tmp_path, "user", "int dep(void);\nint user(void) { return dep() + 1; }\n", "-ldep")
    user = Path(user.rename(user_dir / "libuser.so"))
    elf.set_rpath(user, "$ORIGIN")
    debs = [({"package": "libdep1", "version": "1.0-1"}, _deb(tmp_path, "libdep1", {f"{lib}/libdep.so.1": dep})),
            ({"package": "libinner2", "version": "1.0-1"}, _deb(tmp_path, "libinner2", {f"{lib}/libinner.so.2": inner}))]
    log = io.StringIO()
    available = graft.unpack(debs, tmp_path / "unpacked", log)
    assert set(available) == {"libdep.so.1", "libinner.so.2"}
    # before: the wheel alone does not resolve libdep.so.1, and the tag check says so
    with pytest.raises(CheckFailed, match=re.escape("libuser.so needs libdep.so.1")):
        elf.platform_tag([elf.inspect(user)]).check("pkg")
    done = graft.graft([user], available, {"libdep1", "libinner2"}, {}, set(), tmp_path / "scratch", log)
    # auditwheel's scheme: the name, 8 hex of the library file's sha256, the version
    assert done.renamed["libdep.so.1"] == f"libdep-{file_sha256(available['libdep.so.1'].path)[:8]}.so.1"
    assert re.match(r"^libinner-[0-9a-f]{8}\.so\.2$", done.renamed["libinner.so.2"])
    assert set(done.renamed) == {"libdep.so.1", "libinner.so.2"}
    assert elf.inspect(user).needed == (done.renamed["libdep.so.1"],)  # the user's DT_NEEDED now names the graft
    for mangled, (original, copy) in done.copies.items():
        info = elf.inspect(copy)
        assert info.soname == mangled and info.runpath == "$ORIGIN" and mangled != original.soname
        assert copy.name == mangled and original.copyright is not None
    grafted_dep = elf.inspect(done.copies[done.renamed["libdep.so.1"]][1])
    assert grafted_dep.needed == (done.renamed["libinner.so.2"],)  # the closure: libdep's own dependency too
    assert done.report()["libdep.so.1"] == {"file": done.renamed["libdep.so.1"], "package": "libdep1", "version": "1.0-1"}
    for _lib, copy in done.copies.values():
        copy.rename(user_dir / copy.name)
    infos = [elf.inspect(p) for p in sorted(user_dir.iterdir())]
    tag = elf.platform_tag(infos)
    tag.check("pkg")  # everything resolves inside the wheel now
    assert tag.tag.startswith("manylinux_2_")
    # and it loads from there with no LD_LIBRARY_PATH and no host copy of libdep or libinner
    code = f"import ctypes; print(ctypes.CDLL({str(user)!r}).user())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stdout.strip() == "42", out.stderr


def test_grafts_a_required_wheel_carries_are_renamed_not_copied(tmp_path):
    need_tool("patchelf")
    dep = _cc(tmp_path, "dep", "int dep(void) { return 1; }\n", soname="libdep.so.1")
    (tmp_path / "libdep.so").symlink_to(dep.name)
    user = _cc(tmp_path, "user", "int dep(void);\nint user(void) { return dep(); }\n", "-ldep")
    done = graft.graft([user], {}, set(), {"libdep.so.1": "libdep-0123abcd.so.1"}, {"libdep-0123abcd.so.1"},
                       tmp_path / "scratch", io.StringIO())
    assert not done.copies and elf.inspect(user).needed == ("libdep-0123abcd.so.1",)
    assert not elf.platform_tag([elf.inspect(user)], provided=["libdep-0123abcd.so.1"]).external


def test_linux_x86_64_is_never_indexed(tmp_path):
    wheel = write_wheel(tmp_path / "dist", Metadata(name="local-demo", version="1.0"), "py3-none-linux_x86_64", [],
                        source_date_epoch=1700000000)
    with pytest.raises(CheckFailed, match=re.escape("local_demo-1.0-py3-none-linux_x86_64.whl is tagged linux_x86_64, which is never published")):
        index.write_index([wheel], tmp_path / "index", "gfx90a")
    fine = write_wheel(tmp_path / "dist2", Metadata(name="tagged-demo", version="1.0"), "py3-none-manylinux_2_39_x86_64", [],
                       source_date_epoch=1700000000)
    assert [i.filename for i in index.write_index([fine], tmp_path / "index2", "gfx90a")] == [fine.name]


def test_glibc_floor_check_names_library_and_symbol(tmp_path):
    out = tmp_path / "out" / "lib"
    out.mkdir(parents=True)
    # arc4random is GLIBC_2.36 (Debian 12's glibc): newer than a 2.33 floor
    _cc(out, "rand", "#include <stdlib.h>\nunsigned r(void) { return arc4random(); }\n")
    (out / "rand.c").unlink()
    with pytest.raises(CheckFailed, match=r"build:demo@gfx90a: lib/librand.so needs arc4random@GLIBC_2.36, newer than "
                                          r"the release's glibc floor 2.33"):
        elf.check_glibc_floor(tmp_path / "out", "2.33", "build:demo@gfx90a")
    elf.check_glibc_floor(tmp_path / "out", "2.36", "build:demo@gfx90a")  # at the floor: fine
    elf.check_glibc_floor(tmp_path / "out", "", "build:demo@gfx90a")  # no floor declared: unchecked


def test_default_release_pins_its_grafts_and_floor_and_plans_their_fetches():
    registry = load_registry()
    manifest = load_manifest(ROOT / "manifests" / "releases" / "default.toml", registry)
    assert manifest.glibc_floor == "2.39"
    by_wheel = {g.package: g.wheel for g in manifest.grafts}
    assert by_wheel["libllvm22"] == "core" and by_wheel["libfmt11"] == "libraries"
    assert all(g.source.get("suite") in ("sid", "trixie") and len(g.source.get("sha256")) == 64 for g in manifest.grafts)
    host = Host(tools=frozenset({"patchelf", "dpkg-deb", "apt-get", "pip"}),
                mirrored=frozenset(str(g.source.get("sha256")) for g in manifest.grafts))
    actions = make_plan(manifest, registry, ["gfx1151"], host=host, stages=STAGES).by_id()
    core = actions["package:rocm-sdk-core"]
    assert "fetch:deb:libllvm22" in core.deps and "fetch:deb:libfmt11" not in core.deps
    assert dict(core.inputs)["graft_wheels"]["libllvm22"] == "core"
    libraries = actions["package:rocm-sdk-libraries@gfx1151"]
    assert "fetch:deb:libfmt11" in libraries.deps and not actions["fetch:deb:libfmt11"].blocked
    assert "graft_wheels" not in dict(actions["package:rocm-sdk-devel"].inputs)  # devel's key does not move
    assert dict(actions["build:cairn-smoke@gfx1151"].inputs)["glibc_floor"] == "2.39"


def test_graft_entry_naming_an_unknown_wheel_is_refused(tmp_path):
    text = (ROOT / "manifests" / "releases" / "default.toml").read_text().replace('wheel = "libraries" }', 'wheel = "device" }', 1)
    path = tmp_path / "release.toml"
    path.write_text(text)
    with pytest.raises(ManifestError, match="wheel 'device' is not an SDK wheel that grafts"):
        load_manifest(path, load_registry())


def test_reviewed_symbol_version_rewrite_lowers_the_tag_and_still_loads(tmp_path):
    # exp@GLIBC_2.29 (the new-errno-handling exp, like sid's sqrtf@GLIBC_2.43) → the old exp@GLIBC_2.2.5
    lib = _cc(tmp_path, "expo", "#include <math.h>\n#include <string.h>\ndouble e(double x) { return exp(x); }\n"
                                "size_t n(const char *s) { return strlen(s); }\n", "-lm")
    before = elf.inspect(lib)
    assert ("libm.so.6", "GLIBC_2.29") in before.versions
    with pytest.raises(CheckFailed, match="also covers exp, which the reviewed list does not name"):
        elf.rewrite_symbol_version(lib, "libm.so.6", "GLIBC_2.29", "GLIBC_2.2.5", ["log"])
    assert elf.rewrite_symbol_version(lib, "libm.so.6", "GLIBC_2.29", "GLIBC_2.2.5", ["exp"]) == ["exp"]
    after = elf.inspect(lib)
    assert ("libm.so.6", "GLIBC_2.29") not in after.versions and ("libm.so.6", "GLIBC_2.2.5") in after.versions
    assert after.glibc_minor < 29
    with pytest.raises(CheckFailed, match=re.escape("does not ask libm.so.6 for GLIBC_2.29")):
        elf.rewrite_symbol_version(lib, "libm.so.6", "GLIBC_2.29", "GLIBC_2.2.5", ["exp"])
    code = f"import ctypes; f = ctypes.CDLL({str(lib)!r}).e; f.restype = ctypes.c_double; f.argtypes = [ctypes.c_double]; print(f(1.0))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("2.71828"), out.stderr


def test_reviewed_rename_turns_a_fortified_call_into_the_plain_one_and_still_runs(tmp_path):
    # the shape of RCCL's __inet_ntop_chk@GLIBC_2.42: a *_chk call (here __memcpy_chk@GLIBC_2.3.4, which this
    # host's glibc has) becomes the plain call it checks, under an older version; the copy still works
    lib = _cc(tmp_path, "fortified", "#include <string.h>\nstatic char buf[16];\n"
                                     "int copy(const char *s, size_t n) { memcpy(buf, s, n); return buf[n - 1]; }\n",
                                     "-O2", "-D_FORTIFY_SOURCE=2")
    before = elf.inspect(lib)
    assert ("libc.so.6", "GLIBC_2.3.4") in before.versions, before.versions
    with pytest.raises(CheckFailed, match="renames memmove, which its symbols list does not name"):
        elf.rewrite_symbol_version(lib, "libc.so.6", "GLIBC_2.3.4", "GLIBC_2.2.5", ["__memcpy_chk"], {"memmove": "x"})
    with pytest.raises(CheckFailed, match="does not fit over the old name"):
        elf.rewrite_symbol_version(lib, "libc.so.6", "GLIBC_2.3.4", "GLIBC_2.2.5", ["__memcpy_chk"],
                                   {"__memcpy_chk": "a_name_longer_than_the_old_one"})
    assert elf.rewrite_symbol_version(lib, "libc.so.6", "GLIBC_2.3.4", "GLIBC_2.2.5", ["__memcpy_chk"],
                                      {"__memcpy_chk": "memcpy"}) == ["__memcpy_chk"]
    after = elf.inspect(lib)
    assert ("libc.so.6", "GLIBC_2.3.4") not in after.versions
    dynsym = subprocess.run([need_tool("objdump", "binutils"), "-T", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "__memcpy_chk" not in dynsym and re.search(r"\(GLIBC_2\.2\.5\)\s+memcpy$", dynsym, re.M), dynsym
    code = f"import ctypes; print(ctypes.CDLL({str(lib)!r}).copy(b'rocm', 4))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "109", out.stderr
