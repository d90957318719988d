"""In-container and GPU gates: run the pushed image (by digest) and read what its scripts report.

The in-container gate runs with no network and no devices: the libraries load, ``rocminfo`` answers
"no GPU" cleanly, the smoke kernels' CPU references compute the right numbers. The GPU gate runs only
where ``/dev/kfd`` exists (``--device /dev/kfd --device /dev/dri``) and launches every kernel; anywhere
else it is recorded as not run.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cairn.containers.image import pull
from cairn.services import docker_client, registry_address

NO_GPU = "not run: no AMD GPU on this host"


def host_has_gpu() -> bool:
    return os.path.exists("/dev/kfd")


def run_in_image(reference: str, command: list[str], *, gpu: bool, log: Any, timeout: int = 600,
                 mounts: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``command`` in ``registry/reference``; returns (exit code, output). ``mounts`` maps host
    directories to read-only paths in the container (the gate's inputs, e.g. a model)."""
    client = docker_client()
    registry, _ = registry_address()
    image = f"{registry}/{reference}"
    pull(client, image, log)
    options: dict[str, Any] = {"network_mode": "none"}
    if gpu:
        options = {"network_mode": "host", "devices": ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"],
                   "group_add": ["video"], "security_opt": ["seccomp=unconfined"]}
    if mounts:
        options["volumes"] = {host: {"bind": inside, "mode": "ro"} for host, inside in sorted(mounts.items())}
    log.write(f"+ docker run {options} {image} {' '.join(command)}\n")
    # the command is the container's whole entrypoint: an image may have its own (llama.cpp's is llama-server),
    # and a gate runs exactly what it names, as `docker run --entrypoint` would
    container = client.containers.create(image, entrypoint=command, **options)
    try:
        container.start()
        code = int(container.wait(timeout=timeout).get("StatusCode", -1))
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    log.write(output + f"\n(exit {code})\n")
    return code, output


def report_of(output: str) -> dict[str, Any]:
    start = output.find("{")
    try:
        return json.loads(output[start:]) if start >= 0 else {}
    except ValueError:
        return {}


def _failure_lines(output: str) -> str:
    """The lines of a plain-text report that say what failed (``FAIL …``, errors), else its last lines."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    failing = [line for line in lines if line.startswith(("FAIL", "Error", "Traceback")) or "Error:" in line]
    return "; ".join(failing[:3])[:600] if failing else " / ".join(lines[-3:])[-300:]


def container_gate(reference: str, commands: list[list[str]], *, gpu: bool, log: Any) -> tuple[str, str, dict[str, Any]]:
    """(status, reason, evidence) after running each command; the first failure is the reason."""
    if gpu and not host_has_gpu():
        return "not-run", NO_GPU, {}
    evidence: dict[str, Any] = {}
    failures = []
    for command in commands:
        code, output = run_in_image(reference, command, gpu=gpu, log=log)
        report = report_of(output)
        evidence[" ".join(command)] = {"exit": code, "report": report or output[-2000:]}
        if code != 0:
            detail = "; ".join(report.get("failures", [])[:3]) if report else _failure_lines(output)
            failures.append(f"{' '.join(command)} exited {code}: {detail}")
    if failures:
        return "failed", failures[0], evidence
    return "passed", f"{len(commands)} checks passed in the container: " + ", ".join(" ".join(c) for c in commands), evidence
