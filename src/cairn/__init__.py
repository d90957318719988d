"""Cairn: a reproducible ROCm build and container release pipeline.

Data flows one way: manifest → plan (a DAG of content-addressed actions) → fetch → build → audit & gates →
sign → publish → matrix. Each stage lives in its own subpackage; pure data models stay apart from code that
touches the outside world.
"""

__version__ = "0.1.0"
