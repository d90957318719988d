"""The ``cairn`` command: one subcommand per stage, each in its own module.

A subcommand module provides ``configure(parser)`` and ``run(args) -> int`` — or, with ``TAKES_PIPELINE = True``,
``run(args, pipeline)``: the commands that plan or build are handed the stage table (``cairn.stages.PIPELINE``). Modules are imported only
when their subcommand runs, so a broken optional dependency of one stage never breaks the others.
Every CairnError becomes one line on stderr and its exit code; there are no tracebacks for user errors.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence

from cairn import __version__
from cairn.errors import CairnError

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "targets": ("cairn.model.command", "list gfx targets and families, or expand one"),
    "check": ("cairn.model.check_command", "validate release manifests"),
    "pins": ("cairn.pins.command", "compare deb pins with the archive, refresh them, or lock a rootfs recipe"),
    "plan": ("cairn.plan.command", "resolve a manifest into the action graph and show each action's status"),
    "build": ("cairn.execute.command", "run the action graph into the content-addressed store"),
    "coverage": ("cairn.coverage.command", "per family and gfx target, which libraries the audit shows really cover it"),
    "audit": ("cairn.audit.command", "which gfx targets does a binary, wheel, tree or image carry code for"),
    "split": ("cairn.audit.split_command", "keep only the device code one gfx target runs, in a library or install tree"),
    "services": ("cairn.services.command", "start/stop/status the private Docker Engine and local registry"),
    "image": ("cairn.containers.command", "list built images or diff two builds down to the layer and file"),
    "gate": ("cairn.gates.command", "gate results per image, gating pass rate and parity"),
    "keys": ("cairn.sign.command", "create the release key set and the public TUF root, or rotate the root keys"),
    "refresh": ("cairn.sign.refresh", "re-sign a repository's timestamp and snapshot before they expire (online key)"),
    "publish": ("cairn.publish.command", "publish a release bundle (staging, then the channel), signed"),
    "promote": ("cairn.publish.promote_command", "move a channel to a staged release, only cells whose gates passed"),
    "release": ("cairn.release", "release X.Y.Z[rcN]: refuse a dirty tree or another version, build, stage, promote, verify"),
    "verify": ("cairn.sign.verify_command", "check a repository, file or image against the pinned TUF root"),
    "matrix": ("cairn.matrix.command", "print or write the compatibility matrix as JSON, a static HTML page or Markdown"),
    "diff": ("cairn.diff.command", "what changed between two releases: manifests, bundles or published repositories"),
    "ci": ("cairn.ci.command", "write a CI workflow (GitHub Actions) that builds the release in shards over a shared cache"),
    "doctor": ("cairn.doctor.command", "what is wrong with this ROCm host, and which validated image or wheel fits it"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn", description="Reproducible ROCm builds, gated and signed releases.")
    parser.add_argument("--version", action="version", version=f"cairn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        child = sub.add_parser(name, help=help_text, description=help_text)
        child.set_defaults(_module=module_name)
        child.set_defaults(_configured=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # configure only the chosen subcommand: parse once to find it, then let its module add options
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    if name in COMMANDS:
        module = importlib.import_module(COMMANDS[name][0])
        sub_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        module.configure(sub_action.choices[name])
    args = parser.parse_args(argv)
    try:
        module = importlib.import_module(args._module)
        if getattr(module, "TAKES_PIPELINE", False):
            # imported here, for the commands that plan or build only: the table imports every stage's code
            # lazy: cairn.model, cairn.doctor, cairn.wheels, 559 ms at start-up (python -X importtime)
            from cairn.stages import PIPELINE

            return int(module.run(args, PIPELINE) or 0)
        return int(module.run(args) or 0)
    except CairnError as exc:
        print(f"cairn {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"cairn {args.command}: interrupted", file=sys.stderr)
        return 130


def entry() -> int:
    """The ``cairn`` command (and ``python -m cairn.cli``): ``main``, then the exit without the interpreter's last
    garbage collections over every object of every module loaded (tuf, cryptography, …), a visible share of a
    short command's time. Frozen objects are only not collected: every file and
    connection cairn opens is closed by its ``with`` block before ``main`` returns."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    raise SystemExit(entry())
