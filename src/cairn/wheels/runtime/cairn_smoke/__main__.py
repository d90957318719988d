"""``python -m cairn_smoke``: run the self-test (CPU references; GPU comparison when a device exists)."""

import cairn_smoke

raise SystemExit(cairn_smoke.selftest())
