"""The coverage stage's runners: measure one unpacked component, then join the components per family.

``coverage:<component>`` audits the component's libraries, reads its per-target data files and the
package's own label (``measure_component``); ``coverage:release`` joins those records per family and
target (cairn.coverage.model). What to measure is decided by ``cairn.coverage.plan``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from cairn import proc
from cairn.audit import audit_paths
from cairn.audit.model import FATBIN
from cairn.coverage.model import ComponentCoverage, data_file_target, release_coverage
from cairn.execute.runners import ActionContext
from cairn.model.targets import load_registry

_DATA_SUFFIXES = (".hsaco", ".co", ".dat", ".kdb", ".fdb.txt", ".db")


def declared_targets(deb: Path | None, log: IO[str]) -> tuple[str, ...]:
    """The package's own ``X-Rocm-Gpu-Architecture`` control field (empty when it states none)."""
    if deb is None:
        return ()
    text = proc.run(["dpkg-deb", "-f", str(deb), "X-Rocm-Gpu-Architecture"], log=log, check=False).stdout
    return tuple(text.split())


def measure_component(component: str, package: str, tree: Path, deb: Path | None, log: IO[str]) -> ComponentCoverage:
    """One component's coverage record, naming files by their path inside ``tree``.

    The tree sits in a store, and every machine's store is somewhere else: a record that named the
    store's path would be another record (and another key downstream) on every machine.
    """
    elf_report = audit_paths([tree])

    def inside(path: str) -> str:
        shown = Path(path)
        return shown.relative_to(tree).as_posix() if shown.is_absolute() and shown.is_relative_to(tree) else path

    libraries = {inside(b.path): b.complete_targets for b in elf_report.binaries if b.kind == FATBIN and b.bundles}
    data = sorted({t for p in tree.rglob("*") if p.is_file() and p.name.endswith(_DATA_SUFFIXES)
                   and "library" in p.parts and (t := data_file_target(p.name))})
    notes = tuple(f"{inside(b.path)}: {n}" for b in elf_report.binaries for n in b.notes)
    log.write(f"{component}: {len(libraries)} libraries with device code, data targets {data or '-'}\n")
    return ComponentCoverage(component=component, package=package, declared=declared_targets(deb, log),
                             libraries=libraries, data_targets=tuple(data), notes=notes)


def run_component(ctx: ActionContext) -> None:
    fetched, built = (ctx.deps[d] for d in ctx.action.deps)
    debs = sorted(Path(fetched).glob("*.deb"))
    cov = measure_component(ctx.action.inputs["component"], ctx.action.inputs["package"], Path(built),
                            debs[0] if debs else None, ctx.log)
    (ctx.out / "coverage.json").write_text(json.dumps(cov.to_json(), indent=2, sort_keys=True) + "\n")


def run_release(ctx: ActionContext) -> None:
    comps = [ComponentCoverage.from_json(json.loads((Path(ctx.deps[d]) / "coverage.json").read_text()))
             for d in ctx.action.deps]
    families = {f: tuple(t) for f, t in ctx.action.inputs["families"].items()}
    result = release_coverage(comps, families, load_registry())
    result["components"] = {c.component: c.to_json() for c in comps if c.has_device_code}
    (ctx.out / "coverage.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


# the action kinds this stage adds, and what runs each (declared in cairn.stages)
RUNNERS = {
    "coverage": run_component,
    "coverage-release": run_release,
}
