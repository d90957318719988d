"""Shards → a GitHub Actions workflow: one job per shard, ``needs:`` from the shard graph, a final ``publish``.

Every job checks the repository out with an action pinned by full commit SHA (never a tag or a branch, which
can be moved under us), installs this checkout of Cairn, and runs ``cairn build MANIFEST --only <shard>`` against
the shared S3 action cache (``cairn.store.shared``) — read-only for pull requests, which must never write what a
release later trusts. Gate shards are jobs of their own: a failed gate fails its action, so its ``cairn build``
exits 1 and the job fails. ``publish`` needs every gate job and the bundle's job, so it runs only when all of
them passed, and never for a pull request; it stages the release (promotion stays a person's decision).

Every job runs on the runner itself, with its Docker Engine and a registry at one address (``DOCKER_ENV``,
``RUNNER_SETUP``), whether or not its own actions run a container. Each job's ``cairn build`` plans the whole
release before it builds its shard, and the plan depends on the host: without an engine and a registry the
image and gate actions are blocked, every action that waits on them too (the wheels wait on the compiles in
the build image), and the bundle records them as not built — a different bundle, under a different key. So a
job in a ``container:`` (which has no Docker socket and other tools) would plan another release than the jobs
beside it and than ``nox -s build``; the build image is used by digest where it is used, by the ``docker run``
of every compile.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cairn.ci.shards import Shard
from cairn.errors import InputError
from cairn.plan.probe import Host
from cairn.plan.toolchain import IMAGE_ID

# actions/checkout v4.2.2 — the tag's commit, verified against the actions/checkout repository's refs/tags/v4.2.2.
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"  # v4.2.2
RUNS_ON = "ubuntu-24.04"
BUNDLE_ACTION = "bundle:release"
_JOB_ID = re.compile(r"[^A-Za-z0-9_-]")
# Every job: the runner's own Docker Engine, and Debian/Ubuntu's docker-registry, which the package starts on
# localhost:5000 — the same address on every runner, so a push cached by one job keeps its key in the next; the
# next job's registry is empty, and every action that uses a pushed image pushes it again from the store when its
# registry lacks it (cairn.services.registry_push). The tools are facts of the plan too (cairn.plan.probe): without
# mmdebstrap the images' base is blocked, without patchelf the wheels are.
DOCKER_ENV = {"DOCKER_HOST": "unix:///var/run/docker.sock", "CAIRN_REGISTRY": "localhost:5000"}
RUNNER_SETUP = ("sudo apt-get update -q\n"
                "sudo apt-get install -y -q --no-install-recommends docker-registry skopeo mmdebstrap patchelf\n"
                "curl --silent --fail --retry 10 --retry-connrefused http://localhost:5000/v2/ > /dev/null")
# what the planner finds on every runner (cairn.plan.probe.probe_host): the hosted image's git, apt and pip (the
# job's venv), its Docker CLI, and what RUNNER_SETUP installs; no hipcc or cmake (compiles run in the build image)
RUNNER_TOOLS = frozenset({"git", "apt-get", "dpkg-deb", "pip", "docker", "mmdebstrap", "patchelf"})
READ_ONLY_ON_PR = "${{ github.event_name == 'pull_request' && '--cache-read-only' || '' }}"
# sccache in S3 for the compiles of every job but a pull request's: sccache has no read-only mode for S3, and an
# untrusted job must not write what trusted jobs read (cairn.execute.compiler_cache)
COMPILER_CACHE_UNLESS_PR = ("${{{{ github.event_name != 'pull_request' && "
                            "format('--compiler-cache s3://{{0}}/{prefix}/compilers', vars.CAIRN_CACHE_BUCKET) || '' }}}}")


@dataclass(frozen=True)
class Settings:
    """What the workflow needs beyond the shards: how each job names the manifest and where the cache is."""

    manifest: str  # as the jobs pass it to cairn ("" = the default release)
    release: str
    families: tuple[str, ...] = ()  # the --family flags the plan was made with (repeated in every job)
    cache_prefix: str = "cairn"
    runs_on: str = RUNS_ON
    header: Sequence[str] = field(default=())


def runner_host(host: Host) -> Host:
    """The host every job plans on, for sharding the plan: the jobs' engine, registry and tools in place of
    whatever machine runs ``cairn ci github``. Planned on a laptop without Docker, the image and gate actions
    would be blocked and the bundle's job would not need the gate jobs — while on the runners the bundle
    depends on every gate."""
    return replace(host, tools=RUNNER_TOOLS, hipcc_version="", hip_targets=frozenset(),
                   docker_host=DOCKER_ENV["DOCKER_HOST"], registry=DOCKER_ENV["CAIRN_REGISTRY"],
                   registry_id=f"env:{DOCKER_ENV['CAIRN_REGISTRY']}")


def job_id(shard_name: str) -> str:
    """A shard name as a GitHub job id (letters, digits, ``-`` and ``_``; starts with a letter or ``_``)."""
    name = _JOB_ID.sub("-", shard_name)
    return name if re.match(r"^[A-Za-z_]", name) else f"_{name}"


def workflow(shards: Sequence[Shard], settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The workflow as data, and the comments to write above its jobs."""
    ids = {s.name: job_id(s.name) for s in shards}
    if len(set(ids.values())) != len(ids):
        raise InputError("plan", "two shards map to one GitHub job id", "rename the families so they differ in more than punctuation")
    jobs: dict[str, Any] = {}
    comments: dict[str, list[str]] = {}
    for shard in shards:
        _check_ids(shard.actions)
        jobs[ids[shard.name]] = _shard_job(shard, ids, settings)
        comments[f"jobs.{ids[shard.name]}"] = _describe(shard, settings)
    gates = [ids[s.name] for s in shards if s.is_gate]
    bundle = [ids[s.name] for s in shards if BUNDLE_ACTION in s.actions]
    if bundle:
        jobs["publish"] = _publish_job([*gates, *(b for b in bundle if b not in gates)], settings)
        comments["jobs.publish"] = [f"publish: runs only when every gate job ({len(gates)}) and the bundle job passed; "
                                    "never for a pull request. Stages the release; promotion is `cairn promote`."]
    data = {
        "name": f"release {settings.release}",
        "on": {"push": {"branches": ["main"]}, "pull_request": {}, "workflow_dispatch": {}},
        "permissions": {"contents": "read"},
        "concurrency": {"group": "release-${{ github.ref }}", "cancel-in-progress": False},
        "jobs": jobs,
    }
    return data, comments


def _check_ids(action_ids: Sequence[str]) -> None:
    for action_id in action_ids:
        if "${{" in action_id:
            raise InputError(action_id, "an action id holds '${{', which GitHub would evaluate as an expression",
                             "rename the component or recipe it comes from")


def _describe(shard: Shard, settings: Settings) -> list[str]:
    size = (f"estimated {shard.seconds:.0f} s (sum of measured action times)" if shard.seconds is not None
            else "duration unknown" + (f" ({shard.unmeasured} of {len(shard.actions)} actions not in the timings)"
                                       if shard.unmeasured else " (no --timings given)"))
    lines = [f"{shard.name}: {len(shard.actions)} actions, {size}"]
    if IMAGE_ID in shard.actions:
        lines.append(f"builds the build image ({IMAGE_ID}) every compile of the later jobs runs in")
    return lines


def _cairn_build(only: Sequence[str], settings: Settings, *, read_only: bool) -> str:
    """The job's build command, one option per line (a shard can name dozens of actions)."""
    words = ["cairn build", *([shlex.quote(settings.manifest)] if settings.manifest else []), "--store .cairn"]
    words += [f"--family {shlex.quote(family)}" for family in settings.families]
    words += [f"--only {shlex.quote(action_id)}" for action_id in only]
    words.append(f'--cache "s3://${{{{ vars.CAIRN_CACHE_BUCKET }}}}/{settings.cache_prefix}"')
    words.append("--cache-read-only" if read_only else READ_ONLY_ON_PR)
    if not read_only:
        words.append(COMPILER_CACHE_UNLESS_PR.format(prefix=settings.cache_prefix))
    return " \\\n  ".join(words)


def _steps(build: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {"name": "check out", "uses": CHECKOUT, "with": {"persist-credentials": False}},
        {"name": "install cairn", "run": 'python3 -m venv "$RUNNER_TEMP/cairn"\n'
                                         '"$RUNNER_TEMP/cairn/bin/pip" install --quiet .\n'
                                         'echo "$RUNNER_TEMP/cairn/bin" >> "$GITHUB_PATH"'},
        {"name": "registry", "run": RUNNER_SETUP},
        {"name": "build", "run": build},
    ]
    return steps


def _env() -> dict[str, str]:
    return {
        "CAIRN_S3_ENDPOINT": "${{ vars.CAIRN_S3_ENDPOINT }}",
        "AWS_ACCESS_KEY_ID": "${{ secrets.CAIRN_CACHE_ACCESS_KEY_ID }}",
        "AWS_SECRET_ACCESS_KEY": "${{ secrets.CAIRN_CACHE_SECRET_ACCESS_KEY }}",
        "AWS_DEFAULT_REGION": "${{ vars.CAIRN_CACHE_REGION || 'us-east-1' }}",
    }


def _shard_job(shard: Shard, ids: dict[str, str], settings: Settings) -> dict[str, Any]:
    job: dict[str, Any] = {"name": shard.name, "runs-on": settings.runs_on}
    if shard.needs:
        job["needs"] = [ids[n] for n in shard.needs]
    job["timeout-minutes"] = shard.timeout_minutes()
    job["env"] = {**_env(), **DOCKER_ENV}
    job["steps"] = _steps(_cairn_build(shard.only, settings, read_only=False))
    return job


def _publish_job(needs: list[str], settings: Settings) -> dict[str, Any]:
    job: dict[str, Any] = {"name": "publish", "runs-on": settings.runs_on, "needs": needs,
                           "if": "${{ success() && github.event_name != 'pull_request' }}"}
    job["timeout-minutes"] = 60
    job["env"] = {**_env(), **DOCKER_ENV, "CAIRN_PUBLISH_TO": "${{ vars.CAIRN_PUBLISH_TO }}"}
    steps = _steps(_cairn_build([BUNDLE_ACTION], settings, read_only=True))
    steps.append({"name": "signing keys", "env": {"CAIRN_RELEASE_KEYS": "${{ secrets.CAIRN_RELEASE_KEYS }}"},
                  "run": 'mkdir -p "$RUNNER_TEMP/keys"\n'
                         'printf %s "$CAIRN_RELEASE_KEYS" | base64 -d | tar -xz -C "$RUNNER_TEMP/keys"'})
    steps.append({"name": "stage the release",
                  "run": 'cairn publish --store .cairn --to "$CAIRN_PUBLISH_TO" --keys "$RUNNER_TEMP/keys" --stage-only'})
    job["steps"] = steps
    return job
