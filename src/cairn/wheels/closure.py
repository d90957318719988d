"""Does an index install by itself? Every requirement of every wheel it serves, satisfied from it alone.

A user runs ``pip install --index-url <one index> …`` (the matrix never names a second index: PyPI holds
placeholders for the ``rocm-sdk*`` names, and a second index lets whoever uploads a higher version there win).
So an index must serve the whole closure of what it offers: a wheel requiring ``typing-extensions>=4.5.0`` is
only installable when the index has a typing-extensions that matches, for every Python the index claims.

``check`` evaluates each Requires-Dist's markers for each claimed Python (CPython on x86_64 Linux, the only
platform Cairn's wheels are for), keeps the wheels whose tags and Requires-Python admit that Python, and asks
for each requirement whether some served version matches its specifier and serves the extras it names
(their own requirements, recursively). Which wheels are checked for a Python is the index's ``Claim``: the
release's own Python claims every wheel; a further Python an engine's recipe serves claims what that engine's
wheel pulls in (a JAX set mirrored for 3.14 alone is not offered to 3.11); every Python claims the SDK with the
family's and each target's extra, which the matrix's commands install.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from cairn.errors import CheckFailed

# every glibc an x86_64 manylinux tag names, newest first, then the legacy aliases and the plain platform: an
# index claims a Python, not a host, so any Linux wheel counts (the tag's floor is the wheel's own business)
_PLATFORMS = (*(f"manylinux_2_{n}_x86_64" for n in range(60, 4, -1)),
              "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")


@dataclass(frozen=True)
class Served:
    """One wheel of an index, as its METADATA describes it."""

    filename: str
    requires_dist: tuple[str, ...] = ()
    requires_python: str = ""
    provides_extra: tuple[str, ...] = ()

    @classmethod
    def from_headers(cls, filename: str, headers: Mapping[str, Sequence[str]]) -> Served:
        """From METADATA headers (name → values, as ``cairn.wheels.wheelfile.read_metadata`` returns them)."""
        return cls(filename, tuple(headers.get("Requires-Dist", ())), (list(headers.get("Requires-Python", ())) or [""])[0],
                   tuple(headers.get("Provides-Extra", ())))


@dataclass(frozen=True)
class Claim:
    """A Python the index serves, and what it serves to it: the closure of ``roots`` (requirement strings such
    as ``llama-cpp-python`` or ``rocm-sdk[device-gfx1100]``: what users install), and with ``every`` that of
    every wheel the index holds for that Python too."""

    python: str
    roots: tuple[str, ...] = ()
    every: bool = False


@dataclass(frozen=True)
class Missing:
    wheel: str  # the wheel whose requirement fails ("" for a root the index claims)
    requirement: str
    python: str
    why: str

    def message(self) -> str:
        who = f"{self.wheel} requires" if self.wheel else "it offers"
        return f"{who} {self.requirement} (Python {self.python}), {self.why}"


@dataclass
class _Env:
    python: str
    markers: dict[str, str]
    tags: frozenset[Tag]
    by_name: dict[str, list[tuple[Version, Served]]] = field(default_factory=dict)


def environment(python: str) -> dict[str, str]:
    """PEP 508 marker values of CPython ``python`` (``"3.11"``) on x86_64 Linux."""
    return {"python_version": python, "python_full_version": f"{python}.0", "implementation_name": "cpython",
            "implementation_version": f"{python}.0", "platform_python_implementation": "CPython",
            "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix", "platform_machine": "x86_64",
            "platform_release": "", "platform_version": "", "extra": ""}


def _tags(python: str) -> frozenset[Tag]:
    major, minor = (int(p) for p in python.split(".")[:2])
    version = (major, minor)
    return frozenset([*cpython_tags(version, abis=[f"cp{major}{minor}"], platforms=_PLATFORMS),
                      *compatible_tags(version, f"cp{major}{minor}", _PLATFORMS)])


def _installable(wheel: Served, env: _Env) -> Version | None:
    """The wheel's version when pip would consider it on ``env``'s Python, else None."""
    try:
        _name, version, _build, tags = parse_wheel_filename(wheel.filename)
    except InvalidWheelFilename:
        return None
    if not tags & env.tags:
        return None
    if wheel.requires_python:
        try:
            if not SpecifierSet(wheel.requires_python).contains(env.markers["python_full_version"], prereleases=True):
                return None
        except InvalidSpecifier:
            return None
    return version


def _applies(requirement: Requirement, env: _Env, extra: str = "") -> bool:
    return requirement.marker is None or requirement.marker.evaluate({**env.markers, "extra": extra})


def _provides(wheel: Served, extra: str) -> bool:
    """Whether a wheel serves an extra: declared, or at least named by a marker of its requirements."""
    wanted = canonicalize_name(extra)
    if any(canonicalize_name(e) == wanted for e in wheel.provides_extra):
        return True
    return any(f'"{extra}"' in r or f"'{extra}'" in r for r in wheel.requires_dist)


class _Checker:
    def __init__(self, wheels: Iterable[Served]) -> None:
        self.wheels = sorted(wheels, key=lambda w: w.filename)
        self.missing: list[Missing] = []

    def run(self, claim: Claim) -> None:
        env = _Env(claim.python, environment(claim.python), _tags(claim.python))
        for wheel in self.wheels:
            version = _installable(wheel, env)
            if version is not None:
                name = canonicalize_name(parse_wheel_filename(wheel.filename)[0])
                env.by_name.setdefault(name, []).append((version, wheel))
        seen: set[tuple[str, str]] = set()
        for root in claim.roots:
            self._requirement("", root, env, seen)
        for candidates in env.by_name.values() if claim.every else ():
            for _version, wheel in candidates:
                self._wheel(wheel, "", env, seen)

    def _wheel(self, wheel: Served, extra: str, env: _Env, seen: set[tuple[str, str]]) -> None:
        """Check the requirements ``wheel`` has with ``extra`` ("" = its unconditional ones)."""
        if (wheel.filename, extra) in seen:
            return
        seen.add((wheel.filename, extra))
        for text in wheel.requires_dist:
            try:
                requirement = Requirement(text)
            except InvalidRequirement as exc:
                self.missing.append(Missing(wheel.filename, text, env.python, f"which is not a valid requirement ({exc})"))
                continue
            if not _applies(requirement, env, extra) or (extra and _applies(requirement, env)):
                continue  # not for this Python, or an unconditional one checked with extra ""
            self._requirement(wheel.filename, text, env, seen, requirement)

    def _requirement(self, wheel: str, text: str, env: _Env, seen: set[tuple[str, str]],
                     requirement: Requirement | None = None) -> None:
        requirement = requirement or Requirement(text)
        if requirement.url:
            self.missing.append(Missing(wheel, text, env.python, "a direct URL, which no index serves"))
            return
        candidates = env.by_name.get(canonicalize_name(requirement.name), [])
        matching = [w for v, w in candidates if requirement.specifier.contains(v, prereleases=True)]
        if not matching:
            served = ", ".join(sorted({str(v) for v, _ in candidates}))
            self.missing.append(Missing(wheel, text, env.python, f"which the index serves only as {served}" if served
                                        else "which the index does not serve"))
            return
        extras = sorted(requirement.extras)
        good = [w for w in matching if all(_provides(w, e) for e in extras)]
        if not good:
            self.missing.append(Missing(wheel, text, env.python, f"but no {requirement.name} it serves provides "
                                        f"the extra {', '.join(extras)}"))
            return
        for extra in extras:
            for chosen in good:
                self._wheel(chosen, extra, env, seen)
        for chosen in good:
            self._wheel(chosen, "", env, seen)


def unsatisfied(wheels: Iterable[Served], claims: Iterable[Claim]) -> list[Missing]:
    """Every requirement some claimed Python cannot satisfy from ``wheels`` alone, in a stable order."""
    checker = _Checker(wheels)
    for claim in claims:
        checker.run(claim)
    unique = {(m.wheel, m.requirement, m.python): m for m in checker.missing}
    return [unique[k] for k in sorted(unique)]


def check(index: str, wheels: Iterable[Served], claims: Iterable[Claim]) -> None:
    """Refuse an index that does not install by itself: one line naming the first wheel and requirement it
    cannot satisfy (and how many more), and the fix."""
    missing = unsatisfied(wheels, claims)
    if not missing:
        return
    more = f" (and {len(missing) - 1} more: {'; '.join(m.message() for m in missing[1:4])}{' …' if len(missing) > 4 else ''})" \
        if len(missing) > 1 else ""
    raise CheckFailed(f"index {index}: {missing[0].message()}{more} — an index must serve every requirement of its "
                      "wheels by itself: mirror the requirement by sha256 in the recipe of the wheel that needs it "
                      "(docs/wheels.md, \"An index that installs by itself\")")

