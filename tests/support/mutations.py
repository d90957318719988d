"""Random line edits of an input file, for the fuzz tests: insert or replace up to four lines with junk."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


def line_mutations(text: str, junk: Sequence[str]) -> st.SearchStrategy[str]:
    """``text`` with 1–4 of its lines replaced by, or preceded by, one of ``junk``."""
    lines = text.splitlines()
    pieces = st.sampled_from(list(junk))
    return st.lists(st.tuples(st.integers(0, len(lines)), pieces, st.booleans()), min_size=1, max_size=4).map(
        lambda edits: apply_edits(lines, edits))


def apply_edits(lines: list[str], edits: list[tuple[int, str, bool]]) -> str:
    out = list(lines)
    for index, text, replace in edits:
        index = min(index, len(out))
        if replace and index < len(out):
            out[index] = text
        else:
            out.insert(index, text)
    return "\n".join(out) + "\n"


# A valid manifest of two components (a deb and a cmake build from git): what the mutations start from.
VALID = '''\
[release]
name = "t"
version = "1.0.0"
channel = "dev"
source_date_epoch = 1700000000
base_os = "debian-12"
families = ["gfx90a"]

[core]
[[core.components]]
name = "runtime"
version = "1.0"
source.deb = { package = "libfoo1", version = "1.0-1", sha256 = "''' + "a" * 64 + '''" }
build = { kind = "deb-unpack" }

[[core.components]]
name = "tool"
version = "1.0"
source.git = { url = "https://example.invalid/tool.git", commit = "''' + "b" * 40 + '''" }
build = { kind = "cmake" }
depends = ["runtime"]
'''

