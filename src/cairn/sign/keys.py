"""The release key set: who may sign what, created once with ``cairn keys init`` and kept out of the repo.

Roots change over time: ``cairn keys rotate-root`` replaces the three root keys with new ones in a new root
version signed by the old root's threshold *and* by the new keys (the TUF specification's rule, 5.3.4–5.3.5:
a client that trusts version N accepts N+1 only when N's root keys and N+1's own keys both sign it). Every
root version the key set has signed is kept in ``roots/<N>.root.json``, because a client must walk them one by
one: a repository has to serve each of them (``cairn refresh`` and ``cairn publish`` upload the missing ones).

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
from tuf.api.serialization.json import JSONSerializer

from cairn.errors import CairnError
from cairn.io import atomic_write
from cairn.sign.keyfiles import FIX, read_key_files

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

    _write(directory / "root.json", make_root(keys).to_bytes(JSONSerializer(compact=False)), 0o644)
    return keys, True


ROOT_ROLES = ("root-1", "root-2", "root-3")
ROOTS = "roots"  # <key dir>/roots/<N>.root.json: every root version this key set signed


def read_root(path: Path) -> Metadata[Root]:
    """A signed root from a file, or one line naming the file."""
    try:
        return Metadata[Root].from_bytes(Path(path).read_bytes())
    except OSError as exc:
        raise CairnError(f"{path}: cannot be read ({exc.strerror or exc}) — pass the key set's root.json") from None
    except Exception as exc:  # DeserializationError and the like: not a root
        raise CairnError(f"{path}: not a signed TUF root ({exc}) — pass the key set's root.json") from None


def root_history(directory: Path) -> dict[int, bytes]:
    """Every root version kept in the key directory (``roots/``), and its ``root.json`` under its own version."""
    directory = Path(directory)
    found: dict[int, bytes] = {}
    for path in sorted((directory / ROOTS).glob("*.root.json")):
        found[read_root(path).signed.version] = path.read_bytes()
    if (directory / "root.json").is_file():
        current = read_root(directory / "root.json")
        found.setdefault(current.signed.version, current.to_bytes(JSONSerializer(compact=False)))
    return found


def rotate_root(directory: Path, *, expires: datetime | None = None) -> tuple[Metadata[Root], Metadata[Root]]:
    """Replace the root keys: a new root version naming three new root keys (threshold 2) and the same targets,
    snapshot and timestamp keys, signed by the old root keys present (at least the old threshold) and by every
    new one. Returns (old, new) after the files are written.

    Written in this order, so that an interruption never loses a key: the old root and its private keys are
    copied to ``roots/`` and ``retired/`` first, then the new private keys, ``public.json`` and last ``root.json``.
    """
    directory = Path(directory)
    keys = load_keys(directory)
    old = read_root(directory / "root.json")
    role = old.signed.roles["root"]
    present = [keys.signers[name] for name in ROOT_ROLES if name in keys.signers
               and keys.signers[name].public_key.keyid in role.keyids]
    if len(present) < role.threshold:
        raise CairnError(f"{directory}: {len(present)} of the root keys that {directory / 'root.json'} (version "
                         f"{old.signed.version}) names are present, its threshold is {role.threshold} — bring the "
                         "offline root keys (root-*.pem) into the key directory for the rotation")
    new_signers = {name: CryptoSigner.generate_ed25519() for name in ROOT_ROLES}
    signed = Root(version=old.signed.version + 1, expires=expires or _now() + ROOT_EXPIRY,
                  consistent_snapshot=old.signed.consistent_snapshot)
    for name in ("targets", "snapshot", "timestamp"):
        for keyid in old.signed.roles[name].keyids:
            signed.add_key(old.signed.get_key(keyid), name)
        signed.roles[name].threshold = old.signed.roles[name].threshold
    for signer in new_signers.values():
        signed.add_key(signer.public_key, "root")  # type: ignore[arg-type]
    signed.roles["root"].threshold = ROOT_THRESHOLD
    new = Metadata(signed)
    for signer in [*present, *new_signers.values()]:
        new.sign(signer, append=True)
    old.signed.verify_delegate("root", new.signed_bytes, new.signatures)  # what a client trusting the old root checks …
    new.signed.verify_delegate("root", new.signed_bytes, new.signatures)  # … and what it checks with the new root's own keys

    serializer = JSONSerializer(compact=False)
    _write(directory / ROOTS / f"{old.signed.version}.root.json", old.to_bytes(serializer), 0o644)
    for name in ROOT_ROLES:
        if (directory / f"{name}.pem").is_file():
            _write(directory / "retired" / f"{name}.v{old.signed.version}.pem", (directory / f"{name}.pem").read_bytes(), 0o600)
    for name, signer in new_signers.items():
        _write(directory / f"{name}.pem", signer.private_bytes, 0o600)
    public = json.loads((directory / "public.json").read_bytes())
    public.update({name: {"keyid": s.public_key.keyid, **s.public_key.to_dict()} for name, s in new_signers.items()})
    _write(directory / "public.json", (json.dumps(public, indent=1, sort_keys=True) + "\n").encode(), 0o644)
    new_bytes = new.to_bytes(serializer)
    _write(directory / ROOTS / f"{signed.version}.root.json", new_bytes, 0o644)
    _write(directory / "root.json", new_bytes, 0o644)
    return old, new


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
