"""Every figure bench/README.md quotes is in a committed results JSON that a bench script wrote.

A figure is a number with a unit (s, ms, min, ×, MB, GB, kB, MiB, GiB, %) outside code: the README puts settings
and goals (``--repeat 5``, `≥ 20×`) in code spans, so what is left is measured. Each figure must match, at
the precision written, a number in some ``bench/results/*.json`` under a key path that names that kind of quantity
(seconds for s, a speed-up or ratio for ×, bytes for MB). A number typed by hand with no script behind it
fails here; so does a results file without its machine description.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import ROOT

BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
MACHINE = {"cpu_model", "cores", "memory_bytes", "kernel", "os", "python", "date", "commit"}

# unit -> (substring of the JSON key, factor from the JSON value to the unit)
UNITS: dict[str, list[tuple[str, float]]] = {
    "s": [("seconds", 1.0)],
    "ms": [("seconds", 1e3)],
    "min": [("seconds", 1 / 60)],
    "minutes": [("seconds", 1 / 60)],
    "×": [("speedup", 1.0), ("ratio", 1.0), ("_vs_", 1.0), ("headroom", 1.0)],
    "MB": [("bytes", 1e-6)],
    "GB": [("bytes", 1e-9), ("_gb", 1.0)],  # disk_bench records decimal GB
    "kB": [("bytes", 1e-3)],
    "MiB": [("bytes", 2**-20), ("_kb", 2**-10)],  # GNU time's peak RSS is in KiB
    "GiB": [("bytes", 2**-30)],
    "%": [("rate", 100.0), ("percent", 1.0)],
}
_UNIT = r"(minutes|min|ms|s|×|MiB|GiB|MB|GB|kB|%)(?![\w])"
RANGE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?[–-]\s?(\d+(?:\.\d+)?)\s?" + _UNIT)  # "8–13 s": both ends are figures
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?" + _UNIT)


def prose(text: str) -> str:
    """The README without fenced blocks and code spans (commands, settings, goals)."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", " ", text)


def figures(text: str) -> list[tuple[str, str]]:
    text = prose(text)
    found = [pair for low, high, unit in RANGE.findall(text) for pair in ((low, unit), (high, unit))]
    return found + [(number, unit) for number, unit in FIGURE.findall(RANGE.sub(" ", text))]


def numbers(value: object, key: str = "") -> Iterator[tuple[str, float]]:
    """Every (key path, number) in a JSON document (``wheel_bytes/<file>``); list items carry their list's path."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from numbers(v, f"{key}/{k}" if key else str(k))
    elif isinstance(value, list):
        for v in value:
            yield from numbers(v, key)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield key, float(value)


def measured() -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    for path in sorted(RESULTS.glob("*.json")):
        found.extend(numbers(json.loads(path.read_text())))
    return found


def backed(number: str, unit: str, values: list[tuple[str, float]]) -> bool:
    decimals = len(number.split(".", 1)[1]) if "." in number else 0
    target, slack = float(number), 0.5 * 10**-decimals + 1e-9
    return any(hint in key and abs(value * factor - target) <= slack
               for hint, factor in UNITS[unit] for key, value in values)


def test_the_figure_finder_sees_what_a_reader_sees():
    text = "peer 2.63 s vs **175.9×**; rss 39.0 MiB, gates 8–13 s (`--repeat 5`, goal `≥ 20×`)\n```\nnox -s bench 3 s\n```\n"
    assert figures(text) == [("8", "s"), ("13", "s"), ("2.63", "s"), ("175.9", "×"), ("39.0", "MiB")]
    values = [("peer_seconds", 2.6279), ("speedup_library", 175.9), ("cairn_max_rss_kb", 39948.0), ("seconds", 8.2), ("seconds", 12.9)]
    assert [backed(n, u, values) for n, u in figures(text)] == [True] * 5
    assert not backed("2.7", "s", values) and not backed("175.9", "s", values)  # the right number under the wrong kind of key


def test_every_results_file_says_which_machine_and_command_made_it():
    files = sorted(RESULTS.glob("*.json"))
    assert files, "no committed bench results"
    for path in files:
        doc = json.loads(path.read_text())
        assert set(doc.get("machine", {})) >= MACHINE, f"{path.name}: machine description lacks {MACHINE - set(doc.get('machine', {}))}"
        # <bench>.json, or <bench>_<part>.json for a second file one bench writes (shards_reference.json)
        command = str(doc.get("command", ""))
        bench = command.removeprefix("python bench/").split("_bench.py")[0]
        assert command.startswith("python bench/") and (path.stem == bench or path.stem.startswith(bench + "_")), path.name


@pytest.mark.parametrize("readme", [BENCH / "README.md"], ids=["bench/README.md"])
def test_every_quoted_figure_is_in_a_committed_result(readme: Path):
    values = measured()
    quoted = figures(readme.read_text())
    assert quoted, "bench/README.md quotes no figure"
    unbacked = [f"{n} {u}" for n, u in quoted if not backed(n, u, values)]
    assert unbacked == [], f"figures in {readme.name} with no bench/results/*.json behind them: {unbacked}"


def test_the_project_readme_quotes_no_figure_without_a_result():
    """The front page keeps no measured number of its own: timings and sizes live in bench/README.md."""
    readme = BENCH.parent / "README.md"
    values = measured()
    assert [f"{n} {u}" for n, u in figures(readme.read_text()) if not backed(n, u, values)] == []
