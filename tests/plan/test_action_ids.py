"""Action ids are built and read by one pair of functions: no stage splits an id's text itself."""

from __future__ import annotations

import re

import pytest

from cairn.plan.ids import ActionRef, GateRef, action_id, gate_action_id, parse_action_id, parse_gate_id
from support import ROOT

SRC = ROOT / "src" / "cairn"


@pytest.mark.parametrize(("text", "ref"), [
    ("image:runtime@gfx1100", ActionRef("image", "runtime", "gfx1100")),
    ("gate:static-coverage:runtime@gfx942", ActionRef("gate", "static-coverage:runtime", "gfx942")),
    ("package:rocm-sdk-libraries@gfx110X-dgpu", ActionRef("package", "rocm-sdk-libraries", "gfx110X-dgpu")),
    ("assemble:sdk", ActionRef("assemble", "sdk")),
    ("fetch:deb:librocm-core1", ActionRef("fetch", "deb:librocm-core1")),
])
def test_an_id_reads_back_into_its_parts_and_builds_again(text: str, ref: ActionRef) -> None:
    assert parse_action_id(text) == ref
    assert str(ref) == action_id(ref.kind, ref.name, ref.where) == text


def test_text_that_is_no_id_is_refused() -> None:
    for text in ("", "runtime", ":x", "image:"):
        with pytest.raises(ValueError, match="not an action id"):
            parse_action_id(text)


def test_a_gate_id_reads_back_into_gate_image_and_target() -> None:
    ref = parse_gate_id("gate:static-coverage:llama-cpp@gfx1151")
    assert ref == GateRef("static-coverage", "llama-cpp", "gfx1151")
    assert str(ref) == gate_action_id("static-coverage", "llama-cpp", "gfx1151") == "gate:static-coverage:llama-cpp@gfx1151"
    for text in ("image:runtime@gfx1100", "gate:static-coverage@gfx1100", "gate:gpu:runtime"):
        with pytest.raises(ValueError, match="not a gate action id"):
            parse_gate_id(text)


def test_no_stage_splits_a_gate_name_itself() -> None:
    """A gate's name is ``<gate>:<image>``; only ``parse_gate_id`` takes it apart."""
    offenders = [f"{path.relative_to(SRC)}:{n}: {line.strip()}" for path in sorted(SRC.rglob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r'\.name\.(?:r?split|r?partition)\(":"', line) and path.name != "ids.py"]
    assert not offenders, "\n".join(offenders)


def test_no_stage_splits_an_action_id_itself() -> None:
    """The review found ``image.id.removeprefix("image:").split("@", 1)`` in 8 places; ids are read here only."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""\.(?:removeprefix\("(?:image|push|gate|package|linkage):"\)|r?split\("@"|r?partition\("@"\))""", line) \
                    and not re.search(r"reference|netloc|\barg\.|\bimage\.partition|\btext\.partition|plan/ids\.py", f"{path} {line}"):
                offenders.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
