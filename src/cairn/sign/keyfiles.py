"""The key directory's files, checked without the signing libraries.

``cairn publish`` starts sending a release's blobs before tuf, securesystemslib and cryptography are imported
(``cairn.publish.blob_sender``). A key directory that cannot sign — a private key file that is damaged, empty or
missing for a role publishing needs, or a ``public.json`` that is not a key set — must stop the publish before
that first write, with one line naming the file, not after it with a traceback and unsigned blobs left in the
bucket. So the files are read and their shape checked here, in plain Python; ``cairn.sign.keys.load_keys``
reads them through the same function and then loads the keys themselves.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from pathlib import Path
from typing import Any

from cairn.errors import CairnError

# what ``cairn publish`` signs with: attestations (provenance), targets, snapshot and timestamp (online)
PUBLISH_ROLES = ("provenance", "targets", "online")
_PEM = re.compile(rb"-----BEGIN PRIVATE KEY-----\r?\n([A-Za-z0-9+/=\r\n]+)-----END PRIVATE KEY-----\r?\n?")
FIX = "restore it from your backup of the key set, or make a new one with cairn keys init (a new key set needs a new pinned root)"


def read_key_files(directory: Path) -> tuple[dict[str, dict[str, Any]], dict[str, bytes]]:
    """``public.json`` (role → public key) and the PEM bytes of every role whose private key file is present."""
    public_path = directory / "public.json"
    if not public_path.is_file():
        raise CairnError(f"no key set in {directory} — run cairn keys init --dir {directory} (or set CAIRN_KEYS)")
    try:
        public = json.loads(public_path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CairnError(f"{public_path}: not a key set's public.json ({exc}) — {FIX}") from None
    if not isinstance(public, dict) or not all(isinstance(v, dict) and {"keyid", "keytype", "scheme", "keyval"} <= v.keys()
                                               for v in public.values()):
        raise CairnError(f"{public_path}: not a key set's public.json (expected role → {{keyid, keytype, scheme, keyval}}) — {FIX}")
    private: dict[str, bytes] = {}
    for role in sorted(public):
        pem = directory / f"{role}.pem"
        if not pem.is_file():
            continue
        try:
            data = pem.read_bytes()
        except OSError as exc:
            raise CairnError(f"{pem}: cannot be read ({exc.strerror}) — {FIX}") from None
        match = _PEM.fullmatch(data)
        try:
            valid = match is not None and len(base64.b64decode(b"".join(match.group(1).split()), validate=True)) > 0
        except binascii.Error:
            valid = False
        if not valid:
            raise CairnError(f"{pem}: not a PKCS#8 PEM private key (as cairn keys init writes them) — {FIX}")
        private[role] = data
    return public, private


def check_signing_keys(directory: Path, roles: tuple[str, ...] = PUBLISH_ROLES) -> None:
    """The key directory's files are well formed and hold a private key for each of ``roles``."""
    _public, private = read_key_files(directory)
    missing = [role for role in roles if role not in private]
    if missing:
        raise CairnError(f"no private key for {', '.join(repr(r) for r in missing)} in {directory} (publishing signs with "
                           f"{', '.join(roles)}) — copy the key file there from the key set's backup, or run cairn keys init")
