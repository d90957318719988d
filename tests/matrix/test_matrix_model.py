"""The matrix document: round trip, JSON Schema agreement, strict loading, range and gate helpers."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from cairn.errors import InputError
from cairn.matrix.model import (
    from_dict,
    load_matrix,
    schema_path,
)
from support.matrices import sample


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


FIX = "fetch the matrix again; it must be the file cairn publish wrote"


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["cells"][0].update(gpu="x"), "m.json: unknown key 'gpu' in 'cells[0]' — use one of the known keys: "),
    (lambda d: d["cells"][0].update(famly="x"), "m.json: unknown key 'famly' in 'cells[0]' — did you mean 'family'?"),
    (lambda d: d["cells"][0]["gates"][0].update(status="ok"),
     f"m.json: 'cells[0].gates[0].status' is 'ok', not one of passed, failed, not-run — {FIX}"),
    (lambda d: d["cells"][0]["gates"][0].update(status="pased"),
     "m.json: 'cells[0].gates[0].status' is 'pased', not one of passed, failed, not-run — did you mean 'passed'?"),
    (lambda d: d["cells"][0]["wheels"][0].update(sha256="abc"),
     f"m.json: 'cells[0].wheels[0].sha256' is 'abc', not 64 lower-case hex digits — {FIX}"),
    (lambda d: d["release"].update(source_date_epoch="1700000000"),
     f"m.json: 'release.source_date_epoch' is a string, not an integer — {FIX}"),
    (lambda d: d["cells"][0].update(products=["mi210", 3]), f"m.json: 'cells[0].products[1]' is an integer, not a string — {FIX}"),
    (lambda d: d["cells"][0].pop("os"), f"m.json: 'cells[0].os' is missing — {FIX}"),
    (lambda d: d["cells"][0]["requirements"]["driver"].update(minimum="new"),
     "m.json: 'cells[0].requirements.driver.minimum' is 'new', not a version — write e.g. 5.2.3"),
    (lambda d: d.update(schema="cairn.matrix/v0"),
     "m.json: schema is 'cairn.matrix/v0', not 'cairn.matrix/v1' — use a cairn that reads this matrix version"),
    (lambda d: d["cells"][0].update(id="other"), "m.json: cells[0].id is 'other' but its fields say "),
])
def test_bad_documents_are_rejected_with_the_place(mutate, message):
    data = json.loads(sample().to_json())
    mutate(data)
    with pytest.raises(InputError) as caught:
        from_dict(data, "m.json")
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_damaged_matrix_file_is_one_line_at_the_place_the_json_breaks(tmp_path):
    path = tmp_path / "matrix.json"
    path.write_text(sample().to_json()[:-40])
    with pytest.raises(InputError) as caught:
        load_matrix(path)
    line = str(caught.value)
    assert re.fullmatch(rf"{re.escape(str(path))}:\d+:\d+: cannot read the matrix: not JSON \(.+\) — {FIX}", line), line
