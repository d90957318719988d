"""The matrix as a static HTML page (filter by GPU product or gfx target) and as a Markdown table.

Both are pure functions of the matrix document plus the product names of the target registry, so the
same matrix always renders to the same bytes. The page has no external assets (inline CSS and a few
lines of script): it works from a ``file://`` URL, an S3 bucket or an air-gapped mirror. The filter
reads ``#q=<text>`` or ``?q=<text>`` from the URL, so a link can carry it (``…/matrix.html#q=MI250``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence

from cairn.matrix.model import Cell, Matrix

STATUS_MARK = {"passed": "✅ passed", "failed": "❌ failed", "not-run": "⏸ not run"}  # Markdown renderers have emoji
# The page colours each status by CSS class and spells it out: a browser without an emoji font shows boxes.
HTML_MARK = {"passed": "passed", "failed": "FAILED", "not-run": "not run"}

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f2f2f2}tr[hidden]{display:none}code{font-size:12px;word-break:break-all}
.passed{color:#176b1d}.failed{color:#a4000f;font-weight:bold}.not-run{color:#7a5b00}.partial{color:#8a4b00;font-weight:bold}
#controls{margin:1em 0}#controls input,#controls select{font-size:14px;padding:3px}
"""

_SCRIPT = """
(function(){
  var input=document.getElementById('q'), select=document.getElementById('product');
  var rows=Array.prototype.slice.call(document.querySelectorAll('tbody tr.cell'));
  var count=document.getElementById('count'), none=document.getElementById('none');
  var productTargets=JSON.parse(document.getElementById('products').textContent);
  function apply(){
    var q=input.value.trim().toLowerCase(), shown=0;
    var wanted=select.value ? productTargets[select.value] || [] : null;
    rows.forEach(function(row){
      var hay=(row.getAttribute('data-target')+' '+row.getAttribute('data-products')).toLowerCase();
      var ok=(!q || hay.indexOf(q)>=0) && (!wanted || wanted.indexOf(row.getAttribute('data-target'))>=0);
      if(ok){row.removeAttribute('hidden');shown++;}else{row.setAttribute('hidden','');}
    });
    count.textContent=shown+' of '+rows.length+' rows shown';
    count.setAttribute('data-shown',String(shown));
    none.hidden=shown>0;
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
    from cairn.model.targets import load_registry

    registry = load_registry()
    return {name: tuple(t.products) for name, t in registry.targets.items()}


def _gates(cell: Cell) -> str:
    items = [_partial_html(cell)] if cell.partial else []
    for g in cell.gates:
        reason = f" — {html.escape(g.reason)}" if g.reason else ""
        items.append(f'<div class="{g.status}">{html.escape(g.gate)}: {HTML_MARK.get(g.status, g.status)}{reason}</div>')
    return "".join(items) or "<em>none recorded</em>"


def partial_text(cell: Cell) -> str:
    """One line for a partial cell: which shipped libraries have no code for its target."""
    return f"partial — no {cell.gfx_target} code in: {', '.join(cell.partial)}"


def _partial_html(cell: Cell) -> str:
    return f'<div class="partial">{html.escape(partial_text(cell))}</div>'


def _row(cell: Cell) -> str:
    wheels = "".join(f'<div><a href="{html.escape(w.url)}">{html.escape(w.filename)}</a><br><code>sha256:{w.sha256}</code></div>'
                     for w in cell.wheels) or "<em>none</em>"
    images = "".join(f"<div><code>{html.escape(i.pinned)}</code></div>" for i in cell.images) or "<em>none</em>"
    req = cell.requirements
    reqs = (f"{html.escape(req.driver_name)} {html.escape(str(req.driver))}"
            + (f" <small>({html.escape(req.driver.note)})</small>" if req.driver.note else "")
            + f"<br>kernel {html.escape(str(req.kernel))}" + (f" <small>({html.escape(req.kernel.note)})</small>" if req.kernel.note else ""))
    products = ", ".join(cell.products)
    return (f'<tr class="cell" data-target="{html.escape(cell.gfx_target)}" data-products="{html.escape(products)}" '
            f'data-id="{html.escape(cell.id)}">'
            f"<td>{html.escape(cell.release)}<br><small>{html.escape(cell.channel)}</small></td>"
            f"<td><b>{html.escape(cell.gfx_target)}</b><br><small>{html.escape(cell.family)}</small></td>"
            f"<td>{html.escape(products) or '<em>unknown</em>'}</td><td>{html.escape(cell.os)}</td><td>{html.escape(cell.python)}</td>"
            f"<td>{html.escape(cell.framework.name)} {html.escape(cell.framework.version)}</td>"
            f"<td>{wheels}</td><td>{images}</td><td>{_gates(cell)}</td><td>{reqs}</td></tr>")


def to_html(matrix: Matrix, products_by_target: Mapping[str, Sequence[str]]) -> str:
    """The whole page: header, filter controls, one row per cell (sorted by cell id)."""
    rel = matrix.release
    catalog = product_targets(products_by_target)
    options = "".join(f'<option value="{html.escape(p)}">{html.escape(p)} ({", ".join(ts)})</option>' for p, ts in catalog.items())
    rows = "\n".join(_row(c) for c in sorted(matrix.cells, key=lambda c: c.id))
    required = "; ".join(f"{ch}: {', '.join(g) or 'none'}" for ch, g in rel.required_gates)
    data = json.dumps(catalog, sort_keys=True).replace("</", "<\\/")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{html.escape(rel.name)} {html.escape(rel.version)} — compatibility matrix</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(rel.name)} {html.escape(rel.version)} <small>({html.escape(rel.channel)})</small></h1>\n"
        f"<p>Generated from the signed <code>matrix.json</code> (schema {html.escape(matrix.schema)}). "
        f"Required gates per channel — {html.escape(required)}.</p>\n"
        '<div id="controls"><label>GPU product or gfx target: <input id="q" type="search" placeholder="e.g. MI250 or gfx90a"></label> '
        f'<label>Product: <select id="product"><option value="">any</option>{options}</select></label> '
        f'<span id="count" data-shown="{len(matrix.cells)}">{len(matrix.cells)} of {len(matrix.cells)} rows shown</span></div>\n'
        '<p id="none" hidden>No cell of this release matches: the GPU is not supported by this release.</p>\n'
        '<table>\n<thead><tr><th>Release</th><th>gfx target</th><th>Products</th><th>OS</th><th>Python</th><th>Framework</th>'
        "<th>Wheels</th><th>Images (pull by digest)</th><th>Gates</th><th>Requirements</th></tr></thead>\n"
        f"<tbody>\n{rows}\n</tbody>\n</table>\n"
        f'<script type="application/json" id="products">{data}</script>\n'
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(matrix: Matrix) -> str:
    """A docs table: one row per cell, gates with status and reason, wheels and images by digest."""
    rel = matrix.release
    lines = [f"# {rel.name} {rel.version} ({rel.channel}) — compatibility matrix", "",
             "Generated from the signed `matrix.json`; do not edit by hand.", ""]
    for ch, gates in rel.required_gates:
        lines.append(f"- required on **{ch}**: {', '.join(gates) or 'none'}")
    lines += ["", "| gfx target | Products | OS | Python | Framework | Wheels | Images | Gates | Requirements |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(matrix.cells, key=lambda c: c.id):
        wheels = "<br>".join(f"`{w.filename}`" for w in c.wheels) or "—"
        images = "<br>".join(f"`{i.pinned}`" for i in c.images) or "—"
        gate_marks = "<br>".join(([f"⚠ {partial_text(c)}"] if c.partial else [])
                                 + [f"{g.gate}: {STATUS_MARK.get(g.status, g.status)}" + (f" ({g.reason})" if g.reason else "") for g in c.gates]) or "—"
        req = c.requirements
        reqs = f"{req.driver_name} {req.driver}; kernel {req.kernel}"
        lines.append("| " + " | ".join(_md(x) for x in (c.gfx_target, ", ".join(c.products) or "—", c.os, c.python,
                                                          f"{c.framework.name} {c.framework.version}", wheels, images, gate_marks, reqs)) + " |")
    return "\n".join(lines) + "\n"
