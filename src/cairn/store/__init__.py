"""The content-addressed store: output trees by digest, and an action cache from key to output.

``Store`` is the small interface every stage uses; ``LocalStore`` keeps it in a directory (``.cairn/``
by default). A shared backend (an S3-backed action cache for CI shards) implements the same methods.
"""

from cairn.store.base import ActionRecord, Store, tree_digest
from cairn.store.local import LocalStore

__all__ = ["ActionRecord", "LocalStore", "Store", "tree_digest"]
