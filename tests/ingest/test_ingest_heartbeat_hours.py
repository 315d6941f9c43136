"""The hourly heartbeat rollup counts a VM-hour's heartbeats as the minutes of the hour that had one (migration
0020): the same count as the set of heartbeat ids it kept before at one a minute, unchanged by a repeated row, and
an hour that began before the migration still counts whole. The hours kept only as ids count through the number
migration 0026 wrote for them, so no reader merges sets of ids."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from dashboards.pipeline import HEARTBEATS_RECEIVED
from demo import synthetic
from ingest.handler import Handler
from ingest.migrate import Target, load_migrations, migrate, render
from ingest.writer import Writer

from .conftest import deliveries, scalar

HOUR = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)


def beats(minutes: range) -> list[dict[str, Any]]:
    """One heartbeat of VM 0 at each of ``minutes`` of HOUR, at a second a real collector could send it."""
    return [synthetic.heartbeat(observed_at=HOUR + timedelta(minutes=m, seconds=7, milliseconds=m)) for m in minutes]


def counted(ch: Any, db: str) -> dict[datetime, int]:
    rows = ch.query(f"SELECT hour, {HEARTBEATS_RECEIVED} FROM {db}.heartbeat_hours GROUP BY hour").result_rows
    return {hour.replace(tzinfo=UTC): int(count) for hour, count in rows}


def test_an_hour_across_the_migration_counts_each_heartbeat_once_however_often_stored(ch: Any) -> None:
    """Half an hour's heartbeats stored before migration 0020 (as ids; the migration adds their minutes from the raw
    heartbeats), the other half after it (as minutes), then every row inserted into heartbeats again (a replay,
    through the new view): the hour counts 60 each time."""
    target = Target(database="hb_" + uuid.uuid4().hex[:10])
    migrations = load_migrations()
    migrate(ch, target, [m for m in migrations if m.version < 20])
    handler = Handler(Writer(ch, target.database), source="test", stop=threading.Event())
    handler(deliveries(beats(range(30)), "before"))
    assert migrate(ch, target, [m for m in migrations if m.version <= 20]) == [20]
    handler(deliveries(beats(range(30, 60)), "after"))
    assert migrate(ch, target)[0] == 21
    db = target.database
    assert counted(ch, db) == {HOUR: 60}
    # a repeated row (a replayed backfill, a retried block): the rollup's states are unchanged by it
    ch.command(f"INSERT INTO {db}.heartbeats SELECT * FROM {db}.heartbeats")
    assert scalar(ch, f"SELECT count() FROM {db}.heartbeats") == 120
    assert counted(ch, db) == {HOUR: 60}


def test_hours_kept_only_as_ids_count_through_the_number_0026_wrote_however_often_it_runs(ch: Any) -> None:
    """VM-hours stored before migration 0020 whose raw heartbeats were gone by then (retention) have only their
    ids: 0026 writes their count, readers take it without merging the ids, and running its copy again changes
    nothing. An hour stored after 0020 is not copied (its ids are empty)."""
    target = Target(database="hb_" + uuid.uuid4().hex[:10])
    migrations = load_migrations()
    migrate(ch, target, [m for m in migrations if m.version < 20])
    handler = Handler(Writer(ch, target.database), source="test", stop=threading.Event())
    handler(deliveries(beats(range(0, 60, 2)), "before"))  # 30 heartbeats, one every other minute
    db = target.database
    ch.command(f"ALTER TABLE {db}.heartbeats DELETE WHERE 1 SETTINGS mutations_sync = 2")  # past raw retention
    migrate(ch, target, [m for m in migrations if m.version < 26])
    later = HOUR + timedelta(hours=1)
    handler(deliveries([synthetic.heartbeat(observed_at=later + timedelta(minutes=m, seconds=3)) for m in range(9)]))
    assert migrate(ch, target)[0] == 26
    assert counted(ch, db) == {HOUR: 30, later: 9}
    copy = next(m for m in load_migrations() if m.version == 26)
    for statement in render(copy, target):
        ch.command(statement)
    assert counted(ch, db) == {HOUR: 30, later: 9}
    copied = ch.query(f"SELECT DISTINCT hour FROM {db}.heartbeat_hours WHERE ids_counted > 0").result_rows
    assert [hour.replace(tzinfo=UTC) for (hour,) in copied] == [HOUR]


def test_a_vm_hour_keeps_eight_bytes_for_its_heartbeats_and_no_ids(ch: Any, db: str) -> None:
    """A VM-hour keeps one UInt64 for its sixty heartbeats, where the set of ids it replaces held a 16-byte hash
    per heartbeat (about 960 bytes, incompressible: docs/scale.md), and no ids."""
    handler = Handler(Writer(ch, db), source="test", stop=threading.Event())
    handler(deliveries(beats(range(60))))
    assert counted(ch, db) == {HOUR: 60}
    minutes, ids = ch.query(
        f"SELECT groupBitOr(heartbeat_minutes), uniqExactMerge(heartbeats) FROM {db}.heartbeat_hours"
    ).result_rows[0]
    assert (minutes, ids) == (2**60 - 1, 0)
    assert "UInt64" in scalar(
        ch, f"SELECT type FROM system.columns WHERE database = '{db}' AND name = 'heartbeat_minutes'"
    )


def test_a_faster_collector_reads_as_full_coverage_not_more(ch: Any, db: str) -> None:
    """Two heartbeats a minute for an hour (a collector configured faster) count 60: coverage is the hour's minutes
    that had one, so it never reads above 100% as the count of heartbeats did."""
    handler = Handler(Writer(ch, db), source="test", stop=threading.Event())
    twice = [synthetic.heartbeat(observed_at=HOUR + timedelta(seconds=30 * n + 1)) for n in range(120)]
    handler(deliveries(twice))
    assert scalar(ch, f"SELECT count() FROM {db}.heartbeats") == 120
    assert counted(ch, db) == {HOUR: 60}
