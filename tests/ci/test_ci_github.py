"""``cairn ci github``: the workflows it writes are valid for GitHub, pin every action by SHA, need what the plan
needs, gate publish, give pull requests no write credential and CI no root key — and the shard jobs, run here as
separate processes with separate stores against one moto S3 cache, build the same release (same digests) as one
build does.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.ci.github import DOCKER_ENV, RUNNER_SETUP, UNPACK_KEYS
from cairn.ci.shards import Shard, shard_plan
from cairn.plan.graph import Action, Plan
from cairn.stages import STAGES
from support import cairn, need_module
from support.servers import archive_release, cache_writer_env, moto_s3, serve_directory

yaml = need_module("yaml")
need_module("check_jsonschema")

SHA_PIN = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$")
BUCKET = "cairn-ci-cache"


def _emit(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict, dict, Path]:
    """Run ``cairn ci github … --json --out``: the parsed release workflow, the shards report and the file (the
    pull-request workflow is ``pull-request.yml`` beside it)."""
    out = tmp_path / ".github" / "workflows" / "release.yml"
    proc = cairn("ci", "github", *args, "--out", str(out), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["pull_request_out"] == str(out.parent / "pull-request.yml")
    return yaml.safe_load(out.read_text()), report, out


def _pull_request(path: Path) -> dict:
    return yaml.safe_load((path.parent / "pull-request.yml").read_text())


def _validate(path: Path, schema: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def default_release(tmp_path_factory) -> tuple[dict, dict, Path]:
    """The default release's workflow."""
    return _emit(tmp_path_factory.mktemp("default"))


def test_the_default_release_workflows_validate_against_githubs_workflow_schema(default_release) -> None:
    _, _, path = default_release
    for workflow in (path, path.parent / "pull-request.yml"):
        for schema in ("vendor.github-workflows", "custom.github-workflows-require-timeout"):
            proc = _validate(workflow, schema)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "ok -- validation done" in proc.stdout


def test_the_schema_check_can_fail(default_release, tmp_path) -> None:
    """The validation above is a real check: a job with no runs-on is refused."""
    workflow, _, _ = default_release
    broken = json.loads(json.dumps(workflow))
    del broken["jobs"]["sdk"]["runs-on"]
    path = tmp_path / "broken.yml"
    path.write_text(json.dumps(broken))
    assert _validate(path, "vendor.github-workflows").returncode == 1


def _uses(value: object) -> list[str]:
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == "uses"] + [u for v in value.values() for u in _uses(v)]
    if isinstance(value, list):
        return [u for v in value for u in _uses(v)]
    return []


def test_every_action_is_pinned_by_a_full_commit_sha(default_release) -> None:
    workflow, _, path = default_release
    for data, text in ((workflow, path.read_text()), (_pull_request(path), (path.parent / "pull-request.yml").read_text())):
        uses = _uses(data)
        assert uses and all(SHA_PIN.match(u) for u in uses), sorted(set(uses))
        assert all(job["steps"][0]["uses"] == uses[0] for job in data["jobs"].values())  # every job checks out first
        assert not re.search(r"uses:\s*\S+@(v\d|main|master)", text)
    assert any(u.startswith("actions/upload-artifact@") for u in _uses(workflow))  # the GPU gates' verdicts


def test_every_job_runs_on_the_runner_with_the_engine_and_registry_its_plan_depends_on(default_release) -> None:
    """Jobs differ in what they run (the build image's job, the compiles in it, the image and gate jobs need the
    Docker Engine), not in the host they plan on: every job, publish too, gets the engine, a registry at one
    address and the tools, and none runs in a ``container:``."""
    workflow, report, _ = default_release
    docker = {s["name"] for s in report["shards"] if s["docker"]}
    holder = next(s["name"] for s in report["shards"] if "image:toolchain" in s["actions"])
    compiles = {s["name"] for s in report["shards"] if "build:llama.cpp" in s["actions"]}
    images = {s["name"] for s in report["shards"] if s["stage"] in ("images", "gates")}
    assert holder in docker and compiles and compiles <= docker and images <= docker
    assert len(images) >= 6  # the family-neutral images job and, per family, an images and a gates job
    assert {"wheels", "bundle", "coverage"} <= {s["name"] for s in report["shards"]} - docker
    builds = {**{n: j for n, j in workflow["jobs"].items() if n in docker | {s["name"] for s in report["shards"]} | {"publish"}},
              **{f"pr:{n}": j for n, j in _pull_request(default_release[2])["jobs"].items()}}
    assert len(builds) == 2 * len(report["shards"]) + 1
    for name, job in builds.items():
        assert "container" not in job, name
        assert {k: job["env"][k] for k in DOCKER_ENV} == DOCKER_ENV, name
        assert job["env"]["CAIRN_REGISTRY"] == "localhost:5000", name  # one address: a cached push keeps its key
        names = [step["name"] for step in job["steps"]]
        assert names[:4] == ["check out", "install cairn", "registry", "build"], name
        assert job["steps"][2]["run"] == RUNNER_SETUP and "docker-registry" in RUNNER_SETUP, name


def _runner_plan(families: list[str] | None = None) -> Plan:
    """The default release planned as `cairn ci github` plans it: on the runners' host, whatever this machine has
    (without Docker here, the wheels, images and user-install gates would be blocked or left out)."""
    from cairn.ci.github import runner_host
    from cairn.plan.prepare import host_for, load, make_plan

    manifest, registry = load(None)
    return make_plan(manifest, registry, families, host=runner_host(host_for(manifest)), stages=STAGES)


def _bundle_and_blocked(host) -> tuple[str, set[str]]:
    """The default release planned on ``host``: the bundle's key (its dependencies' outputs left out) and what
    is blocked."""
    from cairn.plan.prepare import load, make_plan

    plan = make_plan(*load(None), host=host, stages=STAGES)
    bundle = plan.by_id()["bundle:release"]
    return bundle.key(dict.fromkeys(bundle.deps, "")), {a.id for a in plan.actions if a.blocked}


@pytest.mark.parametrize("fact", ["engine", "registry", "mmdebstrap", "patchelf"])
def test_a_job_without_the_runner_setup_would_plan_another_release(fact) -> None:
    """Why no job runs in a container: each job plans the whole release, and without the engine, the registry
    or a tool of the setup step its plan blocks work the jobs before it built, and its bundle is another one."""
    from dataclasses import replace

    from cairn.plan.prepare import host_for, load

    manifest, _ = load(None)
    host = replace(host_for(manifest, None), docker_host="unix:///var/run/docker.sock", registry="localhost:5000",
                   registry_id="env:localhost:5000")
    host = replace(host, tools=host.tools | {"mmdebstrap", "patchelf", "git", "apt-get", "dpkg-deb", "pip"})
    key, blocked = _bundle_and_blocked(host)
    assert not blocked
    without = {"engine": replace(host, docker_host=""), "registry": replace(host, registry="", registry_id=""),
               "mmdebstrap": replace(host, tools=host.tools - {"mmdebstrap"}),
               "patchelf": replace(host, tools=host.tools - {"patchelf"})}[fact]
    other_key, other_blocked = _bundle_and_blocked(without)
    assert other_key != key and other_blocked
    if fact in ("mmdebstrap", "patchelf"):
        assert f" {fact}" in RUNNER_SETUP.splitlines()[1]  # the setup step installs it
    if fact == "engine":  # the family wheels wait on the compiles in the build image
        assert {a for a in other_blocked if a.startswith("build:cairn-smoke@")}
        assert {a for a in other_blocked if a.startswith("package:")}


def test_the_workflow_is_planned_for_the_runners_not_for_the_machine_that_writes_it(default_release, tmp_path) -> None:
    """Written on a machine without a Docker Engine, the workflow is the same: its shards are planned on the
    runners' host (``cairn.ci.github.runner_host``), where the bundle depends on every gate."""
    workflow, report, _ = _emit(tmp_path, env=_without_services(tmp_path))
    assert (workflow, report["shards"]) == (default_release[0], default_release[1]["shards"])
    gate_jobs = {s["name"] for s in report["shards"] if s["gates"]}
    assert len(gate_jobs) >= 5 and gate_jobs <= set(workflow["jobs"]["bundle"]["needs"])


def _closure(needs: dict[str, list[str]], job: str) -> set[str]:
    seen: set[str] = set()
    frontier = list(needs.get(job, []))
    while frontier:
        name = frontier.pop()
        if name not in seen:
            seen.add(name)
            frontier.extend(needs.get(name, []))
    return seen


def test_needs_form_a_dag_that_holds_every_dependency_of_every_shard(default_release) -> None:
    workflow, report, _ = default_release
    jobs = workflow["jobs"]
    needs = {name: list(job.get("needs", [])) for name, job in jobs.items()}
    assert all(n in jobs for deps in needs.values() for n in deps)
    assert all(name not in _closure(needs, name) for name in jobs), "needs: has a cycle"

    plan = _runner_plan()
    shard_of = {a: s["name"] for s in report["shards"] for a in s["actions"]}
    assert sorted(shard_of) == sorted(a.id for a in plan.actions)  # every action in exactly one shard
    assert len(shard_of) == sum(len(s["actions"]) for s in report["shards"])
    for action in plan.actions:
        home = shard_of[action.id]
        reachable = {home} | _closure(needs, home)
        assert all(shard_of[d] in reachable for d in action.deps), (action.id, home)
    for shard in report["shards"]:  # what --only names covers the shard: its sinks and what they depend on
        build = jobs[shard["name"]]["steps"][-1]["run"]
        assert sorted(re.findall(r"--only (\S+)", build)) == sorted(shard["only"])
        assert set(shard["only"]) <= set(shard["actions"])


def test_publish_needs_every_gate_job_and_runs_only_when_they_passed(default_release) -> None:
    workflow, report, _ = default_release
    gate_ids = {a.id for a in _runner_plan().actions if a.kind == "gate"}
    gates = {s["name"] for s in report["shards"] if set(s["actions"]) & gate_ids}
    assert len(gates) >= 5  # one per family of the default release, at least
    assert {s["name"] for s in report["shards"] if s["gates"]} == gates
    publish = workflow["jobs"]["publish"]
    assert gates <= set(publish["needs"])
    assert "bundle" in publish["needs"]
    assert "success()" in publish["if"] and "refs/tags/v" in publish["if"] and "refs/heads/main" in publish["if"]
    assert any("cairn publish" in step.get("run", "") for step in publish["steps"])
    for name in gates:  # a gate job fails when a gate fails: it builds the gate actions themselves
        assert "--only gate:" in workflow["jobs"][name]["steps"][-1]["run"]


READ_ONLY = {"CAIRN_CACHE_READ_ACCESS_KEY_ID", "CAIRN_CACHE_READ_SECRET_ACCESS_KEY"}
TRUSTED = "(github.ref == 'refs/heads/main' || startsWith(github.ref, 'refs/tags/v'))"


def _secrets(value: object) -> set[str]:
    return set(re.findall(r"secrets\.([A-Za-z0-9_]+)", json.dumps(value)))


def test_least_privilege_no_write_secret_on_pull_request_no_root_key_publish_behind_an_environment(default_release) -> None:
    """What the workflows let each kind of run touch, read back from the files as GitHub reads them."""
    release, _, path = default_release
    _check_least_privilege(release, _pull_request(path))


def _check_least_privilege(release: dict, pull: dict) -> None:
    workflows = {"release.yml": release, "pull-request.yml": pull}
    # 1. No job that runs on a pull request holds anything but the read-only cache credential.
    for file, data in workflows.items():
        on_pr = {"pull_request", "pull_request_target"} & set(data["on"])
        for name, job in data["jobs"].items():
            if on_pr:
                assert _secrets(job) <= READ_ONLY, (file, name, _secrets(job) - READ_ONLY)
    assert set(pull["on"]) == {"pull_request"} and not {"pull_request", "pull_request_target"} & set(release["on"])
    for name, job in pull["jobs"].items():
        build = job["steps"][-1]["run"]
        assert "--cache-read-only" in build and "--compiler-cache" not in build and "environment" not in job, name
        assert '${AWS_ACCESS_KEY_ID:+--cache "s3://${{ vars.CAIRN_CACHE_BUCKET }}/cairn" --cache-read-only}' in build, name
    # 2. No root key anywhere: no secret names one, and the archives that go to CI are refused holding one.
    every = _secrets(release) | _secrets(pull)
    assert every and not {s for s in every if "ROOT" in s.upper()}
    assert "root-" not in json.dumps(release).replace("-name 'root-*.pem'", "")
    # 3. Publish credentials and the signing keys: in the publish job alone, which has a protected environment
    #    and runs on main or a v* tag only, never on the schedule.
    publish = release["jobs"]["publish"]
    assert publish.get("environment") == "cairn-release" and TRUSTED in publish["if"] and "!= 'schedule'" in publish["if"]
    publishing = {"CAIRN_PUBLISH_ACCESS_KEY_ID", "CAIRN_PUBLISH_SECRET_ACCESS_KEY", "CAIRN_SIGNING_KEYS"}
    assert {n for n, j in release["jobs"].items() if _secrets(j) & publishing} == {"publish"}
    # 4. Every job holding a write secret names an environment (whose deployment rule admits only trusted refs),
    #    and runs only on a trusted ref or on the schedule (which runs on the default branch).
    for name, job in release["jobs"].items():
        written = _secrets(job) - READ_ONLY
        if written:
            assert job.get("environment"), name
            assert TRUSTED in job["if"] or job["if"] == "${{ github.event_name == 'schedule' }}", name
    for name, job in release["jobs"].items():  # shard jobs write the cache with the cache-write environment's key
        if "gates" not in name and name not in ("publish", "refresh") and not name.startswith("gpu-gate-"):
            assert job["environment"] == "cairn-cache-write" and "CAIRN_CACHE_WRITE_ACCESS_KEY_ID" in _secrets(job), name
            assert "!= 'schedule'" in job["if"], name
    # 5. The refresh job is scheduled, holds only the online key and the metadata writer, and renews the metadata.
    assert release["on"].get("schedule") and all("cron" in entry for entry in release["on"]["schedule"])
    refresh = release["jobs"]["refresh"]
    assert refresh["if"] == "${{ github.event_name == 'schedule' }}" and refresh["environment"] == "cairn-online"
    assert _secrets(refresh) == {"CAIRN_ONLINE_KEYS", "CAIRN_REFRESH_ACCESS_KEY_ID", "CAIRN_REFRESH_SECRET_ACCESS_KEY"}
    assert any(step.get("run", "").startswith("cairn refresh ") for step in refresh["steps"])
    # 6. GPU gate jobs: between staging (publish) and promotion, on self-hosted runners labelled by gfx target,
    #    each with its runner's key only, uploading the signed verdicts.
    gpu = {n: j for n, j in release["jobs"].items() if n.startswith("gpu-gate-")}
    assert {j["runs-on"][-1] for j in gpu.values()} == {"gfx942", "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200",
                                                         "gfx1201", "gfx90a", "gfx1030"}
    for name, job in gpu.items():
        target = job["runs-on"][-1]
        assert job["runs-on"][0] == "self-hosted" and job["needs"] == ["publish"], name
        assert _secrets(job) - READ_ONLY == {f"CAIRN_GATE_KEY_{target.upper()}"}, name  # and the cache, read-only
        gate = job["steps"][-2]["run"]
        assert "--cache-read-only" in gate and f"--family {target}" in gate and "--compiler-cache" not in gate, name
        assert "--sign-with" in gate and job["steps"][-1]["with"]["path"] == f"verdicts/{target}"
    # 7. The compiler cache's own credential is the one beside the write key (it, not that key, enters the build
    #    container: tests/execute/test_compiler_cache.py).
    sdk = release["jobs"]["sdk"]
    assert {"CAIRN_COMPILER_CACHE_ACCESS_KEY_ID", "CAIRN_COMPILER_CACHE_SECRET_ACCESS_KEY"} <= set(sdk["env"])
    assert '--compiler-cache "s3://${{ vars.CAIRN_CACHE_BUCKET }}/cairn/compilers"' in sdk["steps"][-1]["run"]
    # 8. Signed cache records: the cache-writer key is held by the trusted refs' shard jobs alone (the jobs of the
    #    cairn-cache-write environment), on their build step; every job that reads the cache, pull requests
    #    included, trusts the repository's public list of writer keys, and no pull-request job holds a key.
    writers = {n for n, j in release["jobs"].items() if j.get("environment") == "cairn-cache-write"}
    assert writers and {n for n, j in release["jobs"].items() if "CAIRN_CACHE_SIGNING_KEY" in _secrets(j)} == writers
    for name in writers:
        assert "CAIRN_CACHE_SIGNING_KEY" in _secrets(release["jobs"][name]["steps"][-1].get("env", {})), name
    for file, data in workflows.items():
        for name, job in data["jobs"].items():
            if "--cache" in json.dumps(job.get("steps", [])):
                assert job["env"].get("CAIRN_CACHE_TRUST") == "publish/cache-writers.json", (file, name)
    assert not any("CAIRN_CACHE_SIGNING_KEY" in json.dumps(job) for job in pull["jobs"].values())


def _break(release: dict, pull: dict, how: str) -> None:
    if how == "write secret in a pull-request job":
        pull["jobs"]["sdk"]["env"]["AWS_ACCESS_KEY_ID"] = "${{ secrets.CAIRN_CACHE_WRITE_ACCESS_KEY_ID }}"
    elif how == "pull_request in the release workflow":
        release["on"]["pull_request"] = {}
    elif how == "root key secret":
        release["jobs"]["publish"]["steps"][-2]["env"]["CAIRN_ROOT_KEYS"] = "${{ secrets.CAIRN_ROOT_KEYS }}"
    elif how == "publish without an environment":
        del release["jobs"]["publish"]["environment"]
    elif how == "signing keys in a shard job":
        release["jobs"]["sdk"]["env"]["K"] = "${{ secrets.CAIRN_SIGNING_KEYS }}"
    elif how == "refresh not scheduled":
        del release["on"]["schedule"]
    elif how == "a shard job on any branch":
        release["jobs"]["sdk"]["if"] = "${{ github.event_name != 'schedule' }}"
    elif how == "cache-writer key in a pull-request job":
        pull["jobs"]["sdk"]["steps"][-1]["env"] = {"CAIRN_CACHE_SIGNING_KEY": "${{ secrets.CAIRN_CACHE_SIGNING_KEY }}"}
    elif how == "cache-writer key in the publish job":
        release["jobs"]["publish"]["env"]["CAIRN_CACHE_SIGNING_KEY"] = "${{ secrets.CAIRN_CACHE_SIGNING_KEY }}"
    elif how == "a pull-request job without the trust list":
        del pull["jobs"]["sdk"]["env"]["CAIRN_CACHE_TRUST"]


@pytest.mark.parametrize("how", ["write secret in a pull-request job", "pull_request in the release workflow", "root key secret",
                                 "publish without an environment", "signing keys in a shard job", "refresh not scheduled",
                                 "a shard job on any branch", "cache-writer key in a pull-request job",
                                 "cache-writer key in the publish job", "a pull-request job without the trust list"])
def test_the_least_privilege_check_can_fail(default_release, how) -> None:
    """The reading above is a real check: each of these changes to the workflows fails it."""
    release, _, path = default_release
    release, pull = json.loads(json.dumps(release)), _pull_request(path)
    _break(release, pull, how)
    with pytest.raises(AssertionError):
        _check_least_privilege(release, pull)


@pytest.mark.parametrize("credential", ["read-only secret", "a fork's pull request: none"])
def test_a_pull_request_build_reads_the_cache_with_its_secret_and_builds_without_one(default_release, tmp_path, credential) -> None:
    """The pull-request build step, run by bash as GitHub would run it (``cairn`` replaced by a function printing
    its arguments): with the read-only credential it asks for the cache read-only; a fork's run, whose secrets
    GitHub renders empty, asks for no cache, instead of failing at the first request."""
    script = _pull_request(default_release[2])["jobs"]["wheels"]["steps"][-1]["run"]
    script = script.replace("${{ vars.CAIRN_CACHE_BUCKET }}", BUCKET)
    assert "${{" not in script
    env = {"PATH": os.environ["PATH"], "AWS_ACCESS_KEY_ID": "AKIA-READ" if credential == "read-only secret" else ""}
    proc = subprocess.run(["bash", "-euc", 'cairn() { printf "%s\\n" "$@"; }\n' + script], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.splitlines()
    assert words[:3] == ["build", "--store", ".cairn"]
    if credential == "read-only secret":
        assert words[-3:] == ["--cache", f"s3://{BUCKET}/cairn", "--cache-read-only"]
    else:
        assert "--cache" not in words and "--cache-read-only" not in words and words[-1] != ""


@pytest.mark.parametrize("holds_root", [False, True])
def test_a_key_archive_holding_a_root_key_is_refused_by_the_job_that_unpacks_it(tmp_path, holds_root) -> None:
    """The step that unpacks the signing keys, run as the workflow writes it: a root key in the archive stops it."""
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("public.json", "root.json", "targets.pem", "online.pem", *(["root-1.pem"] if holds_root else [])):
        (keys / name).write_text("x")
    archive = subprocess.run(["tar", "-czf", "-", "-C", str(keys), "."], capture_output=True, check=True).stdout
    import base64

    runner = tmp_path / "runner"
    runner.mkdir()
    proc = subprocess.run(["bash", "-euc", UNPACK_KEYS.replace("{name}", "CAIRN_SIGNING_KEYS")], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "RUNNER_TEMP": str(runner),
                               "CAIRN_SIGNING_KEYS": base64.b64encode(archive).decode()})
    if holds_root:
        assert proc.returncode == 1 and "root keys never go to CI" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert (runner / "keys" / "online.pem").is_file()


def test_timings_size_each_shard_and_its_timeout(tmp_path) -> None:
    plan = _runner_plan(["gfx1151"])
    seconds = {a.id: 60.0 for a in plan.actions}
    report = tmp_path / "last-build.json"
    report.write_text(json.dumps({"actions": {a: {"status": "ran", "seconds": s} for a, s in seconds.items()}}))
    workflow, shards, _ = _emit(tmp_path, "--family", "gfx1151", "--timings", str(report))
    for shard in shards["shards"]:
        assert shard["seconds"] == 60.0 * len(shard["actions"])
        assert workflow["jobs"][shard["name"]]["timeout-minutes"] == min(360, max(15, 3 * len(shard["actions"]) + 10))

    del seconds["assemble:sdk"]
    report.write_text(json.dumps({"actions": {a: {"status": "ran", "seconds": s} for a, s in seconds.items()}}))
    workflow, shards, path = _emit(tmp_path, "--family", "gfx1151", "--timings", str(report))
    sdk = next(s for s in shards["shards"] if "assemble:sdk" in s["actions"])
    assert sdk["seconds"] is None and sdk["unmeasured"] == 1 and workflow["jobs"][sdk["name"]]["timeout-minutes"] == 360
    assert f"duration unknown (1 of {len(sdk['actions'])} actions not in the timings)" in path.read_text()


def test_the_critical_path_is_the_longest_chain_of_jobs_and_unknown_while_any_job_is(tmp_path) -> None:
    """The sharded build's wall time with enough runners: the one llama.cpp compile dominates when its action is
    the slowest, so the chain runs through the shard that holds it, then (the cuts timed longest after it) a
    family's cut of it, and ends in gates or the bundle."""
    plan = _runner_plan()
    assert any(a.id.startswith("gate:user-install") for a in plan.actions)
    seconds = {a.id: 10.0 for a in plan.actions}
    seconds["build:llama.cpp"] = 2000.0
    for cut in (a for a in seconds if a.startswith("build:llama.cpp@")):
        seconds[cut] = 400.0  # longer than the neutral wheels shard, so the chain goes through one family's cut
    report = tmp_path / "last-build.json"
    report.write_text(json.dumps({"actions": {a: {"status": "ran", "seconds": s} for a, s in seconds.items()}}))
    _, data, _ = _emit(tmp_path, "--timings", str(report))
    by_name = {s["name"]: s for s in data["shards"]}
    path = data["critical_path"]
    assert any("build:llama.cpp" in by_name[n]["actions"] for n in path["shards"])
    assert any(a.startswith("build:llama.cpp@") for n in path["shards"] for a in by_name[n]["actions"])
    assert path["seconds"] == sum(by_name[n]["seconds"] for n in path["shards"])
    for earlier, later in itertools.pairwise(path["shards"]):
        assert earlier in by_name[later]["needs"]  # a chain of jobs that wait for each other
    assert path["shards"][-1].startswith(("gates", "bundle"))

    del seconds["assemble:sdk"]
    report.write_text(json.dumps({"actions": {a: {"status": "ran", "seconds": s} for a, s in seconds.items()}}))
    _, data, _ = _emit(tmp_path, "--timings", str(report))
    assert data["critical_path"] == {"shards": [], "seconds": None}


def _toy_plan() -> Plan:
    """Wheels actions that cross between the family-neutral and the family shard both ways."""
    return Plan("toy.toml", "0" * 64, (
        Action("fetch:a", "fetch", {}),
        Action("package:base", "package", {}, ("fetch:a",)),
        Action("package:x@fam", "package", {}, ("fetch:a",), family="fam"),
        Action("package:neutral", "package", {}, ("package:base", "package:x@fam")),  # neutral: two families meet
        Action("package:y@fam", "package", {}, ("package:neutral",), family="fam"),
        Action("index:fam", "index", {}, ("package:y@fam",)),
    ))


def test_shards_that_would_need_each_other_are_merged_into_one() -> None:
    shards: tuple[Shard, ...] = shard_plan(_toy_plan(), ("fam",))
    assert [(s.name, s.actions, s.needs) for s in shards] == [
        ("sdk", ("fetch:a",), ()),
        ("wheels", ("package:base", "package:x@fam", "package:neutral", "package:y@fam", "index:fam"), ("sdk",)),
    ]
    assert shards[1].only == ("index:fam",)


@pytest.mark.parametrize(("args", "expected"), [
    (["--timings", "MISSING"], "MISSING: no such file"),
    (["--timings", "NOT_A_REPORT"], "not a build report: no 'actions' object"),
    (["--cache-prefix", "../elsewhere"], "--cache-prefix: '../elsewhere' is not a usable bucket prefix"),
    (["--family", "gfx9999"], "gfx9999"),
    (["--pr-out", "RELEASE"], "is also --out"),
])
def test_bad_input_gets_one_line_and_writes_nothing(tmp_path, args, expected) -> None:
    (tmp_path / "NOT_A_REPORT").write_text("[1, 2]")
    args = [str(tmp_path / a) if a in ("MISSING", "NOT_A_REPORT") else a for a in args]
    expected = expected.replace("MISSING", str(tmp_path / "MISSING"))
    out = tmp_path / "release.yml"
    args = [str(out) if a == "RELEASE" else a for a in args]
    proc = cairn("ci", "github", *args, "--out", str(out))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists() and not (tmp_path / "pull-request.yml").exists()


# -- the shards, run for real -------------------------------------------------------------------------

def _without_services(tmp_path: Path) -> dict[str, str]:
    """This environment with no Docker Engine or registry in sight (``.ci/run`` starts both for the suite)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DOCKER_HOST", "CAIRN_REGISTRY")}
    env["CAIRN_SERVICES_DIR"] = str(tmp_path / "no-services")
    return env


def _machine(tmp_path: Path, name: str, endpoint: str) -> dict:
    """A runner of its own: working directory (so its own .cairn store), HOME; the one bucket; no services."""
    cwd = tmp_path / "runners" / name
    (cwd / "home").mkdir(parents=True)
    env = {**_without_services(tmp_path), "HOME": str(cwd / "home"), "CAIRN_S3_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1", "CAIRN_S3_RETRY_SECONDS": "5",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **cache_writer_env(tmp_path / "cache-writer")}
    env.pop("CAIRN_CACHE", None)
    return {"cwd": cwd, "env": env}



def _order(jobs: dict) -> list[str]:
    done: list[str] = []
    while len(done) < len(jobs):
        done.append(next(n for n, j in jobs.items() if n not in done and set(j.get("needs", [])) <= set(done)))
    return done


@pytest.mark.s3
def test_the_shard_jobs_as_separate_runners_build_the_same_release_as_one_build(tmp_path) -> None:
    """Every job's own ``cairn build`` command, as the workflow writes it, run in order on its own "runner": the
    mechanics of sharding (what each job runs, fetches and hands on) for this toy release.

    The runners here have no Docker Engine, so each plans the toy release without its images and gates, and
    the images, gates, user-install and publish jobs are left out: on the workflow's runners, which have one, the bundle waits
    on the gate jobs, and this toy's SDK (three text files) fails its in-container gate by design
    (``tests/containers/test_image_handover.py`` runs that side). The default release's jobs, images and gates included,
    run as the workflow says in ``bench/shards_bench.py``."""
    www = tmp_path / "www"
    www.mkdir()
    with serve_directory(www) as base, moto_s3(BUCKET) as s3:
        manifest = archive_release(tmp_path, www, base, name="ci-test", families=("gfx90a", "gfx1151"))
        workflow, report, _ = _emit(tmp_path, str(manifest), "--cache-prefix", "ci/run1", env=_without_services(tmp_path))
        stage = {s["name"]: s["stage"] for s in report["shards"]}
        members = {s["name"]: set(s["actions"]) for s in report["shards"]}
        jobs = workflow["jobs"]
        left_out = {n for n in jobs if stage.get(n) in ("images", "gates", "user-install") or n not in stage}  # publish, GPU, refresh
        run = [n for n in _order(jobs) if n not in left_out]
        assert {"sdk", "wheels", "bundle"} <= set(run)

        outputs: dict[str, str] = {}
        for name in run:
            script = jobs[name]["steps"][-1]["run"].replace("${{ vars.CAIRN_CACHE_BUCKET }}", BUCKET)
            assert f'--compiler-cache "s3://{BUCKET}/ci/run1/compilers"' in script  # a trusted ref's job
            assert "${{" not in script, script
            machine = _machine(tmp_path, name, s3["endpoint"])
            proc = subprocess.run(["bash", "-euc", script], cwd=machine["cwd"], env=machine["env"],
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
            built = json.loads((machine["cwd"] / ".cairn" / "last-build.json").read_text())["actions"]
            ran = {a for a, o in built.items() if o["status"] == "ran"}
            assert ran <= members[name], f"{name} rebuilt {sorted(ran - members[name])}, which an earlier job built"
            assert members[name] <= set(built)
            for action_id, outcome in built.items():
                assert outcome["status"] in ("ran", "cached"), (name, action_id, outcome)
                assert outputs.setdefault(action_id, outcome["output"]) == outcome["output"], action_id

        one = _machine(tmp_path, "one-build", s3["endpoint"])
        proc = cairn("build", str(manifest), "--store", "store", "--json", "--only", "bundle:release", "--only", "coverage:release", cwd=one["cwd"], env=one["env"])
        assert proc.returncode == 0, proc.stderr
        alone = {a: o["output"] for a, o in json.loads(proc.stdout)["actions"].items()}
        assert outputs["bundle:release"] == alone["bundle:release"] and outputs["assemble:sdk"] == alone["assemble:sdk"]
        assert {a: outputs[a] for a in alone} == alone
        assert set(outputs) == set(alone)
