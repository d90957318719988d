"""The command line a release engineer lives in, tried as one would: each command run as a user runs it
(``python -m cairn.cli …`` in a subprocess, not a terminal, ``COLUMNS=80``), its output read as a person reads it.

Planning-only commands use the legacy release (``rocm-5.2.3``); builds use the smallest real release (archive
components served on loopback, ``servers.archive_release``); ``cairn gate`` and ``cairn image list`` read a store
whose build record and trees are written here the way ``cairn build`` writes them.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.model.gate_result import GateResult
from cairn.paths import find_store
from support import ROOT, cairn
from support.servers import archive_release, serve_directory

LEGACY = "rocm-5.2.3"


# ``cairn`` as a user runs it: from a directory outside this checkout unless a test says where (so a store another
# test, or a developer's build, left in the checkout's ``.cairn`` is never the project's store here), this
# checkout's code, and a terminal 80 columns wide unless a test says otherwise
USER_ENV = {"COLUMNS": "80", "PYTHONPATH": str(ROOT / "src")}


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# -- cairn plan ------------------------------------------------------------------------------------------------

def test_plan_prints_a_summary_by_default_and_every_action_with_all(tmp_path: Path) -> None:
    """125 actions printed 134 lines (331 for the default release): now the counts by status and by stage and
    the blocked actions grouped by reason; --all adds the table, --json keeps everything for machines."""
    store = str(tmp_path / "store")
    doc = json.loads(cairn("plan", LEGACY, "--store", store, "--json", cwd=tempfile.gettempdir(), extra_env=USER_ENV).stdout)
    counts = Counter(a["status"] for a in doc["actions"])
    assert doc["counts"] == dict(counts)
    summary = cairn("plan", LEGACY, "--store", store, cwd=tempfile.gettempdir(), extra_env=USER_ENV)
    assert summary.returncode == 0, summary.stderr
    lines = summary.stdout.splitlines()
    assert len(lines) < 30, summary.stdout
    head = f"cairn-debian12 5.2.3 ({LEGACY}.toml): {len(doc['actions'])} actions — "
    assert lines[0].startswith(head) and f"{counts['to run']} to run" in lines[0] and f"{counts['blocked']} blocked" in lines[0]
    assert lines[1] == f"store {tmp_path / 'store'} (new)"
    stages = Counter(a["stage"] for a in doc["actions"])
    for stage, n in stages.items():  # one line per stage with its count
        assert any(line.split()[:2] == [stage, str(n)] for line in lines), (stage, n, summary.stdout)
    # the three sglang images are blocked for one reason (it differs only in the index's gfx name): one group
    [group] = doc["blocked"]
    assert group["actions"] == counts["blocked"] == 3 and len(group["blocked"]) == 3
    text = " ".join(summary.stdout.split())
    assert f"blocked, by reason (3): 3 {' '.join(group['reason'].split())}" in text
    assert "blocked here: image:sglang@gfx908, image:sglang@gfx90a, image:sglang@gfx1030" in text
    assert not any(a["id"] in summary.stdout for a in doc["actions"] if a["kind"] in ("fetch", "build", "gate"))

    full = cairn("plan", LEGACY, "--store", store, "--all", cwd=tempfile.gettempdir(), extra_env=USER_ENV)
    assert all(a["id"] in full.stdout for a in doc["actions"])
    assert full.stdout.rstrip().endswith(summary.stdout.splitlines()[-2].rstrip())  # the summary follows the table


def test_a_family_outside_the_release_is_one_line_and_a_target_says_what_it_leaves_out(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    assert one_line(cairn("plan", LEGACY, "--family", "gfx90", "--store", store, cwd=tempfile.gettempdir(), extra_env=USER_ENV)).endswith(
        "--family: unknown gfx family 'gfx90' — did you mean 'gfx90a'?")
    assert one_line(cairn("plan", "--family", "gfx110X", "--store", store, cwd=tempfile.gettempdir(), extra_env=USER_ENV)).endswith("did you mean 'gfx110X-dgpu'?")
    refused = one_line(cairn("build", LEGACY, "--family", "gfx1100", "--store", store, cwd=tempfile.gettempdir(), extra_env=USER_ENV))
    assert refused == ("cairn build: --family: gfx1100 is not built by cairn-debian12 5.2.3 (none of its families holds "
                       "gfx1100) — use one of its families: gfx908, gfx90a, gfx1030")
    assert not (tmp_path / "store").exists()  # refused before the store was made
    # the default release builds gfx110X-dgpu (gfx1100, gfx1101, gfx1102), llama.cpp for it as one gfx11-generic compile
    target = cairn("plan", "--family", "gfx1100", "--store", store, "--json", cwd=tempfile.gettempdir(), extra_env=USER_ENV)
    note = json.loads(target.stdout)["notes"][0]
    assert note == ("--family gfx1100 is part of the release's family gfx110X-dgpu: this plan leaves out gfx1101, "
                    "gfx1102; llama.cpp is compiled for gfx1100 alone, not the family's gfx11-generic — give --family "
                    "gfx110X-dgpu for the family")
    family = json.loads(cairn("plan", "--family", "gfx110X-dgpu", "--store", store, "--json", cwd=tempfile.gettempdir(), extra_env=USER_ENV).stdout)
    assert not any(n.startswith("--family") for n in family["notes"])


# -- cairn build -----------------------------------------------------------------------------------------------

@pytest.fixture
def release(tmp_path: Path) -> Iterator[Path]:
    www = tmp_path / "www"
    www.mkdir()
    delay = {"seconds": 0.2}  # every fetch takes a measurable time
    with serve_directory(www, delay) as base:
        yield archive_release(tmp_path, www, base, name="cli-test", families=("gfx90a",))


def test_a_no_op_build_prints_a_summary_and_keeps_the_seconds_that_built_each_action(release: Path, tmp_path: Path) -> None:
    build = ("build", str(release), "--only", "assemble:sdk")
    first = cairn(*build, cwd=tmp_path, extra_env=USER_ENV)
    assert first.returncode == 0, first.stderr
    store = tmp_path / ".cairn"
    built = json.loads((store / "last-build.json").read_text())["actions"]
    total = len(built)
    assert first.stderr.splitlines()[0] == f"store {store} (new)"
    assert sum(": ran (" in line for line in first.stderr.splitlines()) == total  # logged: a line per action run
    assert re.fullmatch(rf"{total} actions in [0-9.]+ s: {total} ran", first.stdout.splitlines()[0]), first.stdout

    again = cairn(*build, cwd=tmp_path, extra_env=USER_ENV)
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines() == [f"store {store}"]  # no line per cached action
    assert again.stdout.splitlines()[0].endswith(f": {total} cached")
    report = json.loads((store / "last-build.json").read_text())["actions"]
    assert {a: o["status"] for a, o in report.items()} == dict.fromkeys(built, "cached")
    # the seconds are the first run's, not the no-op's: CI shards are sized from them
    assert {a: o["seconds"] for a, o in report.items()} == {a: o["seconds"] for a, o in built.items()}
    assert all(built[a]["seconds"] >= 0.2 for a in built if a.startswith("fetch:"))
    from cairn.ci.shards import read_timings

    assert sum(read_timings(store / "last-build.json").values()) >= 0.2 * 3

    verbose = cairn(*build, "--verbose", cwd=tmp_path, extra_env=USER_ENV)
    assert sum(line.endswith(": cached") for line in verbose.stderr.splitlines()) == total
    quiet = cairn(*build, "--quiet", cwd=tmp_path, extra_env=USER_ENV)
    assert quiet.stderr == "" and len(quiet.stdout.splitlines()) == 1 and quiet.stdout.rstrip().endswith(f"{total} cached")
    assert cairn(*build, "--quiet", "--json", cwd=tmp_path, extra_env=USER_ENV).returncode == 2  # one display at a time


def test_the_project_store_is_found_from_a_subdirectory(release: Path, tmp_path: Path) -> None:
    """From docs/ of a checkout, a no-op build turned into a cold build in docs/.cairn."""
    assert cairn("build", str(release), "--only", "assemble:sdk", "--quiet", cwd=tmp_path, extra_env=USER_ENV).returncode == 0
    deeper = tmp_path / "docs" / "deeper"
    deeper.mkdir(parents=True)
    found = cairn("build", str(release), "--only", "assemble:sdk", cwd=deeper, extra_env=USER_ENV)
    assert found.returncode == 0 and found.stderr.splitlines() == [f"store {tmp_path / '.cairn'}"], found.stderr
    assert ": 0 ran" not in found.stdout and found.stdout.splitlines()[0].endswith(" cached")
    assert not (deeper / ".cairn").exists()
    # a relative --store is a path like any other, relative to where the command runs — and says so
    given = cairn("plan", str(release), "--store", ".cairn", cwd=deeper, extra_env=USER_ENV)
    assert f"store {deeper / '.cairn'} (new — this project's store is {tmp_path / '.cairn'}; drop --store to use it)" \
        in given.stdout.splitlines()
    assert f"(default: {tmp_path / '.cairn'}," in cairn("build", "--help", cwd=deeper, extra_env={**USER_ENV, "COLUMNS": str(1000)}).stdout
    missing = one_line(cairn("gate", str(release), "--store", ".cairn", cwd=deeper, extra_env=USER_ENV))
    assert missing.endswith(f"no such store — run cairn build --store .cairn first, or drop --store to use this "
                            f"project's store {tmp_path / '.cairn'}")


def test_the_walk_up_stops_at_the_project_that_holds_the_manifests(tmp_path: Path) -> None:
    """A checkout that was never built: its .cairn/ (new), not one further up and not one in the subdirectory."""
    outer = tmp_path / "outer"
    (outer / ".cairn" / "ac").mkdir(parents=True)  # a store above the project: not the project's
    project = outer / "project"
    (project / "manifests").mkdir(parents=True)
    (project / "manifests" / "targets.toml").write_text("")
    (project / "docs").mkdir()
    assert find_store(project / "docs") == project / ".cairn"
    assert find_store(outer / "elsewhere") == outer / ".cairn"
    assert find_store(tmp_path) == tmp_path / ".cairn"  # nothing found: here, as before


# -- cairn gate ------------------------------------------------------------------------------------------------

LONG = ("3 ROCm libraries carry no gfx90a code: librocprofiler-sdk.so.1, librocprofiler-sdk-tool.so.1 and "
        "libroctracer64.so.4 (see /opt/rocm/lib/rocprofiler-sdk/librocprofiler-sdk-tool.so.1.0.0.build-id)")


def _gate_store(store: Path) -> None:
    """A build record of the legacy release's runtime images: gfx90a fails in-container, gfx908's in-container
    did not run, gfx1030 passed both; every target's wheels passed the user-install gate."""
    cells = {("gfx90a", "static-coverage"): ("passed", "every library covers gfx90a"),
             ("gfx90a", "in-container"): ("failed", LONG),
             ("gfx908", "static-coverage"): ("passed", "every library covers gfx908"),
             ("gfx908", "in-container"): ("not-run", "no Docker Engine here: start one with cairn services start"),
             ("gfx1030", "static-coverage"): ("passed", "every library covers gfx1030"),
             ("gfx1030", "in-container"): ("passed", "hipInfo ran"),
             **{(target, "user-install"): ("passed", "installed and loaded on debian-12") for target in ("gfx90a", "gfx908", "gfx1030")}}
    actions = {}
    for n, ((target, gate), (status, reason)) in enumerate(cells.items()):
        tree = store / "trees" / f"gate{n}"
        tree.mkdir(parents=True)
        image = "wheels" if gate == "user-install" else "runtime"
        GateResult(gate, image, target, target, "" if gate == "user-install" else "sha256:" + "a" * 64, status, reason).write(tree)
        actions[f"gate:{gate}:{image}@{target}"] = {"status": "ran", "output": f"gate{n}", "detail": None, "seconds": 1.0}
    (store / "last-build.json").write_text(json.dumps({"schema": "cairn.execute/v1", "actions": actions}))


def test_gate_wraps_reasons_at_whole_words_and_rates_only_gated_cells(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _gate_store(store)
    proc = cairn("gate", LEGACY, "--store", str(store), "--channel", "nightly", cwd=tempfile.gettempdir(), extra_env=USER_ENV)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    words = proc.stdout.split()
    for word in LONG.split():  # every word whole, none cut at the edge of a column
        assert word in words, word
    assert lines[:3] == ["gates — channel nightly requires static-coverage, in-container, user-install",
                         "(marked *)", f"store {store}"]  # wrapped at whole words too
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in lines[2:]), proc.stdout
    # a cell (image, target) counts when its required gates ran: gfx908's did not, so it rates nothing
    assert "gating pass rate gfx90a: 0/1 gated = 0%" in lines
    assert "gating pass rate gfx908: 0/0 gated = —, 1 not gated" in lines
    assert "gating pass rate gfx1030: 1/1 gated = 100%" in lines
    assert lines[-1] == "gating parity: NO — gfx908 skips in-container"
    doc = json.loads(cairn("gate", LEGACY, "--store", str(store), "--channel", "nightly", "--json", cwd=tempfile.gettempdir(), extra_env=USER_ENV).stdout)
    assert doc["families"] == {"gfx908": {"passed": 0, "gated": 0, "not_gated": 1, "pass_rate": None},
                               "gfx90a": {"passed": 0, "gated": 1, "not_gated": 0, "pass_rate": 0.0},
                               "gfx1030": {"passed": 1, "gated": 1, "not_gated": 0, "pass_rate": 1.0}}
    dev = cairn("gate", LEGACY, "--store", str(store), cwd=tempfile.gettempdir(), extra_env=USER_ENV)  # the manifest's channel (dev) requires static-coverage only
    assert dev.returncode == 0 and "gating parity: yes" in dev.stdout, dev.stdout


def test_an_unknown_channel_is_one_line_with_the_closest_one(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _gate_store(store)
    assert one_line(cairn("gate", LEGACY, "--store", str(store), "--channel", "stabel", cwd=tempfile.gettempdir(), extra_env=USER_ENV)) == (
        "cairn gate: --channel: unknown channel 'stabel' — did you mean 'stable'?")
    assert one_line(cairn("matrix", "--store", str(store), "--channel", "nightlly", cwd=tempfile.gettempdir(), extra_env=USER_ENV)) == (
        "cairn matrix: --channel: unknown channel 'nightlly' — did you mean 'nightly'?")
    assert one_line(cairn("image", "dockerfile", "runtime@gfx90", LEGACY, "--store", str(store), cwd=tempfile.gettempdir(), extra_env=USER_ENV)) == (
        "cairn image: runtime@gfx90: no target 'gfx90' in the release's families — did you mean 'gfx90a'?")


# -- cairn image list ------------------------------------------------------------------------------------------

def test_image_list_shows_a_blocked_image_as_blocked(tmp_path: Path) -> None:
    """jax blocked by its linkage check when it ran (blocked.json, no image), sglang at planning: listed, exit 0."""
    store = tmp_path / "store"
    built, jax = store / "trees" / "img", store / "trees" / "jax"
    built.mkdir(parents=True)
    jax.mkdir()
    (built / "image.json").write_text(json.dumps({
        "schema": "cairn.image/v1", "name": "runtime", "repo": "cairn/runtime", "tags": ["5.2.3-gfx90a"], "target": "gfx90a",
        "family": "gfx90a", "digest": "sha256:" + "b" * 64, "config_digest": "sha256:" + "c" * 64, "labels": {},
        "layers": [{"digest": "sha256:" + "d" * 64, "diff_id": "sha256:" + "e" * 64, "size": 2_000_000,
                    "uncompressed_size": 5_000_000}]}))
    why = "jax 0.10.0: 7 libraries its wheels link are not in the release's ROCm 5.2.3 image: libamdhip64.so.7"
    (jax / "blocked.json").write_text(json.dumps({"reason": why, "target": "gfx90a", "family": "gfx90a"}))
    sglang = "sglang 0.5.10.post1: its runtime needs torch built for ROCm, which this release cannot build"
    (store / "last-build.json").write_text(json.dumps({"actions": {
        "image:runtime@gfx90a": {"status": "ran", "output": "img"},
        "image:jax@gfx90a": {"status": "ran", "output": "jax"},
        "image:sglang@gfx90a": {"status": "blocked", "output": None, "detail": sglang}}}))
    listed = cairn("image", "list", "--store", str(store), extra_env={**USER_ENV, "COLUMNS": str(200)}, cwd=tempfile.gettempdir())
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].strip() == f"images — store {store}"
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines() if line.count("│") > 2}
    assert {"runtime", "jax", "sglang"} <= set(rows)
    assert "blocked" in rows["jax"] and "blocked" in rows["sglang"] and "blocked" not in rows["runtime"]
    doc = json.loads(cairn("image", "list", "--store", str(store), "--json", cwd=tempfile.gettempdir(), extra_env=USER_ENV).stdout)
    assert [(r["name"], r.get("blocked")) for r in doc] == [("jax", why), ("runtime", None), ("sglang", sglang)]
