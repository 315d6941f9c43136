"""Fixtures of the collector edge tests: a scriptable loopback IMDS and settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.settings import CollectorSettings
from tests.collector_edges.fake_imds import FakeImds


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    server = FakeImds().start()
    yield server
    server.stop()


@pytest.fixture
def settings(imds: FakeImds, tmp_path: Path) -> CollectorSettings:
    """Fast settings: no request spacing, short retry deadline."""
    return CollectorSettings(
        imds_url=imds.base_url,
        state_dir=tmp_path / "state",
        min_request_interval=0.0,
        retry_deadline=5.0,
        poll_interval=0.05,
        heartbeat_interval=60.0,
    )
