"""The content-addressed store: output trees by digest, and an action cache from key to output.

``Store`` is the small interface every stage uses; ``LocalStore`` keeps it in a directory (``.cairn/``
by default). ``CachedStore`` (``cairn.store.shared``) puts a shared S3 action cache in front of a local
store with the same methods.
"""

from cairn.digest import tree_digest
from cairn.store.base import ActionRecord, Store
from cairn.store.local import LocalStore

__all__ = ["ActionRecord", "LocalStore", "Store", "tree_digest"]
