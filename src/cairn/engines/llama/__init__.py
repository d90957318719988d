"""The llama.cpp gate: a tiny model the build writes, a NumPy reference for it, and the comparison.

``model`` (build time, needs ``gguf``) writes a deterministic llama-architecture GGUF from a seed;
``reference`` (NumPy only) computes what that model must output; ``compare`` (NumPy only) judges
llama.cpp's logits against it; ``gate`` runs llama.cpp in the image and prints the verdict. No module here
imports the rest of Cairn, so the NumPy-only ones can be copied into an image as they are.
"""
