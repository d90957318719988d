"""Trust: keys, TUF metadata, DSSE provenance, cosign-format image signatures, and verification.

securesystemslib's signer package imports boto3 (and botocore) for its AWS KMS signer, which cairn never uses,
and that import is CPU paid by every command that signs or verifies. It is imported here, first (``cairn.dsse.import_signer``), with boto3 marked
unavailable for the length of that one import (its KMS signer then reports itself unavailable); boto3 itself
is untouched and imports normally afterwards. Nothing is changed when boto3 was already imported.
"""

from __future__ import annotations

from cairn.dsse import import_signer

import_signer()
