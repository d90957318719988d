"""Python sources shipped inside Cairn's wheels (``rocm_sdk``, ``cairn_smoke``), copied verbatim.

They run in the user's environment, not in Cairn: standard library only. Their sha256 is part of the
packaging action keys, so editing one rebuilds the wheels that carry it.
"""
