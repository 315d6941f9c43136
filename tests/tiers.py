"""How hard the property tests search: fully in the full suite, a tenth as hard in ``scripts/test.sh --fast``."""

from __future__ import annotations

import os

FAST = os.environ.get("SEVENTS_TEST_TIER") == "fast"


def examples(full: int) -> int:
    """Hypothesis max_examples for a property test whose full-suite budget is ``full``."""
    return max(10, full // 10) if FAST else full
