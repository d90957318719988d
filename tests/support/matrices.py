"""Matrix documents the tests write: a one-cell sample, and the cells and per-release matrices the doctor's
advice reads (a Torch cell per target with its gates, published as ``<root>/<version>/matrix.json``)."""

from __future__ import annotations

from pathlib import Path

from cairn.matrix.model import (
    Cell,
    Framework,
    GateResult,
    ImageRef,
    Matrix,
    Release,
    Requirements,
    VersionRange,
    WheelFile,
)
from cairn.model.targets import load_registry


def sample() -> Matrix:
    """A matrix of one gfx90a cell with every field set: what the model, io and bad-input tests read."""
    cell = Cell(
        release="5.2.3", channel="dev", gfx_target="gfx90a", family="gfx90a", products=("MI210", "MI250"),
        os="debian-12", python="3.11", framework=Framework("cairn-smoke", "0.1.0"),
        index_url="simple/gfx90a/",
        wheels=(WheelFile("cairn_smoke-0.1.0-py3-none-linux_x86_64.whl", "blobs/x.whl", "a" * 64, 123),),
        images=(ImageRef("127.0.0.1:5000/cairn/smoke:5.2.3-gfx90a", "sha256:" + "b" * 64),),
        gates=(GateResult("static-coverage", "passed"), GateResult("gpu", "not-run", "no GPU runner")),
        requirements=Requirements(VersionRange("5.18", "6.5"), VersionRange("5.15", "", "LTS kernels")),
    )
    release = Release("cairn-default", "5.2.3", "dev", 1700000000, "c" * 64, (("dev", ("static-coverage",)),))
    return Matrix(release, (cell,))


# the doctor-advice cells: one image digest, the kernels they support, the gates each channel requires
DIGEST = "sha256:" + "ab" * 32
KERNELS = VersionRange("5.15", "6.12")
REQUIRED = (("dev", ("static-coverage",)), ("stable", ("static-coverage", "in-container", "gpu")))


def cell(version: str, target: str, *, channel: str = "stable", python: str = "3.12", gpu: str = "passed",
         kernel: VersionRange = KERNELS) -> Cell:
    gates = (GateResult("static-coverage", "passed"), GateResult("in-container", "passed"),
             GateResult("gpu", gpu, "" if gpu == "passed" else "no runner for this target"))
    return Cell(
        release=version, channel=channel, gfx_target=target, family=target, products=load_registry().target(target).products,
        os="ubuntu-24.04", python=python, framework=Framework("torch", "2.12.0"), index_url=f"simple/{target}/",
        images=(ImageRef(f"registry.example/cairn/pytorch:{version}-{target}", DIGEST),), gates=gates,
        requirements=Requirements(VersionRange("6.8", "6.13"), kernel),
    )


def publish(root: Path, version: str, cells: list[Cell]) -> Path:
    """``cells`` as release ``version``'s stable matrix under ``root/version`` (unsigned: the doctor reads it)."""
    out = root / version
    out.mkdir(parents=True)
    matrix = Matrix(Release("cairn-prod", version, "stable", 1700000000, "", REQUIRED), tuple(cells))
    (out / "matrix.json").write_text(matrix.to_json())
    return out
