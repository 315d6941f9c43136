"""Retention as configuration (issue 30): each table's TTL follows the settings, applied at migrate time, changed
only where it differs, and never by rewriting the history at once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from demo import synthetic
from ingest import retention
from ingest.decode import Limits
from ingest.handler import prepare
from ingest.migrate import Target, migrate
from ingest.retention import TABLES, Retention
from ingest.writer import Writer

from .conftest import deliveries


def ttls(ch: Any, database: str) -> dict[str, str]:
    rows = ch.query(
        "SELECT name, engine_full FROM system.tables WHERE database = {db:String}", parameters={"db": database}
    ).result_rows
    return {str(name): retention.current(str(engine)) for name, engine in rows if str(name) in TABLES}


@pytest.fixture
def fresh(ch: Any) -> str:
    name = "t_" + uuid.uuid4().hex[:12]
    migrate(ch, Target(database=name))
    return name


def test_the_defaults_keep_a_year_of_history_a_week_of_raw_heartbeats_and_a_quarter_of_dead_letters(
    ch: Any, fresh: str
) -> None:
    retention.apply(ch, Target(database=fresh), Retention())
    found = ttls(ch, fresh)
    assert set(found) == set(TABLES), "every table the settings name exists and has a TTL"
    for table, (moment, kind) in TABLES.items():
        days = {"history": 400, "heartbeats": 7, "dead_letters": 90}[kind]
        assert found[table] == f"{moment} + toIntervalDay({days})", table


def test_applying_twice_changes_nothing_and_zero_keeps_for_ever(ch: Any, fresh: str) -> None:
    target = Target(database=fresh)
    assert retention.apply(ch, target, Retention())
    assert retention.apply(ch, target, Retention()) == []
    changed = retention.apply(ch, target, Retention(history_days=0, dead_letter_days=30))
    assert set(changed) == {t for t, (_, kind) in TABLES.items() if kind != "heartbeats"}
    found = ttls(ch, fresh)
    assert all(found[t] == "" for t, (_, kind) in TABLES.items() if kind == "history")
    assert found["dead_letters"] == "toDateTime(received_at) + toIntervalDay(30)"
    assert found["heartbeats"] == "toDateTime(observed_at) + toIntervalDay(7)"


def test_rows_past_their_time_go_at_the_next_merge_and_the_rest_stay(ch: Any, fresh: str) -> None:
    retention.apply(ch, Target(database=fresh), Retention(dead_letter_days=30))
    insert = (
        f"INSERT INTO {fresh}.dead_letters (dead_letter_id, received_at, source, position, error, payload, "
        "payload_size, properties) VALUES ({id:String}, now64(3) - toIntervalDay({age:UInt32}), 'test', '', "
        "'bad', '{{}}', 2, map())"
    )
    for key, age in (("old", 45), ("new", 3)):
        ch.command(insert, parameters={"id": key, "age": age})
    ch.command(f"OPTIMIZE TABLE {fresh}.dead_letters FINAL")
    kept = ch.query(f"SELECT dead_letter_id FROM {fresh}.dead_letters ORDER BY 1").result_rows
    assert kept == [("new",)]


@given(st.integers(-10, 40_000), st.integers(-10, 40_000), st.integers(-10, 40_000))
def test_only_zero_or_a_sane_number_of_days_is_accepted(history: int, heartbeats: int, dead: int) -> None:
    problems = Retention(history, heartbeats, dead).problems()
    bad = [d for d in (history, heartbeats, dead) if not 0 <= d <= 36_500]
    assert len(problems) == len(bad)


def test_a_record_older_than_its_tables_retention_is_counted_dropped_not_retried(ch: Any, fresh: str) -> None:
    """With a 30-day history, a transition from 40 days ago is dropped for retention (never inserted, so never
    verified missing for ever), the recent one of the same batch stored."""
    retention.apply(ch, Target(database=fresh), Retention(history_days=30))
    now = datetime.now(UTC)
    old = synthetic.transition(event_id="E-old", observed_at=now - timedelta(days=40))
    new = synthetic.transition(event_id="E-new", observed_at=now - timedelta(days=1))
    batch, _ = prepare(deliveries([old, new]), source="t", limits=Limits(), received_at=now)
    assert Writer(ch, fresh).store(batch) == {"transitions": 1}
    stored = ch.query(f"SELECT event_id FROM {fresh}.transitions").result_rows
    assert stored == [("E-new",)]
