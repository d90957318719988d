"""Trust: keys, TUF metadata, DSSE provenance, cosign-format image signatures, and verification.

securesystemslib's signer package imports boto3 (and botocore) for its AWS KMS signer, which cairn never uses:
≈0.15 s of CPU in every command that signs or verifies. It is imported here, first, with boto3 marked
unavailable for the length of that one import (its KMS signer then reports itself unavailable); boto3 itself
is untouched and imports normally afterwards. Nothing is changed when boto3 was already imported.
"""

from __future__ import annotations

import sys

if "securesystemslib.signer" not in sys.modules and "boto3" not in sys.modules:
    sys.modules["boto3"] = None  # type: ignore[assignment]  # makes ``import boto3`` raise ImportError
    try:
        import securesystemslib.signer  # noqa: F401
    finally:
        if sys.modules.get("boto3", 0) is None:
            del sys.modules["boto3"]
