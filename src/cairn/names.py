"""The one rule for a name from an input file that becomes a file path or an object key.

Bundles, manifests, recipes, build reports, wheel indexes and image layers all carry names (an artifact
path, a family, a version, a recipe, a file name) that Cairn joins onto a directory or a bucket prefix.
A name that is absolute, climbs with ``..`` or smuggles a separator would read or write outside where it
belongs — and the publisher would then sign what it wrote. So every such name is checked once, where its
file is read, by the two functions below, and refused with one line naming the file and the fix.

A *relative path* is ``/``-separated parts, each a *safe name*: not empty, not ``.`` or ``..``, no ``\\``,
no NUL or other control character. Object keys are the same shape, so one rule serves the local
directory and S3 alike (S3 would take ``..`` literally, the local mirror of the bucket would not).
"""

from __future__ import annotations

import re
from pathlib import Path

from cairn.errors import InputError, Location

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3's rule for new buckets


def name_problem(value: object) -> str:
    """Why ``value`` cannot be one path component ("" when it can)."""
    if not isinstance(value, str):
        return f"is {type(value).__name__}, not a string"
    if not value:
        return "is empty"
    if value in (".", ".."):
        return f"is '{value}'"
    if "/" in value or "\\" in value:
        return "contains a path separator"
    if _CONTROL.search(value):
        return "contains a control character"
    return ""


def relpath_problem(value: object) -> str:
    """Why ``value`` cannot be a relative path below a directory ("" when it can)."""
    if not isinstance(value, str):
        return f"is {type(value).__name__}, not a string"
    if not value:
        return "is empty"
    if value.startswith("/"):
        return "is absolute"
    for part in value.split("/"):
        problem = name_problem(part)
        if problem:
            return "has an empty part ('//' or a trailing '/')" if not part else f"has a part that {problem}"
    return ""


def safe_name(value: object, where: Location | Path | str, what: str) -> str:
    """``value`` as one path component, or an InputError at ``where`` naming ``what`` it was."""
    problem = name_problem(value)
    if problem:
        raise InputError(where, f"{what} {value!r} {problem}", "use a plain name: no '/', no '..', nothing absolute")
    return value  # type: ignore[return-value]


def safe_relpath(value: object, where: Location | Path | str, what: str) -> str:
    """``value`` as a relative path that stays below its directory, or an InputError at ``where``."""
    problem = relpath_problem(value)
    if problem:
        raise InputError(where, f"{what} {value!r} {problem}", "use a relative path of plain names: no '..', no leading '/'")
    return value  # type: ignore[return-value]


def inside(root: Path, path: Path) -> bool:
    """``path`` (symlinks resolved) is ``root`` or below it: a checked name can still be a symlink out."""
    try:
        return Path(path).resolve().is_relative_to(Path(root).resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def hashed_name(path: str, sha256: str) -> str:
    """Where a TUF consistent-snapshot client fetches the target ``path``: ``dir/{sha256}.{basename}``. Here, not
    in ``cairn.sign.tuf``, so that the publisher's writer names keys without importing the signing libraries."""
    head, _, name = path.rpartition("/")
    return f"{head}/{sha256}.{name}" if head else f"{sha256}.{name}"
