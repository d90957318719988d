"""The matrix as a static HTML page (a grid: GPU products × engines/frameworks) and as a Markdown table.

Both are pure functions of the matrix document, the product names of the target registry and the two
places a user fetches from (the public image registry, the repository's URL), so the same inputs always
render to the same bytes. The page has no external assets (inline CSS and a few lines of script): it works
from a ``file://`` URL, an S3 bucket or an air-gapped mirror. Each square of the grid is coloured by its
status (``cairn.matrix.grid``) and opens, in one click (a ``<details>`` element), to the reasons and the
exact commands for it (``cairn.matrix.commands``). The filter reads ``#q=<text>`` or ``?q=<text>`` and
``?product=<name>`` from the URL, so a link can carry it (``…/matrix.html#q=7900%20XTX``).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from cairn.matrix import grid, search
from cairn.matrix.commands import (
    local_image,
    own_images,
    pip_command,
    public_image,
    pull_commands,
    python_range,
    run_commands,
)
from cairn.matrix.model import Cell, ImageRef, Matrix

STATUS_MARK = {"passed": "✅ passed", "failed": "❌ failed", "not-run": "⏸ not run"}  # Markdown renderers have emoji
# The page colours each status by CSS class and spells it out: a browser without an emoji font shows boxes.
HTML_MARK = {"passed": "passed", "failed": "FAILED", "not-run": "not run"}
ABSENT = "not in this release"

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}
thead th{background:#f2f2f2;position:sticky;top:0}tr[hidden]{display:none}code,pre{font-size:12px}
pre{white-space:pre-wrap;word-break:break-all;background:#f7f7f7;border:1px solid #ddd;padding:4px;margin:4px 0;user-select:all}
td.sq{min-width:7em;max-width:28em}summary{cursor:pointer;font-weight:bold}
.st-passed{background:#dff3e0}.st-passed summary{color:#176b1d}
.st-partial{background:#fdebd0}.st-partial summary{color:#8a4b00}
.st-held{background:#fff5c2}.st-held summary{color:#7a5b00}
.st-blocked{background:#f8d7da}.st-blocked summary{color:#a4000f}
.st-absent{background:#f4f4f4;color:#777}
.passed{color:#176b1d}.failed{color:#a4000f;font-weight:bold}.not-run{color:#7a5b00}.partial{color:#8a4b00;font-weight:bold}
.entry{border-top:1px dashed #bbb;margin-top:4px;padding-top:4px}.entry:first-of-type{border-top:0}
#controls{margin:1em 0}#controls input,#controls select{font-size:14px;padding:3px}
.legend span{padding:1px 6px;margin-right:6px;border:1px solid #ccc}
details.target-details{margin-top:4px;font-size:12px}.detail{margin-top:4px;padding:2px 4px}
#other li[hidden]{display:none}
"""

_SCRIPT = """
(function(){
  var input=document.getElementById('q'), select=document.getElementById('product');
  var rows=Array.prototype.slice.call(document.querySelectorAll('tbody tr.row'));
  var others=Array.prototype.slice.call(document.querySelectorAll('#other li'));
  var count=document.getElementById('count'), none=document.getElementById('none'), other=document.getElementById('other');
  // as cairn.matrix.search.normalize: lower case, letters and digits only ("7900 XTX" = "7900xtx")
  function norm(s){return s.toLowerCase().replace(/[^a-z0-9]+/g,'');}
  function found(el,q){return el.getAttribute('data-search').split(' ').some(function(k){return k.indexOf(q)>=0;});}
  function apply(){
    var q=norm(input.value), p=select.value, shown=0, elsewhere=0;
    rows.forEach(function(row){
      var product=row.getAttribute('data-product');
      var ok=(!q || found(row,q)) && (!p || product===p);
      if(ok){row.removeAttribute('hidden');shown++;}else{row.setAttribute('hidden','');}
    });
    others.forEach(function(li){  // a GPU the release does not serve: listed only when searched for, with why
      var ok=(q || p) && (!q || found(li,q)) && (!p || li.getAttribute('data-product')===p);
      if(ok){li.removeAttribute('hidden');elsewhere++;}else{li.setAttribute('hidden','');}
    });
    other.hidden=elsewhere===0;
    other.setAttribute('data-shown',String(elsewhere));
    if(shown===1){  // one GPU left: show its squares' (and its target's details') reasons and commands without a click
      rows.filter(function(r){return !r.hasAttribute('hidden');})[0].querySelectorAll('td.sq > details, details.target-details').forEach(function(d){d.open=true;});
    }
    count.textContent=shown+' of '+rows.length+' GPUs shown';
    count.setAttribute('data-shown',String(shown));
    none.hidden=shown+elsewhere>0;
  }
  function fromUrl(){
    var m=/[#?&]q=([^&]*)/.exec(location.hash+'&'+location.search), p=/[#?&]product=([^&]*)/.exec(location.hash+'&'+location.search);
    if(m){input.value=decodeURIComponent(m[1].replace(/\\+/g,' '));}
    if(p){select.value=decodeURIComponent(p[1].replace(/\\+/g,' '));}
  }
  input.addEventListener('input',apply);select.addEventListener('change',apply);
  window.addEventListener('hashchange',function(){fromUrl();apply();});
  fromUrl();apply();
})();
"""


def product_targets(registry_products: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Product name → the gfx targets it has, from ``{target: products}`` (the target registry)."""
    out: dict[str, list[str]] = {}
    for target, products in sorted(registry_products.items()):
        for product in products:
            out.setdefault(product, []).append(target)
    return dict(sorted(out.items()))


def registry_products() -> dict[str, tuple[str, ...]]:
    """``{target: products}`` from ``manifests/targets.toml``."""
    # lazy: cairn.model, 5 ms at start-up (python -X importtime)
    from cairn.model.targets import load_registry

    registry = load_registry()
    return {name: tuple(t.products) for name, t in registry.targets.items()}


def _e(text: str) -> str:
    return html.escape(text)


def _gate_lines(cell: Cell) -> str:
    items = [f'<li class="{g.status}">{_e(g.gate)}: {HTML_MARK.get(g.status, g.status)}' + (f" — {_e(g.reason)}" if g.reason else "") + "</li>"
             for g in cell.gates]
    return f"<ul>{''.join(items)}</ul>" if items else "<p><em>no gate results recorded</em></p>"


def _commands(entry: grid.Entry, registry: str | None, base_url: str | None) -> str:
    """The copy-paste commands of a promotable cell; a held or blocked cell is not published, so none."""
    cell = entry.cell
    if entry.status not in ("passed", "partial"):
        return f"<p>No install command: this cell is not on the {_e(cell.channel)} channel.</p>"
    lines = pull_commands(cell, registry)
    local = [local_image(i) for i in own_images(cell) if public_image(i, registry) is None]
    pip = pip_command(cell, base_url)
    out = "".join(f'<pre class="cmd pull"><code>{_e(cmd)}</code></pre>' for cmd in lines)
    out += "".join(f'<pre class="cmd run"><code>{_e(cmd)}</code></pre>' for cmd in run_commands(cell, registry))
    if local:
        out += ("<p>Published to a local registry only (no public registry configured): "
                + ", ".join(f"<code>{_e(ref)}</code>" for ref in local) + "</p>")
    if pip:
        out += f'<pre class="cmd pip"><code>{_e(pip)}</code></pre>'
    elif cell.wheels and cell.index_url:
        out += f"<p>Wheels on the index <code>{_e(cell.index_url)}</code> (relative to the repository root).</p>"
    return out


def _entry(entry: grid.Entry, registry: str | None, base_url: str | None) -> str:
    cell = entry.cell
    req = cell.requirements
    reasons = "".join(f"<li>{_e(r)}</li>" for r in entry.reasons)
    python = python_range(cell) or cell.python  # what the wheels install on, not the image's Python
    return (f'<div class="entry" data-cell="{_e(entry.via or cell.id)}" data-status="{entry.status}">'
            f"<b>{_e(cell.framework.name)} {_e(cell.framework.version)}</b> · Python {_e(python)} · {_e(cell.os)} · "
            f'<span class="st-{entry.status}">{entry.status}</span>'
            f"<ul>{reasons}</ul>{_commands(entry, registry, base_url)}"
            f"<details><summary>gates</summary>{_gate_lines(cell)}</details>"
            f"<p><small>needs {_e(req.driver_name)} {_e(str(req.driver))}, kernel {_e(str(req.kernel))}</small></p></div>")


def _square(square: grid.Square, registry: str | None, base_url: str | None) -> str:
    status = square.status
    if status == "absent":
        return f'<td class="sq st-absent" data-column="{_e(square.column)}" data-status="absent">{ABSENT}</td>'
    more = f" ({len(square.entries)} cells)" if len(square.entries) > 1 else ""
    entries = "".join(_entry(e, registry, base_url) for e in square.entries)
    return (f'<td class="sq st-{status}" data-column="{_e(square.column)}" data-status="{status}">'
            f"<details><summary>{status}{more}</summary>{entries}</details></td>")


def _detail(square: grid.Square, registry: str | None, base_url: str | None) -> str:
    """One of a target's details (the SDK, the validation kernels): its status and entries, as a square has."""
    label = grid.detail_label(square.column)
    if square.status == "absent":
        return f'<div class="detail st-absent" data-column="{_e(square.column)}" data-status="absent">{_e(label)}: {ABSENT}</div>'
    entries = "".join(_entry(e, registry, base_url) for e in square.entries)
    return (f'<div class="detail st-{square.status}" data-column="{_e(square.column)}" data-status="{square.status}">'
            f"<b>{_e(label)}</b>: {square.status}{entries}</div>")


def _row(row: grid.Row, registry: str | None, base_url: str | None) -> str:
    squares = "".join(_square(sq, registry, base_url) for sq in row.squares)
    details = "".join(_detail(sq, registry, base_url) for sq in row.details)
    what = ", ".join(grid.detail_label(sq.column) for sq in row.details)
    more = (f'<details class="target-details"><summary>{_e(what)}</summary>{details}</details>' if details else "")
    keys = " ".join(search.search_keys(row.product, row.gfx_target))
    return (f'<tr class="row" data-target="{_e(row.gfx_target)}" data-product="{_e(row.product)}" data-search="{_e(keys)}">'
            f"<th>{_e(row.product) or '<em>unknown product</em>'}</th>"
            f"<td><b>{_e(row.gfx_target)}</b><br><small>{_e(row.family)}</small>{more}</td>{squares}</tr>")


def _unserved(items: Sequence[search.Unserved], release: str) -> str:
    """The GPUs the release has no cell for, each with why and what to use instead; hidden until searched for."""
    lis = "".join(f'<li data-target="{_e(u.gfx_target)}" data-product="{_e(u.product)}" '
                  f'data-search="{_e(" ".join(search.search_keys(u.product, u.gfx_target)))}" hidden>'
                  f"<b>{_e(u.product)}</b> ({_e(u.gfx_target)}): {_e(u.says)}</li>" for u in items)
    return (f'<div id="other" data-shown="0" hidden><p>Not in release {_e(release)}:</p><ul>{lis}</ul></div>\n'
            if items else '<div id="other" data-shown="0" hidden><ul></ul></div>\n')


def _changes_html(matrix: Matrix, base_url: str | None, changes: Sequence[str]) -> str:
    """What changed since the release the channel served before: a link to the published diff, and its lines."""
    previous = matrix.release.previous
    if previous is None:
        return ""
    where = (f'<a href="{_e(base_url + previous.diff)}">{_e(previous.diff)}</a>' if base_url
             else f"<code>{_e(previous.diff)}</code> (relative to the repository root)")
    text = "\n".join(changes)
    lines = f"<details><summary>What changed</summary><pre>{_e(text)}</pre></details>" if changes else ""
    return (f'<div id="changes"><p>Changes since {_e(previous.version)}, the release this channel served before: '
            f"{where} — <code>cairn diff</code> of the two releases.</p>{lines}</div>\n")


def to_html(matrix: Matrix, products_by_target: Mapping[str, Sequence[str]], registry: str | None = None,
            base_url: str | None = None, changes: Sequence[str] = (), unserved: Sequence[search.Unserved] | None = None) -> str:
    """The whole page: header, filter controls, the grid (one row per product of every target shipped).

    ``registry`` is the public registry loopback image references are shown on (``commands.public_image``);
    ``base_url`` is the repository root the cells' relative index URLs hang off (no pip command without one);
    ``changes``: the text of the diff from the channel's previous release (``release.previous``), when read;
    ``unserved``: the products the release has no cell for, with what to use instead (default: from the target
    registry and the release manifests, ``search.unserved_of``).
    """
    unserved = search.unserved_of(matrix, products_by_target) if unserved is None else unserved
    rel = matrix.release
    catalog = product_targets(products_by_target)
    options = "".join(f'<option value="{_e(p)}">{_e(p)} ({", ".join(ts)})</option>' for p, ts in catalog.items())
    rows = grid.rows(matrix, products_by_target)
    body = "\n".join(_row(r, registry, base_url) for r in rows)
    heads = "".join(f"<th>{_e(c)}</th>" for c in grid.columns(matrix))
    required = "; ".join(f"{ch}: {', '.join(g) or 'none'}" for ch, g in rel.required_gates)
    legend = "".join(f'<span class="st-{s}">{s}</span>' for s in grid.STATUSES) + f'<span class="st-absent">{ABSENT}</span>'
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_e(rel.name)} {_e(rel.version)} — compatibility matrix</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{_e(rel.name)} {_e(rel.version)} <small>({_e(rel.channel)})</small></h1>\n"
        f"<p>Generated from the signed <code>matrix.json</code> (schema {_e(matrix.schema)}). "
        f"Required gates per channel — {_e(required)}. Click a square for why, and the commands to install it.</p>\n"
        f"{_changes_html(matrix, base_url, changes)}"
        f'<p class="legend">{legend}</p>\n'
        '<div id="controls"><label>GPU product or gfx target: <input id="q" type="search" placeholder="e.g. 7900 XTX, RX 9070 XT or gfx1100"></label> '
        f'<label>Product: <select id="product"><option value="">any</option>{options}</select></label> '
        f'<span id="count" data-shown="{len(rows)}">{len(rows)} of {len(rows)} GPUs shown</span></div>\n'
        f'<p id="none" hidden>No GPU product or gfx target known to Cairn matches that (try the product name, e.g. '
        f'"7900 XTX", or the gfx target of rocminfo).</p>\n{_unserved(unserved, rel.version)}'
        f'<table id="grid">\n<thead><tr><th>GPU</th><th>gfx target</th>{heads}</tr></thead>\n'
        f"<tbody>\n{body}\n</tbody>\n</table>\n"
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )

def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_image(image: ImageRef, registry: str | None) -> str:
    ref = public_image(image, registry)
    return f"`{ref}`" if ref else f"`{local_image(image)}` (local registry only)"


def to_markdown(matrix: Matrix, registry: str | None = None, changes: Sequence[str] = ()) -> str:
    """A docs table: one row per cell, gates with status and reason, wheels and images by digest (on the
    public ``registry`` where the reference is a loopback one, as on the page); ``changes`` as for ``to_html``."""
    rel = matrix.release
    lines = [f"# {rel.name} {rel.version} ({rel.channel}) — compatibility matrix", "",
             "Generated from the signed `matrix.json`; do not edit by hand.", ""]
    if rel.previous is not None:
        lines += [f"Changes since {rel.previous.version}, the release this channel served before: `{rel.previous.diff}`", ""]
        lines += (["```", *changes, "```", ""] if changes else [])
    for ch, gates in rel.required_gates:
        lines.append(f"- required on **{ch}**: {', '.join(gates) or 'none'}")
    lines += ["", "| gfx target | Products | OS | Python | Framework | Wheels | Images | Gates | Requirements |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(matrix.cells, key=lambda c: c.id):
        wheels = "<br>".join(f"`{w.filename}`" for w in c.wheels) or "—"
        images = "<br>".join(_md_image(i, registry) for i in c.images) or "—"
        gate_marks = "<br>".join(([f"⚠ {grid.partial_text(c)}"] if c.partial else [])
                                 + [f"{g.gate}: {STATUS_MARK.get(g.status, g.status)}" + (f" ({g.reason})" if g.reason else "") for g in c.gates]) or "—"
        req = c.requirements
        reqs = f"{req.driver_name} {req.driver}; kernel {req.kernel}"
        lines.append("| " + " | ".join(_md(x) for x in (c.gfx_target, ", ".join(c.products) or "—", c.os, python_range(c) or c.python,
                                                          f"{c.framework.name} {c.framework.version}", wheels, images, gate_marks, reqs)) + " |")
    return "\n".join(lines) + "\n"
