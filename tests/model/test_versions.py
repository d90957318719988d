"""Versions that sort: SDK channel segments and framework local labels, with packaging and with real pip."""

from __future__ import annotations

import pytest
from packaging.version import Version

from cairn.errors import InputError
from cairn.model.wheel_versions import extra_name, framework_version, rocm_local, sdk_of, sdk_version

EPOCH = 1784073600  # 2026-07-15


def test_sdk_version_per_channel():
    assert sdk_version("7.14.0", "stable", EPOCH) == "7.14.0"
    assert sdk_version("7.14.0rc2", "prerelease", EPOCH) == "7.14.0rc2"
    assert sdk_version("7.14.0", "prerelease", EPOCH) == "7.14.0rc1"
    assert sdk_version("7.14.0", "nightly", EPOCH) == "7.14.0a20260715"
    assert sdk_version("5.2.3", "dev", 1700000000) == "5.2.3.dev1700000000"


def test_channels_sort_dev_nightly_rc_final():
    ordered = [sdk_version("7.14.0", c, EPOCH) for c in ("dev", "nightly", "prerelease", "stable")]
    assert [Version(v) for v in ordered] == sorted(Version(v) for v in ordered)


def test_stable_rejects_prerelease_version():
    with pytest.raises(InputError, match=r"stable release version '7\.14\.0rc1' has a pre/dev segment"):
        sdk_version("7.14.0rc1", "stable", EPOCH)


def test_framework_local_sorts_numerically_across_majors():
    old, new = framework_version("2.12.0", "7.14.0"), framework_version("2.12.0", "10.1.0")
    assert (old, new) == ("2.12.0+rocm.7.14.0", "2.12.0+rocm.10.1.0")
    assert Version(new) > Version(old)
    # the scheme AMD used sorts the wrong way round (TheRock#7183)
    assert Version("2.12.0+rocm10.1.0") < Version("2.12.0+rocm7.14.0")


def test_upgrade_sequence_never_goes_backwards():
    releases = ["6.4.0", "7.2.0", "7.9.0", "7.14.0", "7.15.0", "10.0.0", "10.1.0", "10.10.0"]
    versions = [Version(framework_version("2.12.0", r)) for r in releases]
    assert versions == sorted(versions)
    nightlies = [sdk_version("10.1.0", "nightly", EPOCH + day * 86400) for day in range(0, 40, 7)]
    locals_ = [Version(framework_version("2.13.0", n)) for n in nightlies]
    assert locals_ == sorted(locals_)


def test_local_label_round_trips():
    for sdk in ("7.14.0", "10.1.0a20260811", "7.14.0rc2", "5.2.3.dev1700000000"):
        assert sdk_of(framework_version("2.12.0", sdk)) == sdk
    assert rocm_local("10.1.0a20260811") == "rocm.10.1.0.a.20260811"
    assert sdk_of("2.12.0+rocm7.14.0") is None


def test_extras_are_normalized():
    assert extra_name("gfx94X-dcgpu") == "gfx94x-dcgpu"
