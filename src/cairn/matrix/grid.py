"""The matrix as people read it: GPU products × engines/frameworks, each square passed, partial, held or blocked.

A row is one GPU product (the names people search for, from ``manifests/targets.toml``) and names its gfx
target; a column is an engine or framework. A square holds the matrix cells of that target and framework (one
per OS × Python) and takes the best of their statuses; each status comes from the cell's own data, never
from anywhere else:

- ``blocked``: nothing of the cell's own was built or checked: no wheel besides the SDK's (which every cell of
  a family lists) and no gate that ran; the reason is what its gates recorded (``image blocked: …``);
- ``held``: a gate the cell's channel requires failed or did not run, so the cell is not promoted;
- ``partial``: its required gates passed but the audit named shipped libraries without code for its target;
- ``passed``: every required gate passed.

A framework with no cell for a target is "not in this release". The columns are what users run (engines and
frameworks, ``COLUMNS``); the SDK (``runtime``) and Cairn's validation kernels (``smoke``) are ours, and a row
shows them as details of its target (``DETAILS``, ``Row.details``), not as columns people read first. The SDK has
cells of its own only in a release that ships no framework for a family; otherwise every cell of the family lists
the SDK's wheels, and the runtime square shows the SDK as shipped with the best of those cells, with that cell's
status (its gates ran with this SDK) and its id (``Entry.via``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from packaging.utils import canonicalize_name

from cairn.matrix.commands import SDK, is_runtime, is_sdk, wheel_project
from cairn.matrix.model import Cell, Framework, Matrix

STATUSES = ("passed", "partial", "held", "blocked")  # best first
RUNTIME = "runtime"
SMOKE = "smoke"
# A target's details (ours, not what users run): title → (label, the framework names whose cells it shows).
DETAILS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (RUNTIME, "SDK", (SDK,)),
    (SMOKE, "validation kernels", ("cairn-smoke",)),
)
# Column title → the framework names (canonical) whose cells it shows. A framework not listed gets a column of its own.
COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llama.cpp", ("llama-cpp", "llama-cpp-python")),
    ("JAX", ("jax",)),
    ("PyTorch", ("pytorch", "torch")),
    ("vLLM", ("vllm",)),
    ("SGLang", ("sglang",)),
    ("Ollama", ("ollama",)),
)


@dataclass(frozen=True)
class Entry:
    """One matrix cell in a square, with its status and the lines that say why."""

    cell: Cell
    status: str
    reasons: tuple[str, ...]
    via: str = ""  # for the runtime square derived from another cell: that cell's id


@dataclass(frozen=True)
class Square:
    column: str
    entries: tuple[Entry, ...]  # best status first, then by cell id

    @property
    def status(self) -> str:
        """The best status among the entries ("absent" for none): what a user with this GPU can get."""
        return self.entries[0].status if self.entries else "absent"


@dataclass(frozen=True)
class Row:
    product: str  # "" when the registry names no product for the target
    gfx_target: str
    family: str
    squares: tuple[Square, ...]  # one per column (``columns``)
    details: tuple[Square, ...] = ()  # one per ``DETAILS`` entry: the SDK and the validation kernels of the target


def column_of(framework: str) -> str:
    """The column (or detail) a framework's cells go in (its own name when it is none of the known ones)."""
    name = canonicalize_name(framework)  # llama.cpp → llama-cpp, PyTorch → pytorch
    known = [*((title, names) for title, _, names in DETAILS), *COLUMNS]
    return next((title for title, names in known if name in names), framework)


def columns(matrix: Matrix) -> list[str]:
    """The fixed engine/framework columns, then any other framework the matrix ships, by name (never a detail)."""
    fixed = [title for title, _ in COLUMNS]
    extra = sorted({column_of(c.framework.name) for c in matrix.cells} - set(fixed) - {title for title, _, _ in DETAILS})
    return fixed + extra


def detail_label(title: str) -> str:
    """What a detail square is called on the page (``runtime`` → ``SDK``)."""
    return next((label for t, label, _ in DETAILS if t == title), title)


ENGINES = ("llama-cpp-python",)  # cells whose partial list is what the engine's own ELFs load (cairn.publish.run)


def partial_text(cell: Cell) -> str:
    """One line for a partial cell: which shipped libraries have no code for its target — for an engine, those
    of them its own binaries load (the rest of its family's partial libraries do not concern it)."""
    loads = (f" (libraries {cell.framework.name}'s own binaries load)"
             if canonicalize_name(cell.framework.name) in ENGINES else "")
    return f"partial — no {cell.gfx_target} code in: {', '.join(cell.partial)}{loads}"


def entry(cell: Cell, matrix: Matrix) -> Entry:
    """The status of one cell and its reasons (see the module docstring for the rules)."""
    required = matrix.required_gates(cell.channel)
    blocking = cell.blocking(required)
    why = tuple(f"{g.gate}: {g.status}" + (f" — {g.reason}" if g.reason else "") for g in blocking)
    partial = (partial_text(cell),) if cell.partial else ()
    if not _built(cell):
        reasons = tuple(dict.fromkeys(g.reason for g in cell.gates if g.status != "passed" and g.reason))
        return Entry(cell, "blocked", ("not built" + (f": {reasons[0]}" if reasons else ""), *reasons[1:]))
    if blocking:
        return Entry(cell, "held", (f"not promoted to {cell.channel}: required gates did not pass", *why, *partial))
    if cell.partial:
        return Entry(cell, "partial", partial)
    return Entry(cell, "passed", (f"every gate {cell.channel} requires passed ({', '.join(required) or 'none required'})",))


def _built(cell: Cell) -> bool:
    """Whether anything of the cell's own exists: a wheel of its own (any wheel, for the SDK's own cell) or a
    gate that ran (so an image of it was built)."""
    own = [w for w in cell.wheels if canonicalize_name(cell.framework.name) == SDK or not is_sdk(wheel_project(w.filename)[0])]
    return bool(own) or any(g.status != "not-run" for g in cell.gates)


def runtime_entries(cells: Sequence[Cell], matrix: Matrix) -> list[Entry]:
    """The SDK as the target's cells ship it, one entry per OS × Python: from the best built cell that lists the
    ``rocm-sdk`` meta wheel, keeping only the SDK's wheels and the runtime image (the cell's other images are its
    framework's)."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for cell in cells:
        if any(wheel_project(w.filename)[0] == SDK for w in cell.wheels):
            groups.setdefault((cell.os, cell.python), []).append(entry(cell, matrix))
    out = []
    for _, found in sorted(groups.items()):
        found.sort(key=lambda e: (STATUSES.index(e.status), e.cell.id))
        source = found[0]
        wheels = tuple(w for w in source.cell.wheels if is_sdk(wheel_project(w.filename)[0]))
        version = next(wheel_project(w.filename)[1] for w in wheels if wheel_project(w.filename)[0] == SDK)
        sdk = replace(source.cell, framework=Framework(SDK, version), wheels=wheels,
                      images=tuple(i for i in source.cell.images if is_runtime(i)))
        shipped = f"the SDK as the {source.cell.framework.name} {source.cell.framework.version} cell ships it"
        if source.status == "blocked":  # nothing ran with the SDK: every cell listing it is blocked
            out.append(Entry(sdk, "held", (f"{shipped}: no gate ran with it", *source.reasons), source.cell.id))
        else:
            out.append(Entry(sdk, source.status, (f"{shipped}, with that cell's status (its gates ran with this SDK)",
                                                  *source.reasons), source.cell.id))
    return out


def rows(matrix: Matrix, products_by_target: Mapping[str, Sequence[str]]) -> list[Row]:
    """One row per product of every target the matrix has cells for (by target; products in registry order)."""
    titles = columns(matrix)
    by_target: dict[str, list[Cell]] = {}
    for cell in matrix.cells:
        by_target.setdefault(cell.gfx_target, []).append(cell)
    out = []
    for target, cells in sorted(by_target.items()):
        squares = [_square(title, cells, matrix) for title in titles]
        details = [_square(title, cells, matrix) for title, _, _ in DETAILS]
        products = list(products_by_target.get(target, ())) or sorted({p for c in cells for p in c.products}) or [""]
        family = ", ".join(sorted({c.family for c in cells}))
        out += [Row(product, target, family, tuple(squares), tuple(details)) for product in products]
    return out


def _square(title: str, cells: Sequence[Cell], matrix: Matrix) -> Square:
    entries = [entry(c, matrix) for c in cells if column_of(c.framework.name) == title]
    if title == RUNTIME and not entries:
        entries = runtime_entries(cells, matrix)
    entries.sort(key=lambda e: (STATUSES.index(e.status), e.cell.id))
    return Square(title, tuple(entries))
