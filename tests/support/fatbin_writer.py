"""A small offload-bundle writer for tests: plain and CCOB v1/v2/v3 bundles wrapped in a real ELF file.

Written from the format description (hip-fatbin-format.md), independently of the reader under test.
Code objects are minimal AMDGPU ELF headers whose e_flags follow the target ID, unless told otherwise.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import zstandard

from cairn.model.targets import TargetId, load_registry

PAGE = 4096
HOST_ID = "host-x86_64-unknown-linux-gnu"
_SETTING = {None: 0x100, True: 0x300, False: 0x200}  # any / on / off (code object v4+)


def device_id(target: str) -> str:
    return f"hipv4-amdgcn-amd-amdhsa--{target}"


def code_object(target: str, *, mach: int | None = None, xnack: int | None = None, size: int = 256) -> bytes:
    """A minimal AMDGPU ELF64 code object for ``target``; ``mach``/``xnack`` override to make liars."""
    registry = load_registry()
    tid = TargetId.parse(target)
    features = registry.processor_features(tid.processor)
    if mach is None:
        mach = next(
            value
            for value, name in ((v, registry.name_for_mach(v)) for v in range(0x100))
            if name == tid.processor
        )
    flags = mach
    if "xnack" in features:
        flags |= _SETTING[tid.feature("xnack")] if xnack is None else xnack
    if "sramecc" in features:
        flags |= _SETTING[tid.feature("sramecc")] << 2
    ident = b"\x7fELF" + bytes([2, 1, 1, 64, 2]) + bytes(7)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 224, 1, 0, 0, 0, flags, 64, 0, 0, 64, 0, 0)
    assert len(header) == 64
    return header + bytes(size - len(header))


def plain_bundle(entries: list[tuple[str, bytes]], *, host: bool = True) -> bytes:
    """``__CLANG_OFFLOAD_BUNDLE__`` with a host entry (size 0) first, code objects 4096-aligned."""
    items = ([(HOST_ID, b"")] if host else []) + entries
    table_size = 32 + sum(24 + len(name) for name, _ in items)
    offset = _align(table_size)
    records, blobs = [], bytearray()
    cursor = offset
    for name, blob in items:
        records.append(struct.pack("<QQQ", cursor, len(blob), len(name)) + name.encode())
        if blob:
            blobs += blob + bytes(_align(len(blob)) - len(blob))
            cursor += _align(len(blob))
    data = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(items)) + b"".join(records)
    data += bytes(offset - len(data)) + blobs
    last_end = max((struct.unpack_from("<Q", r)[0] + len(b) for r, (_, b) in zip(records, items, strict=True)), default=len(data))
    return bytes(data[: max(last_end, table_size)])


def bundle_for(targets: list[str]) -> bytes:
    return plain_bundle([(device_id(t), code_object(t)) for t in targets])


def ccob(bundle: bytes, *, version: int = 3, method: str = "zstd", hash_value: bytes | None = None) -> bytes:
    """Compress a plain bundle as clang's bundler does (method 0 zlib, 1 zstd)."""
    payload = zlib.compress(bundle, 6) if method == "zlib" else zstandard.ZstdCompressor(level=3).compress(bundle)
    digest = hash_value if hash_value is not None else hashlib.md5(bundle).digest()[:8]
    code = {"zlib": 0, "zstd": 1}[method]
    if version == 1:
        header = b"CCOB" + struct.pack("<HHI", 1, code, len(bundle)) + digest
    elif version == 2:
        header = b"CCOB" + struct.pack("<HHII", 2, code, 24 + len(payload), len(bundle)) + digest
    else:
        header = b"CCOB" + struct.pack("<HHQQ", 3, code, 32 + len(payload), len(bundle)) + digest
    return header + payload


def section(bundles: list[bytes]) -> bytes:
    """Concatenate bundles at 4096-aligned offsets with zero padding, as the linker does."""
    out = bytearray()
    for bundle in bundles:
        out += bytes(_align(len(out)) - len(out)) + bundle
    return bytes(out)


def _align(value: int) -> int:
    return (value + PAGE - 1) // PAGE * PAGE


_C_SOURCE = 'const char cairn_marker[] = "%s";\nint cairn_fn(void) { return 42; }\n'


def write_elf(
    out: Path,
    fatbin: bytes | None,
    *,
    wrappers: int | None = None,
    wrapper_magic: bytes = b"FPIH",
    data_string: str = "plain data",
    kpack_ref: bool = False,
) -> Path:
    """A real x86-64 shared object (gcc) with ``.hip_fatbin`` and ``.hipFatBinSegment`` added by objcopy."""
    work = out.parent / (out.name + ".d")
    work.mkdir(parents=True, exist_ok=True)
    (work / "lib.c").write_text(_C_SOURCE % data_string)
    gcc = shutil.which("gcc") or "gcc"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", work / "lib.so", work / "lib.c"], check=True)
    cmd = ["objcopy"]
    if fatbin is not None:
        (work / "fatbin").write_bytes(fatbin)
        cmd += ["--add-section", f".hip_fatbin={work / 'fatbin'}", "--set-section-flags", ".hip_fatbin=alloc,readonly,data",
                "--set-section-alignment", ".hip_fatbin=4096"]
    count = wrappers if wrappers is not None else (1 if fatbin is not None else 0)
    if count:
        (work / "wrappers").write_bytes(b"".join(wrapper_magic + struct.pack("<IQQ", 1, 0, 0) for _ in range(count)))
        cmd += ["--add-section", f".hipFatBinSegment={work / 'wrappers'}", "--set-section-flags", ".hipFatBinSegment=alloc,data"]
    if kpack_ref:
        (work / "ref").write_bytes(b"\x82\xabkernel_name\xa3lib")
        cmd += ["--add-section", f".rocm_kpack_ref={work / 'ref'}"]
    subprocess.run([*cmd, work / "lib.so", out], check=True)
    shutil.rmtree(work)
    return out


_LINKED = r"""
#include <stddef.h>
__asm__(%(asm)s);
struct wrapper { unsigned magic, version; const void *binary; void *reserved; };
%(externs)s
__attribute__((section(".hipFatBinSegment"), used)) struct wrapper cairn_wrappers[] = { %(wrappers)s };
const void *cairn_stray = %(stray)s;
const char cairn_marker[] = "linked";
const void *cairn_bundle(int i) { return cairn_wrappers[i].binary; }
int cairn_fn(void) { return 42; }
"""


def write_linked_elf(out: Path, bundles: list[bytes], *, linker: str = "bfd", relr: bool = False,
                     stray: int | None = None, executable: bool = False) -> Path:
    """A shared object linked as hipcc links one: each bundle a ``__hip_fatbin`` object in an allocated
    ``.hip_fatbin`` section (4096-aligned, so the linker puts it in the read-only segment with .eh_frame
    behind it), one wrapper per bundle whose pointer the linker turns into a relative relocation.
    ``cairn_bundle(i)`` returns wrapper i's pointer once loaded; ``stray`` adds one more pointer, to byte
    ``stray`` of the first bundle (a reference into the section that is not a bundle start). ``executable``:
    a PIE program instead, printing each wrapper's first 24 bytes."""
    work = out.parent / (out.name + ".d")
    work.mkdir(parents=True, exist_ok=True)
    asm = ['.pushsection .hip_fatbin,"a",@progbits']
    for n, bundle in enumerate(bundles):
        (work / f"b{n}.bin").write_bytes(bundle)
        asm += [".p2align 12", f".type __hip_fatbin_{n}, @object", f".size __hip_fatbin_{n}, {len(bundle)}",
                f"__hip_fatbin_{n}:", f'.incbin "{work / f"b{n}.bin"}"']
    asm.append(".popsection")
    source = _LINKED % {
        "asm": "\n".join(json.dumps(line + "\n") for line in asm),
        "externs": "\n".join(f'extern const char __hip_fatbin_{n}[] __attribute__((visibility("hidden")));' for n in range(len(bundles))),
        "wrappers": ", ".join(f"{{0x48495046, 1, __hip_fatbin_{n}, NULL}}" for n in range(len(bundles))),
        "stray": "NULL" if stray is None else f"__hip_fatbin_0 + {stray}",
    }
    if executable:
        source = "#include <stdio.h>\n" + source + (
            "int main(void) { for (size_t i = 0; i < sizeof cairn_wrappers / sizeof *cairn_wrappers; i++)"
            ' printf("%.24s\\n", (const char *) cairn_bundle((int) i)); return cairn_fn() == 42 ? 0 : 1; }\n')
    (work / "lib.c").write_text(source)
    cmd = [shutil.which("gcc") or "gcc", "-pie" if executable else "-shared", "-fPIC", "-o", str(out), str(work / "lib.c")]
    if linker != "bfd":  # a directory holding ld.lld (Debian: /usr/lib/llvm-15/bin)
        cmd += ["-fuse-ld=lld", f"-B{linker}"]
    if relr:
        cmd.append("-Wl,-z,pack-relative-relocs")
    subprocess.run(cmd, check=True, capture_output=True)
    shutil.rmtree(work)
    return out
