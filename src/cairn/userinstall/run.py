"""The user-install stage's runners: a stock host root, and the gate on one target.

``run_user_install`` makes the target's bundle with the bundle stage's own runner (``cairn.publish.run``), publishes
it with ``cairn publish --stage-only --dev-keys`` into scratch space — the index a user would be served, made by the
code that makes it — and runs ``cairn.userinstall.gate`` against it. The scratch space is removed; the action's tree
is its ``gate.json``.

A failed verdict fails the action (and the build) when the release's own channel requires the gate; below that
channel it is recorded failed and the build goes on, so the bundle, and the matrix page, show the failure and
``cairn gate --channel nightly`` fails on it: a dev build of wheels that do not yet load on a stock host still
yields a release that says so.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from cairn.errors import CairnError, CheckFailed
from cairn.execute.runners import ActionContext
from cairn.model.gate_result import GateResult
from cairn.plan.graph import Action
from cairn.userinstall.gate import HostImage, image_verdicts, user_install_gate
from cairn.userinstall.hosts import ensure_image, host_id, read_host, run_host_rootfs


def publish_scratch(bundle: Path, repo: Path, log: IO[str]) -> None:
    """``cairn publish BUNDLE --to REPO --stage-only --dev-keys``: the staged index and matrix a user is served."""
    command = [sys.executable, "-c", "import sys; from cairn.cli import main; sys.exit(main(sys.argv[1:]))", "publish",
               str(bundle), "--to", str(repo), "--stage-only", "--dev-keys", "--store", str(repo.parent / "keys-store"), "--json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    log.write(f"+ cairn publish {bundle} --to {repo} --stage-only --dev-keys (exit {result.returncode})\n")
    if result.returncode != 0:
        raise CairnError(f"publishing the bundle for the user-install gate failed: {result.stderr.strip()[-400:]}")


def run_user_install(ctx: ActionContext) -> None:
    # lazy: the bundle stage, 43 ms at start-up (python -X importtime)
    from cairn.publish.run import run_bundle

    inputs = ctx.action.inputs
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cairn-user-install-", dir=ctx.out.parent) as scratch_dir:
        scratch = Path(scratch_dir)
        bundle = scratch / "bundle"
        bundle.mkdir()
        deps = {d: p for d, p in ctx.deps.items() if not d.startswith("host:")}
        action = Action("bundle:release", "bundle", inputs["bundle"], tuple(deps))
        run_bundle(dataclasses.replace(ctx, action=action, out=bundle, deps=deps, log=io.StringIO()))
        publish_scratch(bundle, scratch / "repo", ctx.log)
        hosts = []
        for name in inputs["hosts"]:
            tree = ctx.deps[host_id(name)]
            reference = ensure_image(tree, ctx.dep_outputs[host_id(name)], ctx.log)
            record = read_host(tree)
            hosts.append(HostImage(name, record["glibc"], reference, record.get("python", "")))
        status, reason, evidence = user_install_gate(scratch / "repo", inputs["target"], hosts, ctx.log,
                                                     every_host=inputs["every_host"])
    evidence["images"] = image_verdicts(evidence.get("cells", {}), inputs["images"])
    evidence["seconds"] = round(time.monotonic() - started, 1)
    result = GateResult(inputs["gate"], inputs["image"], inputs["target"], inputs["family"], "", status, reason, evidence)
    ctx.log.write(json.dumps(result.to_json(), indent=1, sort_keys=True) + "\n")
    if status == "failed" and inputs["required"]:
        raise CheckFailed(f"user-install gate failed for {inputs['target']} (required on channel {inputs['channel']}): {reason}")
    result.write(ctx.out)


# the action kinds this stage adds, and what runs each (declared in cairn.stages)
RUNNERS = {
    "user-install": run_user_install,
    "host-rootfs": run_host_rootfs,
}
