"""The pipeline's stages are declared once (``cairn.stages``): the planner and the executor find the same ones.

Before, later stages registered their runners only when the planner happened to import them, so a process
that ran a plan without planning first found no runner for a package or an image.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from cairn import stages
from cairn.execute.runners import runner_for
from cairn.plan.prepare import load, make_plan
from cairn.stages import STAGES


def test_a_runner_is_found_without_planning_first() -> None:
    probe = ("from cairn.execute.runners import runner_for; from cairn.plan.graph import Action; from cairn.stages import RUNNERS; "
             "print(*(runner_for(Action(f'{k}:x', k, {}), RUNNERS).__name__ for k in ('package', 'image-build', 'gate', 'bundle')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["run_package", "run_image", "run_gate", "run_bundle"]


def test_each_stage_plans_in_its_plan_module_and_runs_in_its_run_module() -> None:
    """What to do (``<stage>/plan.py``) is kept apart from doing it (``<stage>/run.py``): the declared runners
    are the run module's, no runner is defined in a plan module, and no plan module imports its runners."""
    for stage in stages.STAGES:
        planner = stage.extend_plan.__module__
        assert planner.endswith(".plan"), f"{stage.name}: planner in {planner}"
        package = planner.removesuffix(".plan")
        assert stage.runners is importlib.import_module(f"{package}.run").RUNNERS, stage.name
        for kind, run in stage.runners.items():
            assert not run.__module__.endswith(".plan"), f"{stage.name}: the {kind} runner is in {run.__module__}"
        source = Path(str(importlib.import_module(planner).__file__)).read_text()
        assert f"{package}.run " not in source and f"{package} import run" not in source, f"{planner} imports its runners"


def test_every_action_of_the_default_release_has_a_runner() -> None:
    manifest, registry = load("default")
    plan = make_plan(manifest, registry, stages=STAGES)
    kinds = {action.kind for action in plan.actions}
    assert {"package", "index", "image-build", "gate", "bundle", "coverage"} <= kinds
    for action in plan.actions:
        runner_for(action, stages.RUNNERS)  # raises for a kind no stage declares


def test_stages_run_in_pipeline_order_and_a_subset_keeps_it() -> None:
    assert stages.NAMES == ("coverage", "wheels", "images", "gates", "user-install", "bundle")
    assert [s.name for s in stages.chosen(["bundle", "wheels"])] == ["wheels", "bundle"]
    assert stages.chosen([]) == ()
    with pytest.raises(ValueError, match=r"unknown stage.*imges.*the stages are coverage, wheels"):
        stages.chosen(["imges"])


def test_planning_asks_the_host_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Every question to the host is in the snapshot (``Host``) taken before planning: with no tool on PATH and
    no process allowed to start, the default release plans from a fixed snapshot, and what the snapshot says
    (services, tool versions) is what the plan uses."""
    from cairn.plan.probe import Host

    manifest, registry = load("default")
    archive: dict[str, dict[str, tuple[str, ...]]] = {}  # the archive still serves every pin
    for source in [*(c.source for c in manifest.components), *(g.source for g in manifest.grafts)]:
        if source.kind == "deb" and source.get("suite"):
            archive.setdefault(str(source.get("suite")), {})[str(source.get("package"))] = (str(source.get("version")),)
    host = Host(tools=frozenset({"git", "apt-get", "dpkg-deb", "hipcc", "cmake", "patchelf", "docker", "pip", "mmdebstrap"}),
                docker_host="unix:///nowhere/docker.sock", registry="127.0.0.1:1", registry_id="fixed",
                mmdebstrap_version="mmdebstrap 9.9", patchelf_version="patchelf 9.9", suite_versions=archive)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"planning started a process: {args[0]!r}")

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(subprocess, "Popen", refuse)
    plan = make_plan(manifest, registry, ["gfx1151"], host=host, stages=STAGES).by_id()
    assert plan["image:base"].inputs["tool"] == "mmdebstrap 9.9" and not plan["image:base"].blocked
    assert plan["package:rocm-sdk-core"].inputs["tools"]["patchelf"] == "patchelf 9.9"
    assert plan["push:runtime@gfx1151"].inputs["registry_id"] == "fixed" and not plan["push:runtime@gfx1151"].blocked
