"""Suite-wide test tiers: what ``bash scripts/test.sh --fast`` leaves out is marked ``slow`` here or in place."""

from __future__ import annotations

from pathlib import Path

import pytest

# Every Event Hubs test talks to a real AMQP endpoint and Azurite with timeouts measured in seconds: the whole
# directory is the slow tier (test_eh_pure.py excepted: it is pure and stays in the inner loop).
_SLOW_DIRS = (Path(__file__).parent / "eventhubs",)
_FAST_FILES = {"test_eh_pure.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if any(path.is_relative_to(d) for d in _SLOW_DIRS) and path.name not in _FAST_FILES:
            item.add_marker(pytest.mark.slow)
