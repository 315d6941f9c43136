"""Fixtures for the ingest tests: one embedded ClickHouse per package, a fresh migrated database per test."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from collector.outbox import Outbox
from ingest.clickhouse import connect
from ingest.handler import Handler
from ingest.migrate import Target, migrate
from ingest.source import Delivery
from ingest.writer import Writer
from sevents.records import encode
from sevents.retry import Backoff


@pytest.fixture(scope="package")
def ch_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one chdb directory this process uses (chdb allows one path per process at a time)."""
    return tmp_path_factory.mktemp("ingest-ch")


@pytest.fixture(scope="package")
def ch(ch_path: Path) -> Iterator[Any]:
    """A client on the embedded engine, closed when the package is done so other packages can open theirs."""
    client = connect(f"chdb://{ch_path}")
    yield client
    client.close()


@pytest.fixture
def db(ch: Any) -> str:
    """A fresh database with the schema applied; its name."""
    name = "t_" + uuid.uuid4().hex[:12]
    migrate(ch, Target(database=name))
    return name


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
