"""Signed records for the shared action cache: who may say "this key's output is that tree".

A cache record is the only thing in the bucket a reader cannot check against its own name: a tree or a blob is
named by the digest of its bytes, but a record maps an action key to an output digest, and a writer who can put
objects under the cache prefix can point a key at a tree they made. The bucket's write policy keeps such writers
out only if it is right, and nothing here could notice if it were not. So every record is a DSSE envelope
(``cairn.dsse``, payload type ``application/vnd.cairn.cache-record+json``) signed by a cache writer's key, and a
reader uses a record only when it verifies with a key of its trust list. A record with no signature, a signature
that does not verify, or one by a key the list does not name is not used: the action runs locally instead.

The trust list is a JSON list of public keys (each as ``cairn keys cache-writer`` prints it: ``keyid``,
``keytype``, ``scheme``, ``keyval`` and an optional ``name``), read from ``--cache-trust FILE`` or the file
``$CAIRN_CACHE_TRUST`` names; in CI it is a file in the repository (``publish/cache-writers.json``), public like
the pinned root. The writer's private key comes from ``--cache-key FILE`` or ``$CAIRN_CACHE_SIGNING_KEY``, which
holds either the PEM itself (as a CI secret does) or the path of a PEM file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.dsse import (
    Unverified,
    generate,
    key_from_entry,
    load_signer,
    open_envelope,
    public_entry,
    sign_envelope,
)
from cairn.errors import CairnError, InputError
from cairn.io import atomic_write

if TYPE_CHECKING:
    from securesystemslib.signer import Key, Signer

PAYLOAD_TYPE = "application/vnd.cairn.cache-record+json"
TRUST_ENV = "CAIRN_CACHE_TRUST"
KEY_ENV = "CAIRN_CACHE_SIGNING_KEY"
MAX_RECORD = 64 << 10  # a record is a few hundred bytes
TRUST_FIX = "list the cache writers' public keys in it as JSON ([{...}, ...], each as cairn keys cache-writer prints it)"
KEY_FIX = "pass the cache-writer key cairn keys cache-writer wrote (its .pem), or read the cache only (--cache-read-only)"


@dataclass(frozen=True)
class Writer:
    name: str
    key: Key


@dataclass(frozen=True)
class Trust:
    """The cache writers a reader trusts, and the file that said so (for messages)."""

    source: str
    writers: tuple[Writer, ...]

    def keys(self) -> list[Key]:
        return [w.key for w in self.writers]

    def trusts(self, keyid: str) -> bool:
        return any(w.key.keyid == keyid for w in self.writers)

    def name(self, keyid: str) -> str:
        return next((w.name for w in self.writers if w.key.keyid == keyid), "")


def load_trust(path: Path | str | None) -> Trust:
    """The trust list at ``path``, else at ``$CAIRN_CACHE_TRUST``; one line naming the file when it cannot be used."""
    if path is None:
        path = os.environ.get(TRUST_ENV) or None
    if path is None:
        raise CairnError("--cache needs the list of cache-writer keys to trust: --cache-trust FILE (or $CAIRN_CACHE_TRUST) "
                         "— a JSON list of public keys; cairn keys cache-writer makes a key and prints its entry")
    try:
        doc = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise InputError(path, f"the cache trust list cannot be read ({exc.strerror or exc})", TRUST_FIX) from None
    except ValueError as exc:
        raise InputError(path, f"the cache trust list is not JSON ({exc})", TRUST_FIX) from None
    if not isinstance(doc, list) or not doc:
        raise InputError(path, "the cache trust list names no writer (expected a non-empty JSON list of public keys)", TRUST_FIX)
    writers = []
    for number, entry in enumerate(doc, 1):
        try:
            key = key_from_entry(entry)
        except ValueError as exc:
            raise InputError(path, f"entry {number} of the cache trust list: {exc}", TRUST_FIX) from None
        name = entry.get("name", "")
        writers.append(Writer(name if isinstance(name, str) and name else key.keyid[:16], key))
    return Trust(str(path), tuple(writers))


def load_writer(path: Path | str | None) -> Signer | None:
    """The cache writer's signer from ``path``, else from ``$CAIRN_CACHE_SIGNING_KEY`` (a PEM, or a PEM file's
    path); None when neither names a key."""
    where: Path | str
    if path is not None:
        where = Path(path)
    else:
        value = os.environ.get(KEY_ENV, "")
        if not value.strip():
            return None
        if value.lstrip().startswith("-----BEGIN"):
            return load_signer(value.strip().encode() + b"\n", f"${KEY_ENV}", KEY_FIX)
        where = Path(value)
    try:
        pem = where.read_bytes()
    except OSError as exc:
        raise InputError(where, f"the cache-writer key cannot be read ({exc.strerror or exc})", KEY_FIX) from None
    return load_signer(pem, where, KEY_FIX)


def sign_record(body: dict[str, Any], signer: Signer) -> bytes:
    """The bytes of a signed record: one DSSE envelope over the record's JSON."""
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return (json.dumps(sign_envelope(payload, PAYLOAD_TYPE, signer), sort_keys=True, indent=1) + "\n").encode()


def open_record(data: bytes, trust: Trust) -> bytes:
    """The payload of a record signed by a trusted writer; ``Unverified`` (kind and key id hints) otherwise."""
    payload, _signed_by = open_envelope(data, PAYLOAD_TYPE, trust.keys(), max_bytes=MAX_RECORD, what="a cache record")
    return payload


def why_not(exc: Unverified, trust: Trust) -> str:
    """What is wrong with a record, as the words after "record ac/<key>.v3.json"."""
    hints = [k for k in exc.keyids if k]
    if exc.kind == "untrusted-key":
        who = ", ".join(k[:16] for k in hints) or "a key with no id"
        return f"is signed by an untrusted key {who} (not in {trust.source})"
    if exc.kind == "bad-signature":
        names = ", ".join(f"{trust.name(k)} ({k[:16]})" for k in hints if trust.name(k))
        return f"has a bad signature: it claims trusted key {names} but does not verify (changed after signing)"
    if exc.kind == "unsigned":
        return "is not signed"
    return f"is not a signed cache record ({exc})"


def make_writer_key(directory: Path, keytype: str, name: str) -> tuple[Path, dict[str, Any]]:
    """A new cache-writer key in ``directory``: ``cache-writer.pem`` (mode 0600) and ``cache-writer.pub.json``;
    the trust-list entry of its public half. Refuses to overwrite either: a writer key some trust list names would
    silently stop being trusted."""
    directory = Path(directory)
    private, public = directory / "cache-writer.pem", directory / "cache-writer.pub.json"
    for path in (private, public):
        if path.exists():
            raise CairnError(f"{path} already exists — keep that cache-writer key, or choose another --dir")
    signer = generate(keytype)
    entry = {"name": name, **public_entry(signer)}
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(private, signer.private_bytes, 0o600)  # type: ignore[attr-defined]
    atomic_write(public, (json.dumps(entry, indent=1, sort_keys=True) + "\n").encode(), 0o644)
    return private, entry


def add_to_trust(path: Path, entry: dict[str, Any]) -> int:
    """Add ``entry`` to the trust list at ``path`` (made when absent; an entry of the same key is replaced); the
    number of writers it then trusts. A list that cannot be read is refused, not overwritten."""
    path = Path(path)
    current: list[Any] = []
    if path.exists():
        load_trust(path)  # one line naming the file if it is not a trust list
        current = json.loads(path.read_bytes())
    keyid = key_from_entry(entry).keyid
    entries = [e for e in current if key_from_entry(e).keyid != keyid] + [entry]
    atomic_write(path, (json.dumps(entries, indent=1, sort_keys=True) + "\n").encode(), 0o644)
    return len(entries)
