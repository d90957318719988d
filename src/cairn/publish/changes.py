"""What changed since the release a channel served before, published with the promotion that replaces it.

When ``cairn publish`` or ``cairn promote`` moves a channel from release A to release B, the ``cairn diff`` of
A's staging record against B's (pins, cells, wheels, images, gate results: ``cairn.diff``) goes up as
``staging/<B>/diff-from-<A>.json``, a TUF target like every object outside ``metadata/``, and the channel's
matrix names it (``release.previous``). The matrix page links it, so a bug report against the channel can name
exactly which build changed what. A channel's first release names nothing. Publishing B to a channel that
already serves B (a re-run, or gate results recorded later) keeps the A it named and writes the diff again from
the current gate results: the same bytes when nothing changed, so a re-run writes nothing.

What is read here is the signed version of each file (its content-addressed copy, checked against the signed
targets): a diff is only ever made from what the repository's metadata vouches for, never from a page a killed
run left behind unsigned.
"""

from __future__ import annotations

import json
from typing import Any

from cairn.diff.compare import compare
from cairn.diff.views import staged_view
from cairn.errors import CairnError
from cairn.matrix.build import Published
from cairn.matrix.model import Previous, diff_key, parse_matrix
from cairn.publish.indexes import promotion
from cairn.publish.objects import JSON, Obj, json_bytes
from cairn.publish.report import Report
from cairn.publish.upload import Run


def channel_objects(run: Run, channel: str, record: dict[str, Any], gates: dict[str, Any], report: Report,
                    where: Published | None = None) -> list[Obj]:
    """What a promotion writes for ``channel``: the diff from the release it served before (if any), then its
    pages and matrix (``indexes.promotion``), the matrix naming that release."""
    previous, diff = since_previous(run, channel, record, gates)
    return [*diff, *promotion(record, gates, channel, report, previous, where)]


def since_previous(run: Run, channel: str, record: dict[str, Any], gates: dict[str, Any]) -> tuple[Previous | None, list[Obj]]:
    """The release ``channel`` served before ``record``'s and the diff object to upload with the promotion;
    ``(None, [])`` when the channel served nothing before it."""
    version = record["release"]["version"]
    served = _signed(run, f"channels/{channel}/matrix.json")
    if served is None:
        return None, []
    where = f"{run.backend.url}/channels/{channel}/matrix.json"
    current = parse_matrix(served, where, "republish the channel's release").release
    previous = current.version if current.version != version else (current.previous.version if current.previous else "")
    if not previous:
        return None, []
    old_record, old_gates = _signed(run, f"staging/{previous}/release.json"), _signed(run, f"staging/{previous}/gates.json")
    if old_record is None:
        raise CairnError(f"{where} names release {previous}, but staging/{previous}/release.json is not a signed target of "
                         f"{run.backend.url} — run cairn verify on it")
    diff = compare(staged_view(json.loads(old_record), json.loads(old_gates or b"{}"), f"staging/{previous}"),
                   staged_view(record, gates, f"staging/{version}"))
    key = diff_key(version, previous)
    return Previous(previous, key), [Obj(key, json_bytes(diff), JSON, False)]


def _signed(run: Run, key: str) -> bytes | None:
    """``key``'s bytes as the verified signed targets list them (``None`` when they do not list it), read from its
    content-addressed copy: the plain name may already hold a newer version that a killed run wrote and never
    signed. Refused when that copy does not hold the signed bytes (``Run.signed``)."""
    return run.signed(key)
