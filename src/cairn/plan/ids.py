"""Action ids, built and read in one place.

An id is ``<kind>:<name>`` or ``<kind>:<name>@<where>`` — ``image:runtime@gfx1100``, ``push:smoke@gfx90a``,
``gate:static-coverage:runtime@gfx942``, ``package:rocm-sdk-libraries@gfx110X-dgpu`` — where ``where`` is a gfx
target or family. Stages hand each other these ids (an action's dependencies are named by them), so a stage that
needs the image or target behind an id reads it with ``parse_action_id`` instead of splitting the text itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ActionRef:
    kind: str  # before the first ":"
    name: str  # after it, up to the last "@" (a gate's name holds its gate: "static-coverage:runtime")
    where: str = ""  # after the last "@": a gfx target or family; "" when the id names none

    def __str__(self) -> str:
        return action_id(self.kind, self.name, self.where)


def action_id(kind: str, name: str, where: str = "") -> str:
    return f"{kind}:{name}@{where}" if where else f"{kind}:{name}"


@dataclass(frozen=True)
class GateRef:
    """What a gate action's id names: ``gate:<gate>:<image>@<target>``."""

    gate: str  # static-coverage, in-container, gpu, …
    image: str  # the image the gate judges: runtime, smoke, llama-cpp, …
    target: str  # the gfx target

    def __str__(self) -> str:
        return gate_action_id(self.gate, self.image, self.target)


def gate_action_id(gate: str, image: str, target: str) -> str:
    return action_id("gate", f"{gate}:{image}", target)


def parse_gate_id(text: str) -> GateRef:
    """The gate, image and target of a gate action's id; ValueError for any other id."""
    ref = parse_action_id(text)
    gate, sep, image = ref.name.partition(":")
    if ref.kind != "gate" or not sep or not gate or not image or not ref.where:
        raise ValueError(f"not a gate action id: {text!r} (a gate's id is gate:GATE:IMAGE@TARGET)")
    return GateRef(gate, image, ref.where)


def parse_action_id(text: str) -> ActionRef:
    """The parts of an id; ValueError for text that is not one (no kind)."""
    kind, sep, rest = text.partition(":")
    if not sep or not kind or not rest:
        raise ValueError(f"not an action id: {text!r} (an id is KIND:NAME or KIND:NAME@WHERE)")
    name, at, where = rest.rpartition("@")
    return ActionRef(kind, name, where) if at else ActionRef(kind, rest)
