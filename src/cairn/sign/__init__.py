"""Trust: keys, TUF metadata, DSSE provenance, cosign-format image signatures, and verification."""
