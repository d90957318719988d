"""Push an image's OCI layout to the registry with its digest preserved, and prove it arrived.

``skopeo copy --preserve-digests`` uploads exactly our blobs, so the registry's manifest digest is the
one ``image.json`` records; ``skopeo inspect --raw`` then reads the manifest back by digest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import IO, Any

from cairn import proc
from cairn.errors import ActionFailed


def push(image_tree: Path, registry: str, log: IO[str]) -> dict[str, Any]:
    record = json.loads((image_tree / "image.json").read_text())
    skopeo = proc.require_tool("skopeo", "skopeo")
    repo, digest = record["repo"], record["digest"]
    for tag in record["tags"]:
        proc.run([skopeo, "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                  f"oci:{image_tree / 'oci'}:{tag}", f"docker://{registry}/{repo}:{tag}"], log=log, timeout=1800)
    raw = proc.run([skopeo, "inspect", "--raw", "--tls-verify=false", f"docker://{registry}/{repo}@{digest}"], log=log)
    got = "sha256:" + hashlib.sha256(raw.stdout.encode()).hexdigest()
    if got != digest:
        raise ActionFailed(f"registry {registry} holds {repo}@{got}, not the built {digest} — the registry rewrote the manifest")
    return {"schema": "cairn.push/v1", "registry": registry, "repo": repo, "tags": record["tags"], "digest": digest,
            "reference": f"{repo}@{digest}", "image": record.get("name"), "target": record.get("target", "")}
