"""Per-family simple indexes: PEP 503 HTML, PEP 691 JSON, PEP 658/714 metadata sidecars.

Layout of one family's tree (served as ``…/<family>/simple/`` by any static file server)::

    <family>/simple/index.html                 project list (PEP 503)
    <family>/simple/index.v1.json              same, PEP 691 JSON
    <family>/simple/<project>/index.html       files, each link ``../../files/<wheel>#sha256=…``
    <family>/simple/<project>/index.v1.json    same, PEP 691 JSON (+ PEP 700 versions/size)
    <family>/files/<wheel>                     the wheel (hard link to the package action's output)
    <family>/files/<wheel>.metadata            its METADATA (PEP 658), hash on the link (PEP 714)
    <family>/files/<name>-<ver>-variants.json  the PEP 825 variants of a distribution, linked from its page
    <family>/publish.json                      every file with its object key and Content-Type

Links are relative to the page, so the index works at any URL prefix (no doubled paths, TheRock#1741).
A static server cannot negotiate ``Accept``: ``publish.json`` tells the publisher to upload the HTML page
at the directory key ``simple/<project>/`` and the JSON variant under ``index.v1.json``.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from cairn.digest import file_sha256
from cairn.errors import CheckFailed
from cairn.wheels import variants
from cairn.wheels.wheelfile import read_metadata, read_metadata_bytes, read_variant

LAYOUT = 1
HTML_TYPE = "text/html; charset=utf-8"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
WHEEL_TYPE = "application/octet-stream"
METADATA_TYPE = "application/octet-stream"
VARIANTS_TYPE = variants.CONTENT_TYPE
API_VERSION = "1.1"


@dataclass(frozen=True)
class IndexedFile:
    filename: str
    project: str  # normalized
    version: str
    sha256: str
    size: int
    metadata_sha256: str
    requires_python: str


def refuse_local_tag(filename: str, where: str) -> None:
    """``linux_x86_64`` promises nothing about the host (PEP 600: local builds only; PyPI refuses it): a wheel
    tagged so would install everywhere and load only where its missing libraries happen to be."""
    platforms = {tag.platform for tag in parse_wheel_filename(variants.plain_filename(filename))[3]}
    if "linux_x86_64" in platforms:
        raise CheckFailed(f"{where}: {filename} is tagged linux_x86_64, which is never published — rebuild it so "
                          "its libraries resolve in the wheel set and it gets its manylinux tag (docs/wheels.md)")


def write_index(wheels: Iterable[Path], out: Path, family: str) -> list[IndexedFile]:
    """Link every wheel into ``out/<family>/files`` and write the simple pages; returns what was indexed."""
    root = out / family
    files_dir = root / "files"
    files_dir.mkdir(parents=True)
    indexed: list[IndexedFile] = []
    documents: dict[tuple[str, str], list[dict]] = {}  # variant wheels' variant.json by (name, version)
    for wheel in sorted(wheels, key=lambda p: p.name):
        refuse_local_tag(wheel.name, f"the {family} index")
        target = files_dir / wheel.name
        if target.exists():
            if file_sha256(target) != file_sha256(wheel):
                raise ValueError(f"two different wheels named {wheel.name} for {family}")
            continue
        os.link(wheel, target)
        metadata = read_metadata_bytes(wheel)
        (files_dir / f"{wheel.name}.metadata").write_bytes(metadata)
        headers = read_metadata(wheel)
        name, version, _build, _tags = parse_wheel_filename(variants.plain_filename(wheel.name))
        indexed.append(IndexedFile(wheel.name, canonicalize_name(name), str(version), file_sha256(wheel),
                                   wheel.stat().st_size, hashlib.sha256(metadata).hexdigest(),
                                   (headers.get("Requires-Python") or [""])[0]))
        if variants.label_of(wheel.name):
            documents.setdefault((wheel.name.split("-", 1)[0], str(version)), []).append(read_variant(wheel))
    for (distribution, release), docs in sorted(documents.items()):  # PEP 825: linked from the project page
        merged = files_dir / variants.variants_filename(distribution, release)
        merged.write_bytes(variants.dumps(variants.variants_json(docs)))
        indexed.append(IndexedFile(merged.name, canonicalize_name(distribution), release, file_sha256(merged),
                                   merged.stat().st_size, "", ""))
    projects: dict[str, list[IndexedFile]] = {}
    for item in indexed:
        projects.setdefault(item.project, []).append(item)
    simple = root / "simple"
    simple.mkdir()
    _write(simple / "index.html", _root_html(sorted(projects)))
    _write(simple / "index.v1.json", _json({"meta": {"api-version": API_VERSION},
                                            "projects": [{"name": p} for p in sorted(projects)]}))
    for project, items in sorted(projects.items()):
        page = simple / project
        page.mkdir()
        _write(page / "index.html", _project_html(project, items))
        _write(page / "index.v1.json", _json(_project_json(project, items)))
    _write(root / "publish.json", _json(_publish_plan(root)))
    return indexed


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _json(data: object) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _root_html(projects: list[str]) -> str:
    links = "".join(f'    <a href="{p}/">{p}</a><br/>\n' for p in projects)
    return ("<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"" + API_VERSION
            + "\">\n    <title>Simple index</title>\n  </head>\n  <body>\n" + links + "  </body>\n</html>\n")


def _project_html(project: str, items: list[IndexedFile]) -> str:
    lines = []
    for item in sorted(items, key=lambda i: i.filename):
        attrs = (f' data-core-metadata="sha256={item.metadata_sha256}" data-dist-info-metadata="sha256={item.metadata_sha256}"'
                 if item.metadata_sha256 else "")
        if item.requires_python:
            attrs += f' data-requires-python="{html.escape(item.requires_python)}"'
        lines.append(f'    <a href="../../files/{item.filename}#sha256={item.sha256}"{attrs}>{item.filename}</a><br/>\n')
    return ("<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"" + API_VERSION
            + f"\">\n    <title>Links for {project}</title>\n  </head>\n  <body>\n    <h1>Links for {project}</h1>\n"
            + "".join(lines) + "  </body>\n</html>\n")


def _project_json(project: str, items: list[IndexedFile]) -> dict[str, object]:
    files = []
    for item in sorted(items, key=lambda i: i.filename):
        entry: dict[str, object] = {"filename": item.filename, "url": f"../../files/{item.filename}",
                                    "hashes": {"sha256": item.sha256}, "size": item.size, "yanked": False}
        if item.metadata_sha256:
            entry["core-metadata"] = entry["dist-info-metadata"] = {"sha256": item.metadata_sha256}
        if item.requires_python:
            entry["requires-python"] = item.requires_python
        files.append(entry)
    versions = sorted({i.version for i in items}, key=_version_key)
    return {"meta": {"api-version": API_VERSION}, "name": project, "versions": versions, "files": files}


def _version_key(text: str) -> Version:
    return Version(text)


def _publish_plan(root: Path) -> dict[str, object]:
    """Object key and Content-Type of every file, in the order a publisher must upload them."""
    objects = []
    for path in sorted(root.rglob("*")):
        if path.is_dir() or path.name == "publish.json":
            continue
        rel = path.relative_to(root).as_posix()
        if rel.startswith("files/"):
            kind, ctype = (("metadata", METADATA_TYPE) if rel.endswith(".metadata") else
                           ("variants", VARIANTS_TYPE) if rel.endswith("-variants.json") else ("wheel", WHEEL_TYPE))
            objects.append({"file": rel, "key": rel, "content_type": ctype, "kind": kind, "immutable": True,
                            "sha256": file_sha256(path)})
        elif rel.endswith("index.html"):
            key = rel[: -len("index.html")]
            objects.append({"file": rel, "key": key, "content_type": HTML_TYPE, "kind": "page", "immutable": False})
        elif rel.endswith("index.v1.json"):
            objects.append({"file": rel, "key": rel, "content_type": JSON_TYPE, "kind": "page", "immutable": False})
    order = {"wheel": 0, "metadata": 1, "variants": 1, "page": 2}
    objects.sort(key=lambda o: (order[str(o["kind"])], o["key"] == "simple/", str(o["key"])))
    return {"schema": "cairn.index-publish/v1", "objects": objects}
