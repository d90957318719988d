"""``--store`` and ``--json`` are declared once (``cairn.cli_options``) and mean the same in every subcommand."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

from cairn.cli import COMMANDS, build_parser
from cairn.paths import find_store
from support import ROOT

SRC = ROOT / "src" / "cairn"


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand's parser (and its own subcommands' parsers), configured as ``cairn`` does."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name, (module, _help) in COMMANDS.items():
        child = sub.choices[name]
        importlib.import_module(module).configure(child)
        stack = [(name, child)]
        while stack:
            label, p = stack.pop()
            found.append((label, p))
            for action in p._actions:
                if isinstance(action, argparse._SubParsersAction):
                    stack += [(f"{label} {n}", c) for n, c in action.choices.items()]
    return found


def test_every_store_and_json_option_has_the_same_type_default_and_destination() -> None:
    stores, jsons = [], []
    for label, parser in _parsers():
        for action in parser._actions:
            if "--store" in action.option_strings:
                stores.append(label)
                # the project's store, found from the working directory up (cairn.paths.find_store)
                assert (action.dest, action.type, action.default) == ("store", Path, find_store()), label
            if "--json" in action.option_strings:
                jsons.append(label)
                assert (action.dest, action.const, action.default, action.nargs) == ("json", True, False, 0), label
    assert {"build", "plan", "gate", "coverage", "publish", "promote", "matrix", "image list"} <= set(stores)
    # cairn ci github plans for the runners and reads no store: its jobs each have their own
    assert "ci github" not in stores
    assert {"build", "plan", "doctor", "audit", "diff", "verify", "image list", "services", "ci github"} <= set(jsons)


def test_no_command_module_declares_store_or_json_itself() -> None:
    declared = re.compile(r"""add_argument\(\s*["']--(store|json)["']""")
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.name != "cli_options.py" and declared.search(p.read_text())]
    assert offenders == []


def _refused(*argv: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cairn.cli", *argv], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_a_count_below_one_or_an_empty_runner_label_is_refused_before_any_work() -> None:
    """``--jobs 0`` and ``--jobs -2`` ran the build anyway; ``--runs-on ''`` wrote a workflow GitHub refuses."""
    assert _refused("build", "--jobs", "0").endswith("argument --jobs/-j: 0 is less than 1 — give at least 1")
    assert _refused("build", "-j", "-2").endswith("argument --jobs/-j: -2 is less than 1 — give at least 1")
    assert _refused("build", "-j", "two").endswith("argument --jobs/-j: 'two' is not a whole number")
    assert _refused("ci", "github", "--runs-on", "").endswith("argument --runs-on: '' is empty or holds whitespace — give one label")
    assert _refused("ci", "github", "--runs-on", "self hosted").endswith("'self hosted' is empty or holds whitespace — give one label")
