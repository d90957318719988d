"""The tokenizer the tiny model borrows: a vocab-only GGUF from the llama.cpp tree, taken from a pinned sdist.

No model can be downloaded, but llama.cpp ships vocab-only GGUFs (``models/ggml-vocab-*.gguf``) for its
tokenizer tests, and the llama-cpp-python sdist vendors that tree. The sdist is pinned by sha256 (read from
the index's JSON API), so the vocab, and with it every byte of the model, follows from the pin.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

from cairn.digest import file_sha256
from cairn.errors import CairnError, InputError
from cairn.io import atomic_write

SDIST = {
    "name": "llama-cpp-python",
    "version": "0.3.36",
    "filename": "llama_cpp_python-0.3.36.tar.gz",
    "sha256": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
}
DEFAULT_VOCAB = "llama-spm"  # SentencePiece, 32000 tokens, the smallest llama tokenizer file (0.7 MB)
_VOCAB_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*")


def extract_vocab(sdist: Path, name: str, dest_dir: Path) -> Path:
    """Copy ``vendor/llama.cpp/models/ggml-vocab-<name>.gguf`` out of the verified sdist into ``dest_dir``.

    The member is looked up by its exact path and its bytes are written under a name we build, so nothing in
    the archive chooses where a file lands."""
    if not _VOCAB_NAME.fullmatch(name):
        raise InputError(sdist, f"vocab name {name!r} is not a llama.cpp vocab name", "use e.g. 'llama-spm'")
    got = file_sha256(sdist)
    if got != SDIST["sha256"]:
        raise CairnError(f"{sdist}: sha256 {got} is not the pinned {SDIST['filename']} ({SDIST['sha256']})")
    stem = SDIST["filename"].removesuffix(".tar.gz")
    member = f"{stem}/vendor/llama.cpp/models/ggml-vocab-{name}.gguf"
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            info = archive.getmember(member)
            handle = archive.extractfile(info) if info.isfile() else None
            if handle is None:
                raise KeyError(member)
            data = handle.read()
    except KeyError:
        raise InputError(sdist, f"no {member} in the sdist", "pick a name from its vendor/llama.cpp/models/") from None
    except (OSError, tarfile.TarError) as exc:
        raise CairnError(f"{sdist}: cannot read the sdist: {exc}") from None
    out = dest_dir / f"ggml-vocab-{name}.gguf"
    atomic_write(out, data)
    return out
