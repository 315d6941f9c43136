"""Fixtures for the ingest tests: one embedded ClickHouse per package, a fresh migrated database per test."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from collector.outbox import Outbox
from ingest.handler import Handler
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.records import encode
from sevents.retry import Backoff
from tests.chdb_fixtures import ch, ch_path, db


@pytest.fixture
def handler(ch: Any, db: str) -> Handler:
    """A handler storing into the test's database, with quick retries."""
    return Handler(Writer(ch, db), source="test", stop=threading.Event(), backoff=Backoff(initial=0.01, cap=0.05))


def deliveries(records: Sequence[dict[str, Any]], prefix: str = "test") -> list[Delivery]:
    """Wire records as deliveries with distinct positions."""
    return [Delivery(encode(r), f"{prefix}#{i}") for i, r in enumerate(records)]


def scalar(ch: Any, sql: str) -> Any:
    return ch.query(sql).result_rows[0][0]


@pytest.fixture
def make_outbox(tmp_path: Path) -> Iterator[Callable[..., Outbox]]:
    """Create collector outboxes under tmp_path/<name>/outbox.sqlite; closed after the test."""
    opened: list[Outbox] = []

    def make(name: str, records: Sequence[dict[str, Any]] = ()) -> Outbox:
        outbox = Outbox(tmp_path / name / "outbox.sqlite")
        opened.append(outbox)
        if records:
            outbox.commit(list(records), None)
        return outbox

    yield make
    for outbox in opened:
        outbox.close()
