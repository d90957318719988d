"""Debian version ordering (Debian Policy 5.6.12), pure, so planning can say which pin is newer.

>>> compare("7.2.4-1~exp1", "7.2.4-1") < 0
True
>>> compare("1:0.7.0", "7.2.4") > 0
True
>>> compare("7.2.4-1~exp1+b1", "7.2.4-1~exp1") > 0
True
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"^(\d*)(.*)$", re.S)


def _order(char: str) -> int:
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    while a or b:
        na = re.match(r"^([^\d]*)(.*)$", a, re.S)
        nb = re.match(r"^([^\d]*)(.*)$", b, re.S)
        assert na and nb
        sa, a = na[1], na[2]
        sb, b = nb[1], nb[2]
        for i in range(max(len(sa), len(sb))):
            ca = _order(sa[i]) if i < len(sa) else 0
            cb = _order(sb[i]) if i < len(sb) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        da, db = _DIGITS.match(a), _DIGITS.match(b)
        assert da and db
        ia, a = int(da[1] or 0), da[2]
        ib, b = int(db[1] or 0), db[2]
        if ia != ib:
            return -1 if ia < ib else 1
    return 0


def _split(version: str) -> tuple[int, str, str]:
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
    return int(epoch or 0), upstream, revision


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` sorts before, equal to or after ``b``."""
    ea, ua, ra = _split(a)
    eb, ub, rb = _split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)
