"""The matrix document: round trip, JSON Schema agreement, strict loading, range and gate helpers."""

from __future__ import annotations

import json

import jsonschema
import pytest

from cairn.errors import InputError
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
    from_dict,
    load_matrix,
    schema_path,
)


def sample() -> Matrix:
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


def test_round_trip_is_byte_stable(tmp_path):
    matrix = sample()
    path = tmp_path / "matrix.json"
    path.write_text(matrix.to_json())
    again = load_matrix(path)
    assert again == matrix
    assert again.to_json() == matrix.to_json()
    assert load_matrix(path.as_uri()) == matrix


def test_document_satisfies_the_json_schema():
    schema = json.loads(schema_path().read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(json.loads(sample().to_json()), schema)


def test_cell_id_gates_and_ranges():
    cell = sample().cells[0]
    assert cell.id == "5.2.3/gfx90a/debian-12/py3.11/cairn-smoke-0.1.0"
    assert cell.passed(["static-coverage"])
    assert not cell.passed(["static-coverage", "gpu"])
    assert [g.gate for g in cell.blocking(["gpu", "in-container"])] == ["gpu", "in-container"]
    assert cell.gate("in-container").status == "not-run"
    assert cell.requirements.driver.contains("6.4")
    assert not cell.requirements.driver.contains("6.5.0")
    assert cell.requirements.kernel.contains("6.1.0-18-amd64")
    assert not cell.requirements.kernel.contains("5.10.0-28-amd64")
    assert cell.images[0].pinned == "127.0.0.1:5000/cairn/smoke@sha256:" + "b" * 64


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["cells"][0].update(gpu="x"), "unknown key 'gpu'"),
    (lambda d: d["cells"][0]["gates"][0].update(status="ok"), "is not one of passed, failed, not-run"),
    (lambda d: d["cells"][0]["wheels"][0].update(sha256="abc"), "is not 64 lower-case hex digits"),
    (lambda d: d.update(schema="cairn.matrix/v0"), "schema is"),
    (lambda d: d["cells"][0].update(id="other"), "but its fields say"),
])
def test_bad_documents_are_rejected_with_the_place(mutate, message):
    data = json.loads(sample().to_json())
    mutate(data)
    with pytest.raises(InputError, match=message):
        from_dict(data, "m.json")
