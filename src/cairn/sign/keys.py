"""The release key set: who may sign what, created once with ``cairn keys init`` and kept out of the repo.

Roles (``docs/publishing.md``): three offline Ed25519 root keys with threshold 2, one Ed25519 targets key,
one online Ed25519 key shared by snapshot and timestamp, one Ed25519 provenance key (DSSE statements) and
one ECDSA P-256 image key (cosign-format signatures; cosign verifies Ed25519 as Ed25519ph, which pyca cannot
make). Private keys are PKCS#8 PEM files, mode 0600, in a directory outside the repository; the public half
of everything is in ``public.json`` and in the signed ``root.json`` that ``publish/`` pins.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from securesystemslib.signer import CryptoSigner, SSlibKey
from tuf.api.metadata import Metadata, Root

from cairn.errors import CairnError
from cairn.io import atomic_write
from cairn.sign.keyfiles import FIX, read_key_files

ROOT_KEYS = 3
ROOT_THRESHOLD = 2
ED25519_ROLES = ("root-1", "root-2", "root-3", "targets", "online", "provenance")
ECDSA_ROLES = ("image",)
ROOT_EXPIRY = timedelta(days=365)


def default_keys_dir() -> Path:
    """``$CAIRN_KEYS`` or ``~/.config/cairn/keys`` — never inside the repository."""
    env = os.environ.get("CAIRN_KEYS")
    return Path(env) if env else Path.home() / ".config" / "cairn" / "keys"


@dataclass(frozen=True)
class KeySet:
    """Signers by role name; ``root`` holds the root signers that are present (offline ones may be absent)."""

    directory: Path
    signers: dict[str, CryptoSigner]

    def signer(self, role: str) -> CryptoSigner:
        if role not in self.signers:
            raise CairnError(f"no private key for '{role}' in {self.directory} — run cairn keys init or copy the key there")
        return self.signers[role]

    @property
    def root_signers(self) -> list[CryptoSigner]:
        return [self.signers[r] for r in ("root-1", "root-2", "root-3") if r in self.signers]

    def public(self, role: str) -> SSlibKey:
        return self.signer(role).public_key  # type: ignore[return-value]

    def image_public_pem(self) -> str:
        return str(self.public("image").keyval["public"])


def init_keys(directory: Path, *, force: bool = False) -> KeySet:
    """Generate every key into ``directory`` (mode 0700); refuses to overwrite an existing key set."""
    directory = Path(directory)
    if (directory / "public.json").exists() and not force:
        raise CairnError(f"{directory} already holds a key set — keep it, or pass --force to replace it (this invalidates the pinned root)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
    except FileExistsError:
        raise CairnError(f"{directory}: is a file, not a directory — give --dir a directory for the key set") from None
    except OSError as exc:
        raise CairnError(f"{directory}: cannot make the key directory ({exc.strerror or exc}) — give --dir a "
                         "directory you may write") from None
    signers: dict[str, CryptoSigner] = {}
    for role in ED25519_ROLES:
        signers[role] = CryptoSigner.generate_ed25519()
    for role in ECDSA_ROLES:
        signers[role] = CryptoSigner.generate_ecdsa()
    for role, signer in signers.items():
        _write(directory / f"{role}.pem", signer.private_bytes, 0o600)
    public = {role: {"keyid": s.public_key.keyid, **s.public_key.to_dict()} for role, s in signers.items()}
    _write(directory / "public.json", (json.dumps(public, indent=1, sort_keys=True) + "\n").encode(), 0o644)
    return KeySet(directory, signers)


def load_keys(directory: Path | None = None) -> KeySet:
    """Load whatever private keys the directory holds (an online signer needs only some of them). A key file that
    cannot be loaded, or that holds another key than ``public.json`` names for its role, is refused in one line."""
    directory = Path(directory or default_keys_dir())
    public, private = read_key_files(directory)
    signers: dict[str, CryptoSigner] = {}
    for role, pem in private.items():
        info = public[role]
        path = directory / f"{role}.pem"
        try:
            key = SSlibKey.from_dict(info["keyid"], {k: v for k, v in info.items() if k != "keyid"})
            loaded = serialization.load_pem_private_key(pem, password=None)
            derived = SSlibKey.from_crypto(loaded.public_key(), info["keyid"], info["scheme"])  # type: ignore[arg-type]
        except (ValueError, TypeError, KeyError, UnsupportedAlgorithm) as exc:
            raise CairnError(f"{path}: cannot be loaded as the {role} key ({exc}) — {FIX}") from None
        if derived.keyval != key.keyval:
            raise CairnError(f"{path}: holds another key than {directory / 'public.json'} names for {role} — {FIX}")
        signers[role] = CryptoSigner(loaded, key)  # type: ignore[arg-type]
    return KeySet(directory, signers)


def ensure_dev_keys(directory: Path) -> tuple[KeySet, bool]:
    """A development key set in ``directory`` (created, with its signed ``root.json``, when absent).

    For builds on machines without the release keys (``nox -s build`` on a fresh checkout): what these
    keys sign verifies only against ``directory/root.json``, never against the pinned ``publish/root.json``.
    Returns the keys and whether they were created now. Keys are only ever made in a directory that holds none:
    part of a key set (a ``public.json`` or a ``.pem`` without the ``root.json``) is refused, never overwritten —
    it may be someone's release keys.
    """
    directory = Path(directory)
    if (directory / "public.json").is_file() and (directory / "root.json").is_file():
        return load_keys(directory), False
    present = sorted(p.name for p in directory.iterdir() if p.name in ("public.json", "root.json") or p.suffix == ".pem") \
        if directory.is_dir() else []
    if present:
        missing = "root.json" if "public.json" in present else "public.json"
        raise CairnError(f"{directory}: holds part of a key set ({', '.join(present[:4])}) but no {missing} — development "
                         f"keys never overwrite keys: remove that directory to make new ones, or restore its {missing}")
    keys = init_keys(directory)
    from tuf.api.serialization.json import JSONSerializer

    _write(directory / "root.json", make_root(keys).to_bytes(JSONSerializer(compact=False)), 0o644)
    return keys, True


def make_root(keys: KeySet, *, version: int = 1, expires: datetime | None = None) -> Metadata[Root]:
    """Root metadata naming every role's keys, signed by all root keys present (threshold 2 of 3)."""
    root = Root(version=version, expires=expires or _now() + ROOT_EXPIRY, consistent_snapshot=True)
    for name in ("root-1", "root-2", "root-3"):
        root.add_key(keys.public(name), "root")
    root.add_key(keys.public("targets"), "targets")
    root.add_key(keys.public("online"), "snapshot")
    root.add_key(keys.public("online"), "timestamp")
    root.roles["root"].threshold = ROOT_THRESHOLD
    md = Metadata(root)
    signers = keys.root_signers
    if len(signers) < ROOT_THRESHOLD:
        raise CairnError(f"only {len(signers)} root key(s) present, {ROOT_THRESHOLD} needed — bring the offline root keys")
    for signer in signers:
        md.sign(signer, append=True)
    return md


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _write(path: Path, data: bytes, mode: int) -> None:
    atomic_write(path, data, mode)
