"""Where the checkout's files are, and the names of the releases and stores the tests share.

Test modules sit one or two folders below tests/; they find the checkout from here, never by counting their own
``__file__``'s parents, so a module can move between folders without losing its files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# The Debian 12 ROCm 5.2.3 release: built on the host toolchain in minutes, so most tests build slices of it;
# the default release (ROCm 7.2.4, default.toml) is built in the pinned build image by its own tests.
LEGACY = "rocm-5.2.3"
LEGACY_MANIFEST = ROOT / "manifests" / "releases" / f"{LEGACY}.toml"
# the default slice (conftest's ``default_slice``): the family it is built for, and the record of its own build
DEFAULT_SLICE_FAMILY = "gfx1151"
SLICE_RECORD = "slice-build.json"
