"""Wheels and indexes: reproducible per-family SDK wheels, framework wheels and PEP 503/691 indexes.

- ``cairn.wheels.wheelfile``: the one deterministic wheel writer (``write_wheel``, ``repack``);
- ``cairn.model.wheel_versions``: SDK versions per channel and framework local labels that sort;
- ``cairn.formats.elf``: honest platform tags and ``$ORIGIN`` RPATHs;
- ``cairn.wheels.sdk`` / ``frameworks``: what each package action writes;
- ``cairn.wheels.index``: per-family simple indexes;
- ``cairn.wheels.plan``: the stage planner (``extend_plan``);
- ``cairn.wheels.run``: the stage's runners (``RUNNERS``, declared in ``cairn.stages``).
"""
