"""Helpers the test modules share: requirements (``need`` …), the checkout's paths, the ``cairn`` command runner,
loopback servers and the fixture writers (fat binaries, host trees, manifests' mutations, llama sdists, S3).

A test module imports what it shares from here, never from another test module; pytest fixtures shared across
folders live in tests/conftest.py (some defined in a support module and registered there)."""

from __future__ import annotations

from support.cli import cairn
from support.paths import DEFAULT_SLICE_FAMILY, LEGACY, LEGACY_MANIFEST, ROOT, SLICE_RECORD, TESTS
from support.requirements import IN_CI, in_ci, need, need_module, need_tool, requires

__all__ = ["DEFAULT_SLICE_FAMILY", "IN_CI", "LEGACY", "LEGACY_MANIFEST", "ROOT", "SLICE_RECORD", "TESTS", "cairn",
           "in_ci", "need", "need_module", "need_tool", "requires"]
