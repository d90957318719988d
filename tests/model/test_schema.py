"""The JSON Schemas under schemas/ come from the loaders' own table declarations and accept every committed
input file; a typo'd key fails the schema as it fails the loader."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from cairn.model.schema import kinds, main, render
from support import ROOT, need_module


def _validator(kind: str):  # type: ignore[no-untyped-def]
    need_module("jsonschema")
    from jsonschema import Draft202012Validator

    schema = json.loads((ROOT / "schemas" / f"{kind}.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _inputs() -> list[tuple[Path, str]]:
    from cairn.model.image_recipes import rootfs_names

    rootfs = set(rootfs_names(ROOT / "recipes" / "containers"))
    files = [(p, "release-manifest") for p in (ROOT / "manifests" / "releases").glob("*.toml")]
    files += [(ROOT / "manifests" / "targets.toml", "targets")]
    files += [(p, "wheel-recipe") for p in (ROOT / "recipes" / "wheels").glob("*.toml")]
    files += [(p, "rootfs-recipe" if p.stem in rootfs else "container-recipe") for p in (ROOT / "recipes" / "containers").glob("*.toml")]
    return sorted(files)


def test_committed_schemas_match_the_declarations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (ROOT / "schemas").glob("*.json")) == sorted(f"{k}.schema.json" for k in kinds())


def test_a_stale_schema_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    (tmp_path / "targets.schema.json").write_text(render("targets").replace('"mach"', '"mack"', 1))
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert "targets.schema.json" in capsys.readouterr().err


@pytest.mark.parametrize(("path", "kind"), _inputs(), ids=[f"{p.parent.name}/{p.name}" for p, _ in _inputs()])
def test_every_committed_input_file_validates(path: Path, kind: str) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(kind).iter_errors(tomllib.loads(path.read_text()))]
    assert errors == []


TYPOS = [
    ("release-manifest", ROOT / "manifests" / "releases" / "rocm-5.2.3.toml", ("release", "familys")),
    ("targets", ROOT / "manifests" / "targets.toml", ("target", 0, "kfd_versoin")),
    ("wheel-recipe", ROOT / "recipes" / "wheels" / "pytorch.toml", ("build", "device_cod")),
    ("container-recipe", ROOT / "recipes" / "containers" / "smoke.toml", ("image", "templte")),
    ("rootfs-recipe", ROOT / "recipes" / "containers" / "base.toml", ("base", "suit")),
]


@pytest.mark.parametrize(("kind", "path", "where"), TYPOS, ids=[t[0] for t in TYPOS])
def test_a_typo_key_fails_the_schema(kind: str, path: Path, where: tuple[str | int, ...]) -> None:
    data = tomllib.loads(path.read_text())
    validator = _validator(kind)
    assert validator.is_valid(data)
    table = data
    for key in where[:-1]:
        table = table[key]  # type: ignore[index]
    table[where[-1]] = "x"  # type: ignore[index]
    errors = list(validator.iter_errors(data))
    assert errors and any(repr(where[-1]) in e.message for e in errors), [e.message for e in errors]
