#!/usr/bin/env python3
"""Count the skipped tests in a pytest JUnit XML report; exit 1 unless there are none.

``.ci/run`` calls this after the suite: under CI every requirement is provided, so a skip means a test that
did not run, and a run that did not run its tests must not pass. Prints ``skipped: N`` and, for each skip,
the test and its reason. A missing or unreadable report is a failure too.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def skipped_tests(report: str) -> list[str]:
    root = ET.parse(report).getroot()
    found = []
    for case in root.iter("testcase"):
        for skip in case.findall("skipped"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            found.append(f"{name}: {skip.get('message', '').strip()}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: skips.py JUNIT.xml", file=sys.stderr)
        return 2
    try:
        skipped = skipped_tests(argv[0])
    except (OSError, ET.ParseError) as exc:
        print(f"skipped: unknown — cannot read the test report {argv[0]}: {exc}")
        return 1
    print(f"skipped: {len(skipped)}")
    for line in skipped:
        print(f"  {line}")
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
