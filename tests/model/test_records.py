"""The records stages hand each other — ``image.json``, ``push.json``, a wheel's ``report.json`` — are read and
written by one typed record each (``cairn.model.records``): a record round-trips to the bytes its writer always
wrote; a damaged one is one line naming the file and the key, from the record reader, from a runner that reads
it and from ``cairn image`` run as a user runs it; each record's committed JSON Schema accepts what the writers
write and rejects what the reader rejects."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from cairn.errors import CairnError, InputError
from cairn.model.records import RECORDS, ImageLayer, ImageRecord, PushRecord, ReportWheel, WheelReport
from support import ROOT, need_module

D = "sha256:" + "d" * 64
LAYERS = (ImageLayer("sha256:" + "1" * 64, "sha256:" + "2" * 64, 1000, 3000),
          ImageLayer("sha256:" + "3" * 64, "sha256:" + "4" * 64, 20, 60))
BASE = ImageRecord(name="base", repo="cairn/base", tags=("trixie-1700000000",), target="", family="", digest=D,
                   config_digest="sha256:" + "c" * 64, layers=LAYERS[:1], labels={"org.opencontainers.image.created": "x"},
                   packages=97)
BUILT = ImageRecord(name="runtime", repo="cairn/rocm", tags=("5.2.3-gfx90a",), target="gfx90a", family="gfx90a", digest=D,
                    config_digest="sha256:" + "c" * 64, layers=LAYERS, labels={}, parent="cairn/base@" + D, rocm="5.2.3",
                    kind="runtime", wheels=({"project": "rocm-sdk", "version": "5.2.3", "filename": "rocm_sdk-5.2.3-py3-none-any.whl",
                                             "sha256": "e" * 64, "size": 1234},))
PUSHED = PushRecord(image="runtime", registry="127.0.0.1:5000", repo="cairn/rocm", tags=("5.2.3-gfx90a",), digest=D,
                    reference="cairn/rocm@" + D, target="gfx90a")
BLOCKED = PushRecord.of_blocked("image:jax@gfx90a", "jax 0.10.0: 7 libraries its wheels link are not in the image")
WHEEL = (ReportWheel("rocm_sdk_libraries_gfx90a-5.2.3-py3-none-linux_x86_64.whl", "f" * 64, 99),)
LIBRARIES = WheelReport(part="libraries", wheels=WHEEL, sdk_version="5.2.3", sonames=("librocblas.so.4",),
                        platform={"tag": "linux_x86_64", "reason": "glibc 2.36", "system_libraries": ["libc.so.6"]},
                        audit={"device_binaries": 3, "dropped_data_files": 0, "targets_everywhere": ["gfx90a"],
                               "coverage": {"gfx90a": {"covered": False, "via": [], "missing": ["lib/librocsparse.so.1"]}},
                               "partial": {"gfx90a": ["lib/librocsparse.so.1"]}})
MIRROR = WheelReport(part="mirror", wheels=WHEEL, project="jax-rocm7-plugin",
                     audit={"device_binaries": 2, "targets_everywhere": ["gfx90a"], "targets_somewhere": ["gfx90a", "gfx942"],
                            "families": {"gfx90a": {"covered": True, "targets": {"gfx90a": {"covered": True, "via": ["gfx90a"]}}},
                                         "gfx110X-dgpu": {"covered": False, "targets": {}}}})
DEVICE = WheelReport(part="device", wheels=WHEEL * 2, family="gfx90a", target="gfx90a", sdk_version="5.2.3",
                     from_wheel="rocm_sdk_libraries_gfx90a.whl", platform={"tag": "linux_x86_64", "reason": "as x"},
                     audit={"partial": {}, "coverage": {}})
META = WheelReport(part="meta-target", wheels=WHEEL, sdk_version="5.2.3", family="gfx90a", target="gfx90a",
                   extras=("gfx90a", "devel"))
ENGINE = WheelReport(part="engine", wheels=WHEEL, tools=(), project="llama-cpp-python", family="gfx90a", targets=("gfx90a",),
                     libraries=("libggml-hip.so",), platform={"tag": "manylinux_2_36_x86_64", "reason": "r", "system_libraries": []})
RECORDS_WRITTEN: list[Any] = [BASE, BUILT, PUSHED, BLOCKED, LIBRARIES, MIRROR, DEVICE, META, ENGINE]


def _id(record: Any) -> str:
    return f"{type(record).__name__}-{getattr(record, 'part', '') or getattr(record, 'name', '') or record.image}"


@pytest.mark.parametrize("record", RECORDS_WRITTEN, ids=_id)
def test_a_record_round_trips_to_its_writers_bytes(record: Any, tmp_path: Path) -> None:
    path = record.write(tmp_path)
    assert path.read_text() == json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n"  # what the writers wrote
    again = type(record).read(path)
    assert again == record or again.to_json() == record.to_json()
    assert type(record).read(tmp_path).to_json() == record.to_json()  # the tree holding it reads the same


def test_the_meta_wheels_reports_read_back_to_the_bytes_their_writer_wrote(tmp_path: Path) -> None:
    """The wheels stage still writes ``report.json`` itself (its code keys every wheel action); what it writes is
    a ``WheelReport`` to the byte. (The libraries and device wheels: tests/test_device_wheels.py.)"""
    from cairn.wheels import sdk

    inputs = {"sdk_version": "7.2.4", "source_date_epoch": 1700000000, "families": ["gfx110X-dgpu"],
              "devices": ["gfx1100", "gfx1101"]}
    written = [(tmp_path / "meta", sdk.build_meta_wheel), (tmp_path / "target", lambda out, i: sdk.build_target_meta_wheel(
        out, {**i, "family": "gfx110X-dgpu", "target": "gfx1100"}))]
    for out, build in written:
        wheel = build(out, inputs)
        report = WheelReport.read(out)
        assert json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n" == (out / "report.json").read_text()
        assert [w.filename for w in report.wheels] == [wheel.name] and report.sdk_version == "7.2.4"
    assert WheelReport.read(tmp_path / "target").family == "gfx110X-dgpu" and WheelReport.read(tmp_path / "meta").family is None


def test_the_records_keep_each_kind_of_its_keys() -> None:
    """A base image never wrote parent/rocm/kind/wheels, a built one never packages; a blocked push only why."""
    assert "packages" in BASE.to_json() and not {"parent", "rocm", "kind", "wheels"} & set(BASE.to_json())
    assert "packages" not in BUILT.to_json() and BUILT.to_json()["wheels"][0]["size"] == 1234
    assert set(BLOCKED.to_json()) == {"schema", "blocked", "image"}
    assert set(PUSHED.to_json()) == {"schema", "registry", "repo", "tags", "digest", "reference", "image", "target"}
    assert "from" in DEVICE.to_json() and "from_wheel" not in DEVICE.to_json()
    assert LIBRARIES.partial() == {"gfx90a": ("lib/librocsparse.so.1",)} and META.partial() == {}
    assert MIRROR.covers("gfx90a") and not MIRROR.covers("gfx110X-dgpu") and not MIRROR.covers("gfx942")
    assert BUILT.size == 1020


BROKEN = [  # record, the change, what the one line must say
    (BUILT, lambda d: d.pop("digest"), "'digest' is missing"),
    (BUILT, lambda d: d.update(tags="5.2.3"), "'tags' is a string, not a list of strings"),
    (BUILT, lambda d: d.update(tagz=["x"]), "unknown key 'tagz' — did you mean 'tags'?"),
    (BUILT, lambda d: d["layers"][1].pop("diff_id"), "'layers[1].diff_id' is missing"),
    (BUILT, lambda d: d["layers"][0].update(size="1000"), "'layers[0].size' is a string, not an integer"),
    (BUILT, lambda d: d.update(digest="sha256:abc"), "'digest' is 'sha256:abc', not the sha256:… digest of the image manifest"),
    (BUILT, lambda d: d.update(schema="cairn.image/v2"), "'schema' is 'cairn.image/v2', not one of cairn.image/v1"),
    (PUSHED, lambda d: d.pop("reference"), "'reference' is missing"),
    (PUSHED, lambda d: d.update(digest=7), "'digest' is an integer, not a string"),
    (PUSHED, lambda d: d.update(blocked="why"), "'registry' is written, but the push is blocked"),
    (BLOCKED, lambda d: d.update(blocked=""), "'blocked' is empty"),
    (BLOCKED, lambda d: d.pop("image"), "'image' is missing"),
    (LIBRARIES, lambda d: d["audit"]["partial"].update(gfx90a="lib/x.so"), "'audit.partial.gfx90a' is a string, not a list of strings"),
    (LIBRARIES, lambda d: d["audit"].update(partail={}), "unknown key 'partail' in 'audit' — did you mean 'partial'?"),
    (LIBRARIES, lambda d: d.update(part="librarie"), "'part' is 'librarie', not one of"),
    (LIBRARIES, lambda d: d["wheels"][0].pop("sha256"), "'wheels[0].sha256' is missing"),
    (MIRROR, lambda d: d["audit"]["families"]["gfx90a"].update(covered="yes"),
     "'audit.families.gfx90a.covered' is a string, not true or false"),
]


@pytest.mark.parametrize(("record", "change", "said"), BROKEN, ids=[f"{i}-{b[2][:30]}" for i, b in enumerate(BROKEN)])
def test_a_damaged_record_is_one_line_naming_the_file_and_the_key(record: Any, change: Any, said: str, tmp_path: Path) -> None:
    data = json.loads(json.dumps(record.to_json()))
    change(data)
    path = record.write(tmp_path)
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(InputError) as caught:
        type(record).read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and said in message and "\n" not in message, message


def test_a_record_that_is_not_json_is_located_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "push.json"
    path.write_text('{\n  "schema": "cairn.push/v1",\n  "image": \n}\n')
    with pytest.raises(InputError, match=r"push\.json:4:1: cannot read the push record: not JSON"):
        PushRecord.read(path)


# -- the JSON Schemas under schemas/ ----------------------------------------------------------------------------
def _validator(kind: str) -> Any:
    need_module("jsonschema")
    from jsonschema import Draft202012Validator

    schema = json.loads((ROOT / "schemas" / f"{kind}.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


KIND = {ImageRecord: "image-record", PushRecord: "push-record", WheelReport: "wheel-report"}


@pytest.mark.parametrize("record", RECORDS_WRITTEN, ids=_id)
def test_the_schema_accepts_what_the_writer_writes(record: Any) -> None:
    assert set(KIND.values()) == set(RECORDS)
    errors = [e.message for e in _validator(KIND[type(record)]).iter_errors(record.to_json())]
    assert errors == []


@pytest.mark.parametrize(("record", "change", "said"), BROKEN, ids=[f"{i}-{b[2][:30]}" for i, b in enumerate(BROKEN)])
def test_the_schema_rejects_what_the_reader_rejects(record: Any, change: Any, said: str) -> None:
    data = json.loads(json.dumps(record.to_json()))
    change(data)
    assert not _validator(KIND[type(record)]).is_valid(data), said


# -- readers of the records: a runner and the command line ------------------------------------------------------
def _run_gate(tmp_path: Path, push: PushRecord, report: str | None = None) -> tuple[Path, Exception | None]:
    """The gate runner on ``push`` (and the family's libraries wheel's ``report.json`` text), its dependencies
    listed in an order the plan never uses: it finds each by what it is, not by its place."""
    from cairn.execute.runners import ActionContext
    from cairn.gates.run import run_gate
    from cairn.plan.graph import Action

    trees = {name: tmp_path / name for name in ("push", "image", "libraries", "out")}
    for tree in trees.values():
        tree.mkdir()
    push.write(trees["push"])
    deps = {"package:rocm-sdk-libraries@gfx90a": trees["libraries"], "push:runtime@gfx90a": trees["push"],
            "image:runtime@gfx90a": trees["image"]}
    if report is not None:
        (trees["libraries"] / "report.json").write_text(report)
    action = Action("gate:static-coverage:runtime@gfx90a", "gate", {"gate": "static-coverage", "image": "runtime",
                                                                   "target": "gfx90a", "family": "gfx90a", "rocm": "5.2.3"},
                    tuple(deps), family="gfx90a")
    try:
        run_gate(ActionContext(action, trees["out"], io.StringIO(), deps, {d: "" for d in deps}))
    except CairnError as exc:
        return trees["out"], exc
    return trees["out"], None


def test_a_gate_on_a_blocked_push_is_not_run_whatever_the_order_of_its_inputs(tmp_path: Path) -> None:
    out, error = _run_gate(tmp_path, BLOCKED)
    assert error is None
    result = json.loads((out / "gate.json").read_text())
    assert (result["status"], result["reason"]) == ("not-run", f"image blocked: {BLOCKED.blocked}")


def test_a_gate_reading_a_damaged_report_fails_in_one_line_naming_it(tmp_path: Path) -> None:
    broken = LIBRARIES.to_json()
    broken["audit"]["partial"] = {"gfx90a": "lib/librocsparse.so.1"}
    _, error = _run_gate(tmp_path, PUSHED, json.dumps(broken, indent=2))
    report = tmp_path / "libraries" / "report.json"
    assert isinstance(error, InputError), error
    assert str(error) == (f"{report}: 'audit.partial.gfx90a' is a string, not a list of strings — "
                          "rebuild it: cairn build --only package:rocm-sdk-libraries@gfx90a")
    assert not (tmp_path / "out" / "gate.json").exists()


def _cairn(*args: str) -> subprocess.CompletedProcess[str]:
    """``cairn`` as a user runs it, from outside the checkout."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "cairn.cli", *args], capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), env=env, timeout=300)


REBUILD = "rebuild it (cairn build --only image:runtime@gfx90a)"


def _store(tmp_path: Path, action: str, record: Any, change: Any = None) -> Path:
    """A store whose last build ran ``action`` into a tree holding ``record`` (changed by ``change``)."""
    store = tmp_path / "store"
    tree = store / "trees" / "t"
    tree.mkdir(parents=True)
    path = record.write(tree)
    if change is not None:
        data = record.to_json()
        change(data)
        path.write_text(json.dumps(data, indent=2))
    (store / "last-build.json").write_text(json.dumps({"actions": {action: {"status": "ran", "output": "t"}}}))
    return store


def test_image_list_reads_the_image_record(tmp_path: Path) -> None:
    store = _store(tmp_path, "image:runtime@gfx90a", BUILT)
    listed = _cairn("image", "list", "--store", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [{**BUILT.to_json(), "tree": str(store / "trees" / "t")}]


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: d["layers"][0].pop("size"), f"'layers[0].size' is missing — {REBUILD}"),
    (lambda d: d.update(digets=D), "unknown key 'digets' — did you mean 'digest'?"),  # the fix is the likely key
    (lambda d: d.update(tags=[1]), f"'tags[0]' is an integer, not a string — {REBUILD}"),
], ids=["missing", "unknown", "wrong-type"])
def test_image_list_names_the_damaged_key_of_an_image_record(tmp_path: Path, change: Any, said: str) -> None:
    store = _store(tmp_path, "image:runtime@gfx90a", BUILT, change)
    listed = _cairn("image", "list", "--store", str(store))
    lines = listed.stderr.strip().splitlines()
    assert listed.returncode == 2 and len(lines) == 1 and "Traceback" not in listed.stderr, listed.stderr
    assert lines[0] == f"cairn image: {store / 'trees' / 't' / 'image.json'}: {said}"


@pytest.mark.slow
def test_image_dockerfile_names_the_damaged_key_of_the_parent_push(tmp_path: Path) -> None:
    """``cairn image dockerfile`` renders an unbuilt image FROM its parent's push record: a damaged one is named."""
    store = _store(tmp_path, "push:base", PUSHED, lambda d: d.pop("repo"))
    shown = _cairn("image", "dockerfile", "runtime@gfx90a", "rocm-5.2.3", "--store", str(store))
    lines = shown.stderr.strip().splitlines()
    assert shown.returncode == 2 and len(lines) == 1 and "Traceback" not in shown.stderr, shown.stderr
    assert lines[0] == f"cairn image: {store / 'trees' / 't' / 'push.json'}: 'repo' is missing — rebuild it (cairn build --only push:base)"
    good = _store(tmp_path / "good", "push:base", PUSHED)
    shown = _cairn("image", "dockerfile", "runtime@gfx90a", "rocm-5.2.3", "--store", str(good))
    assert shown.returncode == 1 and f"cairn/rocm@{D}" in shown.stdout, shown.stderr
