"""The gfx target registry answers what every stage asks of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cairn.model.targets import TargetId, load_registry

REG = load_registry()


def test_registry_holds_every_target_of_the_reference_table() -> None:
    expected = {"gfx900", "gfx90c", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1250", "gfx1010", "gfx1011",
                "gfx1012", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
                "gfx1200", "gfx1201"} | {f"gfx103{n}" for n in range(7)}
    assert set(REG.targets) == expected


@pytest.mark.parametrize(("family", "members"), [
    ("gfx94X-dcgpu", ("gfx942",)),
    ("gfx110X-dgpu", ("gfx1100", "gfx1101", "gfx1102")),
    ("gfx103X-igpu", ("gfx1033", "gfx1035", "gfx1036")),
    ("dcgpu-all", ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1250")),
    ("gfx1151", ("gfx1151",)),  # every target is a family of itself
])
def test_expand(family: str, members: tuple[str, ...]) -> None:
    assert set(REG.expand(family)) == set(members)


def test_unknown_family_suggests_the_closest() -> None:
    with pytest.raises(KeyError, match="did you mean 'gfx94X-dcgpu'"):
        REG.expand("gfx94x-dcgpu")


def test_families_of_a_target() -> None:
    assert REG.families_of("gfx1151") == ("gfx1151", "gfx115X-all", "gfx115X-igpu", "igpu-all")


def test_target_id_parses_in_any_order_and_prints_canonically() -> None:
    tid = TargetId.parse("gfx90a:xnack-:sramecc+")
    assert str(tid) == "gfx90a:sramecc+:xnack-"
    assert tid.feature("xnack") is False
    with pytest.raises(ValueError, match="unknown target feature"):
        TargetId.parse("gfx90a:wavefrontsize64+")
    with pytest.raises(ValueError, match="has no 'xnack' feature"):
        REG.parse_target_id("gfx1100:xnack+")


@pytest.mark.parametrize(("code_object", "device", "via"), [
    ("gfx90a", "gfx90a:sramecc+:xnack-", "exact"),
    ("gfx90a:xnack-", "gfx90a:sramecc+:xnack-", "exact"),
    ("gfx90a:xnack+", "gfx90a:sramecc+:xnack-", None),
    ("gfx90a:xnack+", "gfx90a", "exact"),  # a bare query leaves the setting open
    ("gfx11-generic", "gfx1151", "gfx11-generic"),
    ("gfx9-4-generic:sramecc+:xnack-", "gfx942:sramecc+:xnack-", "gfx9-4-generic"),
    ("gfx9-4-generic", "gfx90a", None),  # gfx90a is in no generic family
    ("gfx1030", "gfx1031", None),  # the override trick is not compatibility
    ("amdgcnspirv", "gfx1201", "spirv"),
])
def test_can_run(code_object: str, device: str, via: str | None) -> None:
    match = REG.can_run(code_object, device)
    assert (match.via if match else None) == via


def test_machine_values_and_kfd_versions_round_trip() -> None:
    assert REG.name_for_mach(0x04C) == "gfx942"
    assert REG.name_for_mach(0x054) == "gfx11-generic"
    assert REG.target_for_kfd_version(90010).name == "gfx90a"
    assert REG.target("gfx1151").override_version == "11.5.1"


def test_project_exclusions() -> None:
    assert REG.targets_for_project("gfx103X-all", "hipBLASLt") == ()
    assert "gfx1100" in REG.targets_for_project("gfx110X-all", "hipBLASLt")


def test_no_module_hard_codes_a_gfx_list(repo_root: Path) -> None:
    """The registry is the only place gfx lists live (two or more gfx names in one line of code)."""
    offenders = []
    for path in (repo_root / "src").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if len(re.findall(r"[\"']gfx[0-9][0-9a-z]*[\"']", code)) >= 2:
                offenders.append(f"{path.relative_to(repo_root)}:{n}")
    assert offenders == []
