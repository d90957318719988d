"""``cairn services start|stop|status [--json]``: the private Docker Engine and the local registry.

``start`` is idempotent and says what it started; ``status`` exits 1 when a service is down, so scripts
can test it; ``--json`` prints the state file's content (``docker_host``, ``registry``, …).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from cairn.cli_options import add_json
from cairn.services.daemons import start, stop
from cairn.services.state import alive, read_state, services_dir, state_path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("start", "stop", "status"), help="what to do")
    parser.add_argument("--dir", type=Path, default=None, help="state directory (default $CAIRN_SERVICES_DIR or ~/.cache/cairn/services)")
    parser.add_argument("--registry", default="", metavar="HOST:PORT",
                        help="start the registry at this loopback address (default a free port); the same address on "
                             "every start and machine keeps the build image's push, and every compile after it, cached")
    add_json(parser, "print machine-readable state")


def run(args: argparse.Namespace) -> int:
    directory = (args.dir or services_dir()).absolute()
    console = Console()
    if args.action == "start":
        live, started = start(directory, registry_at=args.registry)
        doc = {**live.to_json(), "started": started, "state_file": str(state_path(directory))}
        if args.json:
            print(json.dumps(doc, indent=2, sort_keys=True))
        else:
            what = ", ".join(started) if started else "nothing (already running)"
            console.print(f"started: {what}")
            console.print(f"DOCKER_HOST={live.docker_host}")
            console.print(f"registry: {live.registry}")
        return 0
    if args.action == "stop":
        stopped = stop(directory)
        if args.json:
            print(json.dumps({"stopped": stopped}, sort_keys=True))
        else:
            console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    state = read_state(directory)
    up = alive(state) if state else {"dockerd": False, "registry": False}
    if args.json:
        doc = {**(state.to_json() if state else {"dir": str(directory)}), "running": up}
        print(json.dumps(doc, indent=2, sort_keys=True))
    elif state is None:
        console.print(f"not started (no {state_path(directory)}) — run `cairn services start`")
    else:
        for name, ok in up.items():
            where = state.docker_host if name == "dockerd" else state.registry
            console.print(f"{name}: {'running' if ok else 'DOWN'} ({where})")
    return 0 if all(up.values()) else 1
