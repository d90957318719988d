"""Finding a GPU on the matrix page by what people type, and what the page says for a GPU the release does not serve.

People type "7900XTX", "RX 9070 XT", "9060 XT" or "Ryzen AI Max 395", not the registry's spelling ("Radeon RX 7900
XTX / XT", "Radeon RX 9070 / XT", "Strix Halo (Ryzen AI Max+ 395)"). Every product name of ``manifests/targets.toml``
is turned into the names it stands for (``aliases``: "Radeon RX 9070 / XT" is the RX 9070 and the RX 9070 XT), and
each of those, and the gfx target, into a *search key*: lower case with everything but letters and digits dropped
(``normalize``). The page's script normalizes the query the same way and shows a GPU when the query is part of one
of its keys. Nothing here lists products by hand: a target added to the registry (gfx1030's "Radeon RX 6800 / XT")
is found as soon as a release ships it.

A product whose target the release has no cell for is listed too (``unserved``), hidden until searched for, with
why and what to use instead: another release of the repository's manifests that builds it, the nearest target of
the same ISA this release does serve (with the exact ``HSA_OVERRIDE_GFX_VERSION`` and the word unsupported), or
that the release has no library code for it — never that it "offers nothing" for a GPU it serves.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from cairn.errors import CairnError
from cairn.paths import releases_dir

_DROP = re.compile(r"[^a-z0-9]+")


def normalize(text: str) -> str:
    """``"Radeon RX 7900 XTX"`` → ``"radeonrx7900xtx"``: what the page's script does to a query (keep in step)."""
    return _DROP.sub("", text.lower())


def aliases(product: str) -> list[str]:
    """The product names a registry entry stands for: ``"Radeon RX 6800 / XT"`` → RX 6800, RX 6800 XT;
    ``"Radeon RX 7900 XTX / XT"`` → 7900 XTX, 7900 XT; ``"Radeon RX 7800 XT / 7700 XT"`` → 7800 XT, 7700 XT;
    ``"Radeon PRO W7900 / W7800"`` → W7900, W7800. An alternative with a digit replaces the model number (the
    first word with a digit) and what follows it; a suffix of letters replaces a last word of letters (XTX → XT)
    or is appended to a model number (6800 → 6800 XT). A name with parentheses is taken as it is."""
    names = [product]
    if "(" in product or "/" not in product:
        return names
    base, *alternatives = (part.strip() for part in product.split("/"))
    words = base.split()
    names = [base]
    for alt in (a for a in alternatives if a):
        if any(ch.isdigit() for ch in alt):
            model = next((i for i, w in enumerate(words) if any(ch.isdigit() for ch in w)), len(words))
            names.append(" ".join([*words[:model], *alt.split()]))
        elif words and alt.isalpha() and words[-1].isalpha():
            names.append(" ".join([*words[:-1], alt]))
        else:
            names.append(" ".join([*words, alt]))
    return [product, *dict.fromkeys(n for n in names if n != product)]


def search_keys(product: str, target: str) -> list[str]:
    """The normalized keys a row (or an unserved product) is found by: its full name, every alias, its gfx target."""
    return list(dict.fromkeys(k for k in (*(normalize(n) for n in aliases(product)), normalize(target)) if k))


@dataclass(frozen=True)
class Unserved:
    """A product of a target the release has no cell for, and what the page tells its owner."""

    product: str
    gfx_target: str
    says: str  # why, and what to use instead (one line)


@dataclass(frozen=True)
class OtherRelease:
    """Another release of the repository's manifests: its version, its manifest file and the targets it builds."""

    version: str
    manifest: str
    targets: tuple[str, ...]


def other_releases(registry: Any, directory: Path | None = None) -> list[OtherRelease]:
    """Every release manifest's version and targets (``[release] families`` expanded by the registry); a manifest
    that cannot be read, or names a family the registry does not know, is left out (``cairn build`` reports it)."""
    found = []
    for path in sorted((directory or releases_dir()).glob("*.toml")):
        try:
            release = tomllib.loads(path.read_text()).get("release", {})
            targets = registry.expand_all(list(release.get("families", [])))
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError):
            continue
        if isinstance(release.get("version"), str):
            found.append(OtherRelease(release["version"], f"manifests/releases/{path.name}", tuple(targets)))
    return found


def unserved(served: Iterable[str], version: str, registry: Any, releases: Sequence[OtherRelease], channel: str = "") -> list[Unserved]:
    """For every product of a registry target not in ``served`` (the targets the matrix has cells for): where
    else it is built, and the nearest served target of its ISA family (same LLVM generic processor), lowest
    ``gfx_target_version`` first — gfx1031 → gfx1030, gfx1103/gfx1150/gfx1152 → gfx1100 — with the override that
    makes the runtime load that target's code, which is unsupported (the GPU is not the one the code was built
    and gated for)."""
    have = set(served)
    out = []
    for name, target in sorted(registry.targets.items()):
        if name in have or not target.products:
            continue
        elsewhere = sorted({r.version for r in releases if name in r.targets and r.version != version}, key=Version)
        same_isa = sorted((registry.targets[t] for t in have if t in registry.targets and target.generic
                           and registry.targets[t].generic == target.generic), key=lambda t: t.kfd_version)
        built = any(r.version == version and name in r.targets for r in releases)  # but held (or blocked here)
        if built:
            parts = [f"release {version} builds for {name}, but no cell of it is on the {channel or 'this'} channel "
                     f"(held by a required gate, or not built: see staging/{version}/matrix.json)"]
        else:
            parts = [f"release {version} builds nothing for {name}"]
        if elsewhere:
            parts.append(f"release{'s' if len(elsewhere) > 1 else ''} {', '.join(elsewhere)} of Cairn build{'' if len(elsewhere) > 1 else 's'} for it")
        if same_isa:
            near = same_isa[0]
            parts.append(f"nearest in {version}: {near.name} (same {target.generic} ISA) with "
                         f"HSA_OVERRIDE_GFX_VERSION={near.override_version} — unsupported")
        elif not elsewhere and not built:
            parts.append(f"no library code for it in this release (ROCm {version}) and no target of its ISA"
                         + (f" ({target.generic})" if target.generic else "") + " to fall back on")
        out += [Unserved(product, name, "; ".join(parts)) for product in target.products]
    return out


def unserved_of(matrix: Any, products_by_target: Mapping[str, Sequence[str]]) -> list[Unserved]:
    """``unserved`` for a matrix, with the target registry and the repository's release manifests."""
    # lazy: cairn.model, cairn.errors, difflib, 14 ms at start-up (python -X importtime)
    from cairn.model.targets import load_registry

    try:
        registry = load_registry()
    except CairnError:
        return []
    served = {c.gfx_target for c in matrix.cells}
    return [u for u in unserved(served, matrix.release.version, registry, other_releases(registry), matrix.release.channel)
            if u.product in products_by_target.get(u.gfx_target, (u.product,))]


def find(query: str, rows: Sequence[Any], unserved_items: Sequence[Unserved]) -> tuple[list[Any], list[Unserved]]:
    """The rows (``cairn.matrix.grid.Row``) and unserved products a query finds, as the page's script finds them:
    the normalized query is part of one of their search keys. An empty query finds nothing."""
    q = normalize(query)
    if not q:
        return [], []
    hit = lambda product, target: any(q in key for key in search_keys(product, target))  # noqa: E731
    return ([r for r in rows if hit(r.product, r.gfx_target)], [u for u in unserved_items if hit(u.product, u.gfx_target)])
