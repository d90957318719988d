"""The pages and matrices that link the staged blobs: a pip index and a matrix for staging and for each channel.

Staging lists every cell; a channel lists only the cells whose required gates passed (``promotion``). These are
the mutable objects of a release: they are uploaded after the blobs they link, family root pages last.
"""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import quote

from cairn.matrix.build import Published, build_matrix, cell_gates, cell_id, family_wheels, page_of
from cairn.matrix.model import Previous
from cairn.publish import pages
from cairn.publish.objects import JSON, Obj
from cairn.publish.report import Report
from cairn.remote.backend import sha256_hex
from cairn.wheels import variants


def promotion(stage: dict[str, Any], gates: dict[str, Any], channel: str, report: Report,
              previous: Previous | None = None, where: Published | None = None) -> list[Obj]:
    """The channel's pages and matrix: the cells whose required gates passed (``report`` says which were held);
    ``previous``: the release the channel served before, which its matrix names (``cairn.publish.changes``)."""
    required = stage["release"]["required_gates"].get(channel, [])
    passing, failing = [], set()
    for cell in stage["cells"]:
        results = cell_gates(gates, cell)
        reasons = [f"{g}: {results.get(g, {}).get('status', 'not-run')}"
                   + (f" ({results[g]['reason']})" if results.get(g, {}).get("reason") else "")
                   for g in required if results.get(g, {}).get("status") != "passed"]
        cid = cell_id(cell)
        if reasons:
            report.held[cid] = reasons
            if any(results.get(g, {}).get("status") == "failed" for g in required):
                failing.update(cell["wheels"])
        else:
            passing.append(cell)
            report.promoted.append(cid)
    # a wheel of a cell that *failed* a required gate is held on every page, unless a cell that passed lists the same
    # bytes: a verdict is on a cell's install set, and the SDK's wheels that loaded in the llama.cpp cell are not
    # rejected by the JAX plugin that did not (user-install judges each cell); a wheel of a cell whose gate did not
    # run is served only through the cells that passed
    failing -= {w for c in passing for w in c["wheels"]}
    shown = [{**c, "wheels": [w for w in c["wheels"] if w not in failing]} for c in passing]
    return index_objects(f"channels/{channel}", stage, shown, gates, channel, previous, where)


def index_objects(prefix: str, stage: dict[str, Any], cells: list[dict[str, Any]], gates: dict[str, Any], channel: str,
                  previous: Previous | None = None, where: Published | None = None) -> list[Obj]:
    """The pip index of ``cells`` under ``prefix`` (project pages, then family root pages) and its ``matrix.json``
    (naming ``where`` users fetch from: ``build_matrix``)."""
    matrix = build_matrix(stage, cells, gates, channel, index_prefix=prefix, previous=previous, where=where)
    return [*_pages(prefix, stage, cells), Obj(f"{prefix}/matrix.json", matrix.to_json().encode(), JSON, False)]


def _variants(page: str, infos: list[dict[str, Any]], objs: list[Obj]) -> list[pages.FileEntry]:
    """PEP 825: the served variants of a project's wheels, merged into ``<name>-<version>-variants.json`` beside
    its page (one per version), linked from it like a file. Mutable as the page is: a channel serves the
    variants of the cells that passed, and every object outside ``metadata/`` is a TUF target."""
    by_version: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for info in infos:
        if "variant" in info:
            by_version.setdefault((info["distribution"], info["version"]), []).append(info["variant"])
    entries = []
    for (distribution, version), documents in sorted(by_version.items()):
        name = variants.variants_filename(distribution, version)
        body = variants.dumps(variants.variants_json(documents))
        objs.append(Obj(f"{page}/{name}", body, variants.CONTENT_TYPE, False))
        entries.append(pages.FileEntry(name, name, sha256_hex(body), len(body)))
    return entries


def _pages(prefix: str, stage: dict[str, Any], cells: list[dict[str, Any]]) -> list[Obj]:
    """Project pages (HTML + JSON), then the root pages that link to them: one index per family, and one per
    target that has its own (``page_of``)."""
    by_index: dict[str, set[str]] = {}
    for cell in cells:
        by_index.setdefault(cell["family"], set()).update(family_wheels(stage, cell))
        name, listed = page_of(stage, cell)
        if name != cell["family"]:
            by_index.setdefault(name, set()).update(listed)
    objs: list[Obj] = []
    roots: list[Obj] = []
    for name, wheels in sorted(by_index.items()):
        projects: dict[str, list[pages.FileEntry]] = {}
        for key in sorted(wheels):
            info = stage["files"][key]
            filename = posixpath.basename(key)
            depth = prefix.count("/") + 1 + 3  # <prefix>/simple/<index>/<project>/
            url = "../" * depth + quote(key)  # a local version's "+" is a space to some S3 front ends unless quoted
            entry = pages.FileEntry(filename, url, info["sha256"], info["size"], info.get("metadata_sha256", ""),
                                    info.get("requires_python", ""))
            projects.setdefault(entry.project, []).append(entry)
        base = f"{prefix}/simple/{name}"
        for project, entries in sorted(projects.items()):
            entries += _variants(f"{base}/{project}", [stage["files"][k] for k in sorted(wheels)
                                                       if pages.normalize(posixpath.basename(k).split("-", 1)[0]) == project], objs)
            html = pages.project_html(project, entries).encode()
            objs.append(Obj(f"{base}/{project}/index.html", html, pages.HTML_TYPE, False, alias=f"{base}/{project}/"))
            objs.append(Obj(f"{base}/{project}/index.json", pages.project_json(project, entries).encode(), pages.JSON_TYPE, False))
        roots.append(Obj(f"{base}/index.html", pages.root_html(list(projects)).encode(), pages.HTML_TYPE, False, alias=f"{base}/"))
        roots.append(Obj(f"{base}/index.json", pages.root_json(list(projects)).encode(), pages.JSON_TYPE, False))
    return objs + roots
