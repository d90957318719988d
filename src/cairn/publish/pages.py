"""PEP 503 / 691 index pages for one channel and family, rendered deterministically from file entries.

S3 cannot negotiate ``Accept``, so each format has its own URL: ``<project>/index.html`` (also stored
at the key ``<project>/`` so ``pip --index-url …/simple/<family>/`` works), and ``<project>/index.json``.
Links are relative, so a repository can be served from any host or copied anywhere.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass

HTML_TYPE = "text/html; charset=utf-8"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
API_VERSION = "1.1"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class FileEntry:
    filename: str
    url: str  # relative to the project page
    sha256: str
    size: int
    metadata_sha256: str = ""
    requires_python: str = ""

    @property
    def project(self) -> str:
        return normalize(self.filename.split("-", 1)[0])

    @property
    def version(self) -> str:
        return self.filename.split("-")[1]


def project_html(project: str, files: list[FileEntry]) -> str:
    rows = []
    for f in sorted(files, key=lambda f: f.filename):
        attrs = [f'href="{html.escape(f.url)}#sha256={f.sha256}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
        if f.metadata_sha256:
            attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
            attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
        rows.append(f"    <a {' '.join(attrs)}>{html.escape(f.filename)}</a><br/>")
    return (f'<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="{API_VERSION}">\n'
            f"    <title>Links for {html.escape(project)}</title>\n  </head>\n  <body>\n    <h1>Links for {html.escape(project)}</h1>\n"
            + "\n".join(rows) + "\n  </body>\n</html>\n")


def project_json(project: str, files: list[FileEntry]) -> str:
    entries = []
    for f in sorted(files, key=lambda f: f.filename):
        entry: dict[str, object] = {"filename": f.filename, "url": f.url, "hashes": {"sha256": f.sha256}, "size": f.size}
        if f.metadata_sha256:
            entry["core-metadata"] = {"sha256": f.metadata_sha256}
        if f.requires_python:
            entry["requires-python"] = f.requires_python
        entries.append(entry)
    versions = sorted({f.version for f in files})
    doc = {"meta": {"api-version": API_VERSION}, "name": project, "versions": versions, "files": entries}
    return json.dumps(doc, sort_keys=True, indent=1) + "\n"


def root_html(projects: list[str]) -> str:
    rows = "\n".join(f'    <a href="{html.escape(p)}/">{html.escape(p)}</a><br/>' for p in sorted(projects))
    return (f'<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="{API_VERSION}">\n'
            f"    <title>Simple index</title>\n  </head>\n  <body>\n{rows}\n  </body>\n</html>\n")


def root_json(projects: list[str]) -> str:
    doc = {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in sorted(projects)]}
    return json.dumps(doc, sort_keys=True, indent=1) + "\n"
