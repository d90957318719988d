"""Every malformed manifest gets one line, ``file:line:col: what — fix``, exit code 2, no traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.errors import InputError
from cairn.model.manifest import load_manifest
from support import ROOT
from support.mutations import VALID, line_mutations

LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<what>.+) — (?P<fix>.+)$")


def check(tmp_path: Path, text: str) -> tuple[int, str, str]:
    path = tmp_path / "m.toml"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "cairn.cli", "check", str(path)], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_valid_manifest_passes(tmp_path: Path) -> None:
    code, out, err = check(tmp_path, VALID)
    assert (code, err) == (0, "")
    assert "ok" in out


CASES = [
    ("unknown key", VALID.replace('base_os = "debian-12"', 'base_os = "debian-12"\nfamilys = ["gfx90a"]'),
     "familys", "unknown key 'familys'", "did you mean 'families'?"),
    ("branch as commit", VALID.replace("b" * 40, "main"), "commit = \"main", "floating ref 'main'", "40-hex commit"),
    ("short hash", VALID.replace("b" * 40, "bbbbbbb"), "commit = \"bbbbbbb", "floating ref 'bbbbbbb'", "40-hex commit"),
    ("missing sha256", VALID.replace(', sha256 = "' + "a" * 64 + '"', ""), "source.deb", "missing 'sha256'", "floating input"),
    ("unknown family", VALID.replace('families = ["gfx90a"]', 'families = ["gfx94x-dcgpu"]'), "gfx94x-dcgpu",
     "unknown gfx family 'gfx94x-dcgpu'", "did you mean 'gfx94X-dcgpu'?"),
    ("unknown excluded target", VALID.replace('depends = ["runtime"]', 'depends = ["runtime"]\nexclude_targets = ["gfx9421"]'),
     "gfx9421", "unknown gfx target or family 'gfx9421'", "did you mean"),
    ("missing dependency", VALID.replace('depends = ["runtime"]', 'depends = ["runtme"]'), "runtme",
     "'tool' depends on unknown component 'runtme'", "did you mean 'runtime'?"),
    ("dependency cycle", VALID.replace('build = { kind = "deb-unpack" }', 'build = { kind = "deb-unpack" }\ndepends = ["tool"]'),
     'depends = ["tool"]', "dependency cycle: runtime → tool → runtime", "remove one"),
    ("duplicate component", VALID.replace('name = "tool"', 'name = "runtime"'), "name = \"runtime\"\nversion = \"1.0\"\nsource.git", "duplicate component 'runtime'", "rename"),
    ("bad version", VALID.replace('version = "1.0.0"', 'version = "one"'), "\"one\"", "'one' is not a PEP 440 version", "use e.g."),
    ("bad channel", VALID.replace('channel = "dev"', 'channel = "nighty"'), "nighty", "unknown channel 'nighty'", "did you mean 'nightly'?"),
    ("two source kinds", VALID.replace('source.deb = {', 'source.path = { dir = "x" }\nsource.deb = {'), "source.path",
     "needs exactly one source kind", "use one of"),
    ("bad toml", VALID.replace('name = "t"', 'name = t'), "name = t", "invalid TOML", "fix the syntax"),
    ("unknown build kind", VALID.replace('kind = "cmake"', 'kind = "cmak"'), "cmak", "unknown build kind 'cmak'", "did you mean 'cmake'?"),
    ("framework by bare version", VALID + '\n[frameworks.vllm]\nrecipe = "vllm"\nversion = "0.23.0"\n', "[frameworks.vllm]",
     "framework 'vllm' 0.23.0 has no pinned source", 'pin_unknown = "why"'),
    ("framework sdist without digest", VALID + '\n[frameworks.vllm]\nrecipe = "vllm"\nversion = "0.23.0"\n'
     'source.pypi = { name = "vllm", version = "0.23.0", filename = "vllm-0.23.0.tar.gz" }\n', "source.pypi",
     "source.pypi of 'vllm' is missing 'sha256'", "floating input"),
    ("framework on a branch", VALID + '\n[frameworks.torch]\nrecipe = "pytorch"\nversion = "2.12.0"\n'
     'source.git = { url = "https://github.com/ROCm/pytorch.git", ref = "release/2.12" }\n', "source.git = { url = \"https://github.com/ROCm",
     "source.git of 'torch' is missing 'commit'", "pin_unknown"),
    ("framework from a deb", VALID + '\n[frameworks.torch]\nrecipe = "pytorch"\nversion = "2.12.0"\n'
     'source.deb = { package = "python3-torch", version = "2.1.0-1", sha256 = "' + "c" * 64 + '" }\n', "source.deb = { package = \"python3-torch",
     "framework 'torch' cannot come from source.deb", "use one of source.{pypi,git,archive}"),
]


def line_of(text: str, marker: str) -> int:
    """1-based line where ``marker`` starts (a marker may span lines)."""
    return text[: text.index(marker)].count("\n") + 1


@pytest.mark.parametrize(("case", "text", "marker", "what", "fix"), CASES, ids=[c[0] for c in CASES])
def test_bad_manifest_gets_one_located_line(tmp_path: Path, case: str, text: str, marker: str, what: str, fix: str) -> None:
    line = line_of(text, marker)
    code, _out, err = check(tmp_path, text)
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    parsed = LINE.match(lines[0].removeprefix("cairn check: "))
    assert parsed, lines[0]
    assert parsed["file"].endswith("m.toml")
    assert int(parsed["line"]) == line, lines[0]
    assert what in parsed["what"]
    assert fix in parsed["fix"]


def test_pin_unknown_is_accepted_and_reported_by_plan(tmp_path: Path) -> None:
    text = VALID.replace('commit = "' + "b" * 40 + '"', 'ref = "release/2.12"').replace(
        'depends = ["runtime"]', 'depends = ["runtime"]\npin_unknown = "no commit for this release is in our reference data"')
    path = tmp_path / "m.toml"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "cairn.cli", "plan", str(path), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "tool: pin unknown — no commit for this release is in our reference data" in proc.stdout
    assert "pin unknown for tool" in proc.stdout


def test_framework_pin_unknown_is_accepted_with_its_reason(tmp_path: Path) -> None:
    text = VALID + '\n[frameworks.torch]\nrecipe = "pytorch"\nversion = "2.12.0"\npin_unknown = "ROCm/pytorch release/2.12 is a branch"\n'
    manifest = load_manifest(tmp_path / "m.toml", text=text)
    (torch,) = manifest.frameworks
    assert (torch.source, torch.pin_unknown) == (None, "ROCm/pytorch release/2.12 is a branch")


def test_production_frameworks_are_pinned_or_say_why_not() -> None:
    """Every framework of every committed manifest names its input by digest or commit, or says why it cannot."""
    root = ROOT / "manifests" / "releases"
    for path in sorted(root.glob("*.toml")):
        for framework in load_manifest(path).frameworks:
            pinned = framework.source is not None and (framework.source.get("sha256") or framework.source.get("commit"))
            pinned = pinned or (framework.files and all(f.get("sha256") for f in framework.files))
            assert pinned or framework.pin_unknown, f"{path.name}: {framework.name}"


MANIFEST_JUNK = ["", "[", "]", "=", '"', "{", "}", "x = 1", "[[core.components]]", "name = 3", "depends = 'a'",
                            "families = []", "source.git = {}", "build = 5", "[expansion.x]", "source_date_epoch = -1",
                            "version = \"1.0.0\"", "commit = \"abc\"", "\ufeff", "\t", "[frameworks.torch]", "recipe = 1"]


def _mutations() -> st.SearchStrategy[str]:
    return line_mutations(VALID, MANIFEST_JUNK)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_mutations())
def test_random_mutations_never_raise_anything_but_input_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.toml"
    try:
        load_manifest(path, text=text)
    except InputError as exc:
        assert str(exc).startswith(str(path))
        assert "\n" not in str(exc)
