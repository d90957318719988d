"""Inference engines shipped in Cairn's images, and the checks that prove each one computes the right thing.

Kept free of imports: ``cairn.engines.llama.gate`` is copied into images that have only NumPy and the
engine installed, and ``python -m`` imports every parent package on the way in.
"""
