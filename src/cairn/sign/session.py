"""One publish's signing: every signature a publish or promote makes goes through one ``SigningSession``.

The publisher never holds a private key. It opens a session on the release key set and the pinned TUF root,
and hands it what must be signed — each artifact's provenance statement, the bundle's image references, the
repository's TUF targets — getting back the bytes to upload (DSSE envelopes, the public key files, the new
metadata files in upload order). So which key signs what is decided here, in one place, and the publish flow
reads as what it uploads and in which order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from tuf.api.metadata import Metadata, Root, TargetFile
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CairnError
from cairn.model.build_facts import BuildFacts
from cairn.sign import provenance
from cairn.sign.keys import KeySet
from cairn.sign.tuf import RepoState, SignedMetadata, needs_signing, sign_state

PEM = "application/x-pem-file"
JSON = "application/json"


class SigningSession:
    """The key set and pinned root of one publisher run, and everything it signs with them."""

    def __init__(self, keys: KeySet, root: Metadata[Root]) -> None:
        self.keys, self.root = keys, root

    def key_files(self) -> list[tuple[str, bytes, str]]:
        """The public halves a client verifies with, as (key, bytes, content type): the DSSE key and ``cosign.pub``,
        and the signed runner list when the key set trusts runners (``cairn.sign.runners``; verified first)."""
        # lazy: cairn.sign, cairn.dsse, 7 ms at start-up (python -X importtime)
        from cairn.sign import runners

        public = self.keys.public("provenance")
        body = json.dumps(public.to_dict() | {"keyid": public.keyid}, sort_keys=True, indent=1) + "\n"
        trusted = runners.load(self.keys.directory, self.root)
        return [("keys/provenance.json", body.encode(), JSON), ("keys/cosign.pub", self.keys.image_public_pem().encode(), PEM),
                *([(runners.REPO_KEY, trusted.data, JSON)] if trusted else [])]

    def attest(self, name: str, sha256: str, facts: BuildFacts, recipe: str = "") -> bytes:
        """The ``.intoto.jsonl`` of one artifact: its SLSA provenance, signed by the provenance key."""
        return provenance.sign_statement(provenance.statement(name, sha256, facts, recipe), self.keys.signer("provenance"))

    def sign_images(self, references: Iterable[str], log: Callable[[str], None] = lambda _: None) -> dict[str, str]:
        """A cosign-format signature next to every image, in its registry (``sha256-<hex>.sig``).

        An image whose registry cannot be reached, or that is not in it, is reported as not signed with the
        reason — ``cairn verify IMAGE`` then fails for it, so nothing is silently trusted.
        """
        # lazy: cairn.sign, email, ssl, 17 ms at start-up (python -X importtime)
        from cairn.sign.cosign import sign_image

        results: dict[str, str] = {}
        for ref in references:
            if ref in results:
                continue
            try:
                results[ref] = "signed " + sign_image(ref, self.keys.signer("image"), self.keys.image_public_pem())
            except CairnError as exc:
                results[ref] = f"not signed: {exc}"
        if results:
            signed = sum(1 for v in results.values() if v.startswith("signed"))
            log(f"image signatures: {signed} of {len(results)} signed")
        return results

    def first_root(self) -> bytes | None:
        """``metadata/1.root.json`` as these keys would write it; None when the pinned root is a later version."""
        return self.root.to_bytes(JSONSerializer(compact=False)) if self.root.signed.version == 1 else None

    def root_bytes(self) -> bytes:
        """The pinned root the run signs under, as the bytes a TUF client is bootstrapped from."""
        return self.root.to_bytes(JSONSerializer(compact=False))

    def pinned(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The signed root and the key set's ``public.json``, which a publish fingerprint covers; None without it."""
        try:
            public = json.loads((self.keys.directory / "public.json").read_bytes())
        except (OSError, ValueError):
            return None
        return self.root.signed.to_dict(), public

    def needs_signing(self, state: RepoState, targets: dict[str, TargetFile]) -> bool:
        """Whether serving ``targets`` takes new metadata (see ``sign_metadata``), without signing anything.

        When it does, a key that signing takes and this key set lacks is refused now, as signing would refuse
        it: before the publisher writes a publish record naming a timestamp that could not be signed.
        """
        if not needs_signing(state, targets):
            return False
        self.keys.signer("targets")
        self.keys.signer("online")  # snapshot and timestamp
        return True

    def sign_metadata(self, state: RepoState, targets: dict[str, TargetFile]) -> SignedMetadata | None:
        """Root, targets, snapshot and timestamp for ``targets`` over ``state``; None when nothing changed."""
        return sign_state(self.keys, self.root, state, targets)
