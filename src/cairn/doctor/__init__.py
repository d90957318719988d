"""``cairn doctor``: what is wrong with a ROCm host, and which validated artifact to use instead.

Layers, each testable alone: ``snapshot`` is the frozen ``HostSnapshot`` data model; ``read`` (a package,
one module per kind of host data) fills it from a root directory (``/`` or a captured tree); ``tools``
parses rocminfo / amd-smi / rocm-smi output; ``host`` interprets facts through the target registry;
``checks`` are pure functions snapshot → Check; ``advice`` picks a matrix cell; ``command`` prints.
``diagnose(root, matrices)`` returns the documented JSON document.
"""

from cairn.doctor.command import diagnose

__all__ = ["diagnose"]
