"""Shards → two GitHub Actions workflows, split by trust: the release workflow and the pull-request workflow.

Who may write what is decided by which credentials a job can reach, not by what its script does: a pull
request from the repository itself can edit any workflow file, so a job that merely *does not call* the
write path still exposes every secret named in its file. So the two kinds of run get separate files:

- ``release.yml`` (push to ``main``, tags ``v*``, manual runs, a schedule): one job per shard, ``needs:`` from
  the shard graph, each writing the shared S3 action cache (``cairn.store.shared``) with credentials kept in
  the ``cairn-cache-write`` environment, whose deployment rule admits only ``main`` and ``v*`` tags; every job
  also refuses to run on any other ref. ``publish`` stages the release with the online keys and publish
  credentials of the ``cairn-release`` environment (required reviewers); one GPU gate job per gfx target on a
  self-hosted runner labelled with that target gates the staged release and uploads its signed verdicts; a
  scheduled ``refresh`` job re-signs timestamp and snapshot with the online key alone (``cairn-online``).
- ``pull-request.yml`` (``pull_request``): the same shard jobs, reading the cache with a read-only credential
  (``--cache-read-only``; a fork's pull request gets no secret and builds without the cache), no compiler
  cache (sccache cannot read S3 without writing it), no publish, no keys.

A cache record is trusted because a trusted writer signed it: the trusted refs' shard jobs sign every record they
push with the cache-writer key (``CAIRN_CACHE_SIGNING_KEY``, a secret of the ``cairn-cache-write`` environment),
and every job reads only records signed by a key of ``publish/cache-writers.json`` (public, in the repository;
``cairn.store.signing``). Pull-request jobs hold that list and no key, so a record they could plant is never used.
That only the ``cairn-cache-write`` credential may write under the cache prefix (a bucket policy) is defence in
depth. The root keys
never reach CI: the signing archive holds the online roles' keys, and the step that unpacks it fails if a root
key is inside.

Every job checks the repository out with an action pinned by full commit SHA (never a tag or a branch, which
can be moved under us), installs this checkout of Cairn, and runs ``cairn build MANIFEST --only <shard>``.
Gate shards are jobs of their own: a failed gate fails its action, so its ``cairn build`` exits 1 and the job
fails; ``publish`` needs every gate job and the bundle's job.

Every build job runs on the runner itself, with its Docker Engine and a registry at one address (``DOCKER_ENV``,
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
# actions/upload-artifact v4.6.2 — the tag's commit, read from the action repository's refs/tags/v4.6.2 (= v4 today)
UPLOAD_ARTIFACT = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"  # v4.6.2

# Trusted refs: the only ones whose jobs may reach a write credential. The environments below admit only these
# refs (their deployment rules, set in the repository's settings); the jobs' own ``if:`` says the same, so a
# manual run from another branch skips them instead of failing at the environment.
TRUSTED_REF = "(github.ref == 'refs/heads/main' || startsWith(github.ref, 'refs/tags/v'))"
BUILD_IF = f"${{{{ github.event_name != 'schedule' && {TRUSTED_REF} }}}}"
PUBLISH_IF = f"${{{{ success() && github.event_name != 'schedule' && {TRUSTED_REF} }}}}"
REFRESH_IF = "${{ github.event_name == 'schedule' }}"
REFRESH_CRON = "17 */6 * * *"  # four times a day: a 1-day timestamp is re-signed well before it expires

CACHE_WRITE_ENV = "cairn-cache-write"  # deployment rule: main and v* tags
RELEASE_ENV = "cairn-release"  # deployment rule: main and v* tags; required reviewers
ONLINE_ENV = "cairn-online"  # deployment rule: main (the schedule runs there)
GATE_ENV = "cairn-gpu-gates"  # deployment rule: main and v* tags

# secret → (the environment that holds it, or "" for a repository secret any run of any branch can read; what it may do)
CACHE_READ = ("CAIRN_CACHE_READ_ACCESS_KEY_ID", "CAIRN_CACHE_READ_SECRET_ACCESS_KEY")
CACHE_WRITE = ("CAIRN_CACHE_WRITE_ACCESS_KEY_ID", "CAIRN_CACHE_WRITE_SECRET_ACCESS_KEY")
COMPILER_CACHE = ("CAIRN_COMPILER_CACHE_ACCESS_KEY_ID", "CAIRN_COMPILER_CACHE_SECRET_ACCESS_KEY")
PUBLISH = ("CAIRN_PUBLISH_ACCESS_KEY_ID", "CAIRN_PUBLISH_SECRET_ACCESS_KEY")
REFRESH = ("CAIRN_REFRESH_ACCESS_KEY_ID", "CAIRN_REFRESH_SECRET_ACCESS_KEY")
CACHE_SIGNING_KEY = "CAIRN_CACHE_SIGNING_KEY"  # the cache-writer key's PEM (cairn keys cache-writer)
CACHE_TRUST = "publish/cache-writers.json"  # in the checkout: the public keys whose cache records every job uses
SIGNING_KEYS = "CAIRN_SIGNING_KEYS"  # targets, online, provenance and image keys + public.json + root.json; no root key
ONLINE_KEYS = "CAIRN_ONLINE_KEYS"  # online.pem + public.json + root.json
SECRETS: dict[str, tuple[str, str]] = {
    **{name: ("", "read the action cache (GetObject, ListBucket on <bucket>/<prefix>/)") for name in CACHE_READ},
    **{name: (CACHE_WRITE_ENV, "write the action cache (PutObject, DeleteObject on <bucket>/<prefix>/)") for name in CACHE_WRITE},
    **{name: (CACHE_WRITE_ENV, "read and write the compiler cache only (<bucket>/<prefix>/compilers/)") for name in COMPILER_CACHE},
    CACHE_SIGNING_KEY: (CACHE_WRITE_ENV, f"sign the action cache's records (its public entry is in {CACHE_TRUST})"),
    **{name: (RELEASE_ENV, "write the release repository (<publish bucket>/<prefix>/)") for name in PUBLISH},
    **{name: (ONLINE_ENV, "write the repository's metadata/ only") for name in REFRESH},
    SIGNING_KEYS: (RELEASE_ENV, "sign targets, snapshot, timestamp, provenance and images (no root key)"),
    ONLINE_KEYS: (ONLINE_ENV, "sign snapshot and timestamp"),
}
WRITE_SECRETS = frozenset(name for name in SECRETS if name not in CACHE_READ)
GATE_KEY_PREFIX = "CAIRN_GATE_KEY_"  # + the gfx target in capitals: one runner key per gate job, in GATE_ENV
# The GPU host's side: gate the staged release on this runner's GPU and sign each verdict (an in-toto statement
# in a DSSE envelope) with the runner's key, for `cairn promote --gates` to verify.
# On the GPU runner: build the target's slice from the cache (read-only; the GPU gate itself runs here, its key
# names this host's GPU), then sign the GPU gate's verdicts with the runner's key (cairn.gates.attest).
GATE_COMMAND = ("{build} \\\n  --family {target}\n"
                "cairn gate --store .cairn --sign-with \"$RUNNER_TEMP/gate-key.pem\" --sign-gate gpu "
                "--attest-out \"verdicts/{target}\"")
# Unpack a key archive and refuse it when it holds a root key: those stay offline (docs/publishing.md).
UNPACK_KEYS = ('umask 077\n'
               'mkdir -p "$RUNNER_TEMP/keys"\n'
               'printf %s "${name}" | base64 -d | tar -xz -C "$RUNNER_TEMP/keys"\n'
               'if [ -n "$(find "$RUNNER_TEMP/keys" -name \'root-*.pem\')" ]; then\n'
               '  echo "{name} holds a root key: root keys never go to CI, remove them from the archive" >&2; exit 1\n'
               'fi')


@dataclass(frozen=True)
class Settings:
    """What the workflow needs beyond the shards: how each job names the manifest and where the cache is."""

    manifest: str  # as the jobs pass it to cairn ("" = the default release)
    release: str
    families: tuple[str, ...] = ()  # the --family flags the plan was made with (repeated in every job)
    cache_prefix: str = "cairn"
    runs_on: str = RUNS_ON
    header: Sequence[str] = field(default=())
    version: str = ""  # the release version the GPU gate jobs gate
    gpu_targets: tuple[str, ...] = ()  # one GPU gate job per target, on a self-hosted runner with that label


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




def _shard_jobs(shards: Sequence[Shard], ids: dict[str, str], settings: Settings, *, trusted: bool
                ) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Every shard's job (``trusted``: a trusted ref's, which writes the cache) and the comment above each."""
    jobs = {ids[shard.name]: _shard_job(shard, ids, settings, trusted=trusted) for shard in shards}
    comments = {f"jobs.{ids[shard.name]}": _describe(shard, settings) for shard in shards}
    return jobs, comments


def workflow(shards: Sequence[Shard], settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The release workflow as data (trusted refs only), and the comments to write above its jobs."""
    ids = _ids(shards)
    jobs, comments = _shard_jobs(shards, ids, settings, trusted=True)
    gates = [ids[s.name] for s in shards if s.is_gate]
    bundle = [ids[s.name] for s in shards if BUNDLE_ACTION in s.actions]
    if bundle:
        jobs["publish"] = _publish_job([*gates, *(b for b in bundle if b not in gates)], settings)
        comments["jobs.publish"] = [f"publish: runs only when every gate job ({len(gates)}) and the bundle job passed, on main "
                                    f"or a v* tag, after a reviewer approves the {RELEASE_ENV} environment. Stages the "
                                    "release; promotion is `cairn promote --gates` with the GPU gate jobs' verdicts."]
        for target in settings.gpu_targets:
            name = job_id(f"gpu-gate-{target}")
            jobs[name] = _gpu_gate_job(target, settings)
            comments[f"jobs.{name}"] = [f"GPU gates on a self-hosted runner labelled {target}: gates the staged release "
                                        "and uploads the verdicts, signed with this runner's key, as an artifact"]
    jobs["refresh"] = _refresh_job(settings)
    comments["jobs.refresh"] = [f"refresh: scheduled ({REFRESH_CRON}); re-signs timestamp and snapshot with the online "
                                "key before they expire, and nothing else"]
    data = {
        "name": f"release {settings.release}",
        "on": {"push": {"branches": ["main"], "tags": ["v*"]}, "workflow_dispatch": {},
               "schedule": [{"cron": REFRESH_CRON}]},
        "permissions": {"contents": "read"},
        # the schedule has a group of its own: in one group with main's pushes, a scheduled run arriving while a
        # push's run waits would cancel that waiting run (GitHub keeps one pending run per group)
        "concurrency": {"group": "release-${{ github.event_name == 'schedule' && 'refresh' || github.ref }}",
                        "cancel-in-progress": False},
        "jobs": jobs,
    }
    return data, comments


def pull_request_workflow(shards: Sequence[Shard], settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pull-request workflow: the same shard jobs, the cache read-only, no write credential, no key."""
    ids = _ids(shards)
    jobs, comments = _shard_jobs(shards, ids, settings, trusted=False)
    data = {
        "name": f"pull request {settings.release}",
        "on": {"pull_request": {}},
        "permissions": {"contents": "read"},
        "concurrency": {"group": "pull-request-${{ github.ref }}", "cancel-in-progress": True},
        "jobs": jobs,
    }
    return data, comments


def _ids(shards: Sequence[Shard]) -> dict[str, str]:
    ids = {s.name: job_id(s.name) for s in shards}
    if len(set(ids.values())) != len(ids):
        raise InputError("plan", "two shards map to one GitHub job id", "rename the families so they differ in more than punctuation")
    for shard in shards:
        _check_ids(shard.actions)
    return ids


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


def cache_url(settings: Settings) -> str:
    return f"s3://${{{{ vars.CAIRN_CACHE_BUCKET }}}}/{settings.cache_prefix}"


def _cairn_build(only: Sequence[str], settings: Settings, *, mode: str) -> str:
    """The job's build command, one option per line (a shard can name dozens of actions).

    ``mode``: ``write`` (a trusted ref's shard job: writes the action cache, compiles through the compiler cache),
    ``read`` (the publish job: reads the bundle from the cache), ``pull-request`` (reads the cache when the run has
    its read-only credential — a fork's pull request has none and builds without it)."""
    words = ["cairn build", *([shlex.quote(settings.manifest)] if settings.manifest else []), "--store .cairn"]
    words += [f"--family {shlex.quote(family)}" for family in settings.families]
    words += [f"--only {shlex.quote(action_id)}" for action_id in only]
    if mode == "pull-request":
        words.append(f'${{AWS_ACCESS_KEY_ID:+--cache "{cache_url(settings)}" --cache-read-only}}')
    else:
        words.append(f'--cache "{cache_url(settings)}"')
        if mode == "read":
            words.append("--cache-read-only")
        else:
            words.append(f'--compiler-cache "s3://${{{{ vars.CAIRN_CACHE_BUCKET }}}}/{settings.cache_prefix}/compilers"')
    return " \\\n  ".join(words)


def _checkout_and_install() -> list[dict[str, Any]]:
    return [
        {"name": "check out", "uses": CHECKOUT, "with": {"persist-credentials": False}},
        {"name": "install cairn", "run": 'python3 -m venv "$RUNNER_TEMP/cairn"\n'
                                         '"$RUNNER_TEMP/cairn/bin/pip" install --quiet .\n'
                                         'echo "$RUNNER_TEMP/cairn/bin" >> "$GITHUB_PATH"'},
    ]


def _steps(build: str, build_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    step: dict[str, Any] = {"name": "build", **({"env": build_env} if build_env else {}), "run": build}
    return [*_checkout_and_install(), {"name": "registry", "run": RUNNER_SETUP}, step]


def _secret(name: str) -> str:
    return f"${{{{ secrets.{name} }}}}"


def _s3_env(access: tuple[str, str]) -> dict[str, str]:
    return {
        "CAIRN_S3_ENDPOINT": "${{ vars.CAIRN_S3_ENDPOINT }}",
        "AWS_ACCESS_KEY_ID": _secret(access[0]),
        "AWS_SECRET_ACCESS_KEY": _secret(access[1]),
        "AWS_DEFAULT_REGION": "${{ vars.CAIRN_CACHE_REGION || 'us-east-1' }}",
    }


def _cache_env(access: tuple[str, str]) -> dict[str, str]:
    """A job that reads the action cache: its credential, and the cache writers whose records it trusts."""
    return {**_s3_env(access), "CAIRN_CACHE_TRUST": CACHE_TRUST}


def _shard_job(shard: Shard, ids: dict[str, str], settings: Settings, *, trusted: bool) -> dict[str, Any]:
    job: dict[str, Any] = {"name": shard.name, "runs-on": settings.runs_on}
    if shard.needs:
        job["needs"] = [ids[n] for n in shard.needs]
    if trusted:
        job["if"] = BUILD_IF
        job["environment"] = CACHE_WRITE_ENV
    job["timeout-minutes"] = shard.timeout_minutes()
    job["env"] = {**_cache_env(CACHE_WRITE if trusted else CACHE_READ), **DOCKER_ENV}
    if trusted:  # the compiler cache's own credential: the one that enters the build container (sccache)
        job["env"].update({name: _secret(name) for name in COMPILER_CACHE})
    # the cache-writer key, on the build step alone (cairn build drops it from the environment its actions see)
    job["steps"] = _steps(_cairn_build(shard.only, settings, mode="write" if trusted else "pull-request"),
                          {CACHE_SIGNING_KEY: _secret(CACHE_SIGNING_KEY)} if trusted else None)
    return job


def _publish_job(needs: list[str], settings: Settings) -> dict[str, Any]:
    job: dict[str, Any] = {"name": "publish", "runs-on": settings.runs_on, "needs": needs, "if": PUBLISH_IF,
                           "environment": RELEASE_ENV,
                           "concurrency": {"group": "cairn-repository", "cancel-in-progress": False}}
    job["timeout-minutes"] = 60
    job["env"] = {**_cache_env(CACHE_READ), **DOCKER_ENV, "CAIRN_PUBLISH_TO": "${{ vars.CAIRN_PUBLISH_TO }}"}
    steps = _steps(_cairn_build([BUNDLE_ACTION], settings, mode="read"))
    steps.append({"name": "signing keys (online roles only)", "env": {SIGNING_KEYS: _secret(SIGNING_KEYS)},
                  "run": UNPACK_KEYS.replace("{name}", SIGNING_KEYS)})
    steps.append({"name": "stage the release",
                  "env": {"AWS_ACCESS_KEY_ID": _secret(PUBLISH[0]), "AWS_SECRET_ACCESS_KEY": _secret(PUBLISH[1])},
                  "run": 'cairn publish --store .cairn --to "$CAIRN_PUBLISH_TO" --keys "$RUNNER_TEMP/keys" --stage-only'})
    job["steps"] = steps
    return job


def _gpu_gate_job(target: str, settings: Settings) -> dict[str, Any]:
    """Between staging and promotion: this target's GPU gates, run on a runner that has its GPU. The job holds its
    runner's signing key and nothing that writes: the verdicts leave as a workflow artifact."""
    key = GATE_KEY_PREFIX + re.sub(r"[^A-Z0-9_]", "_", target.upper())
    steps = [*_checkout_and_install(),
             {"name": "runner key", "env": {key: _secret(key)},
              "run": f'umask 077\nprintf %s "${key}" > "$RUNNER_TEMP/gate-key.pem"'},
             {"name": "registry", "run": RUNNER_SETUP},
             {"name": "gate on the GPU",
              "run": GATE_COMMAND.format(target=shlex.quote(target),
                                         build=_cairn_build([], replace(settings, families=()), mode="read"))},
             {"name": "upload the signed verdicts", "uses": UPLOAD_ARTIFACT,
              "with": {"name": f"gate-verdicts-{target}", "path": f"verdicts/{target}", "if-no-files-found": "error"}}]
    return {"name": f"gpu gates {target}", "runs-on": ["self-hosted", "linux", target], "needs": ["publish"],
            "if": PUBLISH_IF, "environment": GATE_ENV, "timeout-minutes": 120,
            "env": {**_cache_env(CACHE_READ), **DOCKER_ENV}, "steps": steps}


def _refresh_job(settings: Settings) -> dict[str, Any]:
    """The scheduled renewal: timestamp and snapshot re-signed with the online key (``cairn refresh``)."""
    steps = [*_checkout_and_install(),
             {"name": "online key", "env": {ONLINE_KEYS: _secret(ONLINE_KEYS)}, "run": UNPACK_KEYS.replace("{name}", ONLINE_KEYS)},
             {"name": "re-sign timestamp and snapshot",
              "run": 'cairn refresh "$CAIRN_PUBLISH_TO" --keys "$RUNNER_TEMP/keys"'}]
    return {"name": "refresh", "runs-on": settings.runs_on, "if": REFRESH_IF, "environment": ONLINE_ENV,
            "concurrency": {"group": "cairn-repository", "cancel-in-progress": False}, "timeout-minutes": 15,
            "env": {**_s3_env(REFRESH), "CAIRN_PUBLISH_TO": "${{ vars.CAIRN_PUBLISH_TO }}"}, "steps": steps}
