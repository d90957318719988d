"""Wheels an image installs, taken from the release's family index and pinned by sha256.

An image never installs something the index does not publish: each wanted project is looked up in the
``index:<family>`` tree (``<family>/simple/<project>/index.v1.json``), its one file is copied into the
build context, and ``requirements.txt`` pins ``name==version --hash=sha256:…`` so pip refuses any other
bytes (``--require-hashes``). The rendered Dockerfile lists the same file names and digests.

A project the index serves for several Pythons (numpy: one ``cp3XY`` file each) is narrowed to the file
whose tags the image's Python installs, so an engine's run-time requirements go in from the same index
its wheel came from.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from cairn.digest import file_sha256
from cairn.errors import CheckFailed, InputError
from cairn.names import safe_name


@dataclass(frozen=True)
class PinnedWheel:
    project: str
    version: str
    filename: str
    sha256: str
    size: int

    def requirement(self) -> str:
        return f"{self.project}=={self.version} --hash=sha256:{self.sha256}"

    def to_json(self) -> dict[str, object]:
        return {"project": self.project, "version": self.version, "filename": self.filename,
                "sha256": self.sha256, "size": self.size}


def _installs_on(filename: str, python: str) -> bool:
    """A wheel whose tags CPython ``python`` (``3.14``) installs: ``py3``/``cp3XY`` with ``none``/``abi3``/``cp3XY``."""
    cp = "cp" + python.replace(".", "")
    _, _, _, tags = parse_wheel_filename(filename)
    return any(t.interpreter in ("py3", cp) and t.abi in ("none", "abi3", cp) for t in tags)


def resolve(index_tree: Path, family: str, project: str, python: str = "") -> tuple[PinnedWheel, Path]:
    """The one file ``project`` has in the family's index (with ``python``: the one that Python installs), and
    its path; a clear error when it has none."""
    name = canonicalize_name(project)
    page = index_tree / family / "simple" / name / "index.v1.json"
    if not page.is_file():
        have = sorted(p.name for p in (index_tree / family / "simple").iterdir() if p.is_dir()) \
            if (index_tree / family / "simple").is_dir() else []
        raise CheckFailed(f"{project} is not in the {family} index (it has: {', '.join(have) or 'nothing'}) — "
                          f"build it in the wheels stage or drop it from the container recipe")
    try:
        files = json.loads(page.read_text())["files"]
        if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("filename"), str)
                                                  and isinstance(f.get("hashes", {}).get("sha256"), str) for f in files):
            raise TypeError("files are not {filename, hashes.sha256} objects")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(page, f"not a PEP 691 project page ({exc})", "rebuild the index") from None
    for f in files:  # the file name becomes the path read from files/ and written into the build context
        safe_name(f["filename"], page, "wheel file name")
    if python and len(files) > 1:
        files = [f for f in files if _installs_on(f["filename"], python)] or files
    if len(files) != 1:
        raise CheckFailed(f"{project} has {len(files)} files in the {family} index ({', '.join(f['filename'] for f in files)}) "
                          f"— an image pins exactly one; fix the index")
    entry = files[0]
    path = index_tree / family / "files" / entry["filename"]
    actual = file_sha256(path)
    if actual != entry["hashes"]["sha256"]:
        raise CheckFailed(f"{entry['filename']} in the {family} index has sha256 {actual}, its page says "
                          f"{entry['hashes']['sha256']} — rebuild the index")
    _, version, _, _ = parse_wheel_filename(entry["filename"])
    return PinnedWheel(name, str(version), entry["filename"], actual, path.stat().st_size), path


def stage(index_tree: Path, family: str, projects: list[str], dest: Path, python: str = "") -> list[PinnedWheel]:
    """Copy each project's wheel into ``dest`` (the build context's ``wheels/``) with ``requirements.txt``."""
    dest.mkdir(parents=True, exist_ok=True)
    pinned = []
    for project in projects:
        wheel, path = resolve(index_tree, family, project, python)
        shutil.copyfile(path, dest / wheel.filename)  # a copy: store files are shared and read-only
        pinned.append(wheel)
    (dest / "requirements.txt").write_text("".join(w.requirement() + "\n" for w in pinned))
    return pinned
