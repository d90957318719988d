"""Fuzz the reader: any bytes give bundles or a CorruptBundle, never a traceback and never a made-up target."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.audit import CorruptBundle, NotElf, audit_file
from cairn.audit.bundle import read_bundles
from cairn.model.targets import load_registry
from support.fatbin_writer import bundle_for, ccob, section, write_elf

TARGETS = ["gfx1100", "gfx90a:xnack-", "gfx11-generic"]
SEEDS = [
    section([bundle_for(TARGETS)]),
    section([bundle_for(TARGETS[:1]), bundle_for(TARGETS)]),
    *(section([ccob(bundle_for(TARGETS), version=v, method=m), bundle_for(TARGETS[:2])]) for v in (1, 2, 3) for m in ("zlib", "zstd")),
]


def _read(data: bytes):
    return read_bundles(memoryview(data), 0, len(data), path="fuzz.so", mach_name=load_registry().name_for_mach)


def _check(data: bytes) -> None:
    try:
        bundles = _read(data)
    except CorruptBundle as exc:
        assert str(exc).startswith("fuzz.so: ")
        return
    for bundle in bundles:
        for target in bundle.targets:
            # plain IDs are in the bytes; compressed ones passed the MD5 check, so they are the originals
            assert target in TARGETS or target.encode() in data


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        action = draw(st.sampled_from(["flip", "word", "truncate", "insert"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if action == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "word" or action == "flip":
            value = draw(st.sampled_from([0, 1, 0xFF, 0xFFFFFFFF, 2**63, len(data), len(data) + 1, 4096]))
            data[at : at + 8] = value.to_bytes(8, "little")
        elif action == "truncate":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_sections_never_crash(data: bytes) -> None:
    _check(data)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([b"__CLANG_OFFLOAD_BUNDLE__", b"CCOB", b""]), st.binary(max_size=300))
def test_random_bytes_after_a_magic_never_crash(magic: bytes, tail: bytes) -> None:
    _check(magic + tail)


def test_seeds_are_valid() -> None:
    """The fuzzer starts from sections the reader accepts, so mutations probe real parsing paths."""
    for seed in SEEDS:
        assert {t for b in _read(seed) for t in b.targets} <= set(TARGETS)


_ELF_DIR = Path(tempfile.mkdtemp(prefix="cairn-fuzz-"))
_ELF = write_elf(_ELF_DIR / "seed.so", SEEDS[2], wrappers=2).read_bytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=8))
def test_damaged_elf_headers_never_crash(edits: list[tuple[int, int]]) -> None:
    """Damage the ELF and section headers (start of file and the section table at its end)."""
    data = bytearray(_ELF)
    table = int.from_bytes(data[0x28:0x30], "little")
    for at, value in edits:
        position = at if at < 64 else min(len(data) - 1, table + (at - 64) * 7)
        data[position] = value
    path = _ELF_DIR / "damaged.so"
    path.write_bytes(bytes(data))
    try:
        audit = audit_file(path)
    except (CorruptBundle, NotElf):
        return
    assert set(audit.targets) <= set(TARGETS)
