"""Handler + writer on the embedded engine: poison isolated, replays deduplicated, SQL-looking text verbatim."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from demo import synthetic
from ingest.decode import Limits
from ingest.handler import Handler, prepare
from ingest.metrics import IngestMetrics
from ingest.migrate import Target, migrate
from ingest.rows import insert_token
from ingest.source import Delivery
from ingest.writer import Writer
from sevents import records
from sevents.records import encode
from sevents.retry import Backoff
from sevents.telemetry import make_meter_provider
from tests.helpers import metric_points

from .conftest import deliveries, scalar

NOW = datetime(2026, 11, 22, tzinfo=UTC)
EVIL = 'Robert\'); DROP TABLE transitions; -- "quoted" \\ back\\slash {placeholder:String} ${db}'


def test_poison_goes_to_dead_letters_and_good_records_around_it_are_stored(ch: Any, db: str, handler: Handler) -> None:
    """Bad JSON, a wrong schema version, a huge field and a wrong type land in dead_letters; neighbours load.

    The huge description is the one field that can be made safe: that record is stored truncated as well.
    """
    good = [*synthetic.lifecycle("E-1", 0), synthetic.heartbeat()]
    huge = {**synthetic.transition(event_id="E-2"), "description": "x" * 50_000}
    poison = [
        b'{"schema_version": 1, "record_type": "transition", ',
        encode({**synthetic.transition(event_id="E-3"), "schema_version": 99}),
        encode(huge),
        encode({**synthetic.transition(event_id="E-4"), "incarnation": "seven"}),
        b"\xff\x00 not even text",
    ]
    batch = [Delivery(encode(good[0]), "p#0"), *(Delivery(p, f"bad#{i}") for i, p in enumerate(poison))]
    batch += [Delivery(encode(r), f"p#{i + 1}") for i, r in enumerate(good[1:])]
    handler(batch)
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 4  # the huge one stored, made safe
    assert scalar(ch, f"SELECT count() FROM {db}.heartbeats FINAL") == 1
    rows = ch.query(
        f"SELECT position, error, payload, payload_size FROM {db}.dead_letters FINAL ORDER BY position",
        query_formats={"String": "bytes"},
    ).result_rows
    assert [r[0] for r in rows] == [b"bad#0", b"bad#1", b"bad#2", b"bad#3", b"bad#4"]
    assert [r[1].split(b":")[0] for r in rows] == [
        b"bad_json",
        b"schema_version",
        b"made_safe",
        b"wrong_type",
        b"bad_json",
    ]
    assert [r[2] for r in rows] == poison  # verbatim, binary included
    assert [r[3] for r in rows] == [len(p) for p in poison]


def test_the_same_batch_three_times_stores_each_row_once(ch: Any, db: str, handler: Handler) -> None:
    """Redelivered batches are dropped by the insert token; counts equal a single load, even without FINAL."""
    batch = deliveries([*synthetic.lifecycle("E-1", 0), *synthetic.lifecycle("E-1", 1), synthetic.heartbeat()])
    batch.append(Delivery(b"nope", "bad#1"))
    for _ in range(3):
        handler(batch)
    for table, expected in (("transitions", 6), ("heartbeats", 1), ("dead_letters", 1)):
        assert scalar(ch, f"SELECT count() FROM {db}.{table}") == expected
        assert scalar(ch, f"SELECT count() FROM {db}.{table} FINAL") == expected


def test_overlapping_batches_are_deduplicated_by_the_transition_key(ch: Any, db: str, handler: Handler) -> None:
    """A record redelivered in a differently cut batch is one row after dedup (ReplacingMergeTree key)."""
    recs = synthetic.lifecycle("E-1", 0) + synthetic.lifecycle("E-2", 0)
    handler(deliveries(recs[:4]))
    handler(deliveries(recs[2:]))
    handler(deliveries(recs))
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 6
    assert scalar(ch, f"SELECT count() FROM {db}.events") == 2


def test_description_full_of_quotes_and_sql_is_stored_verbatim(ch: Any, db: str, handler: Handler) -> None:
    """Text that looks like SQL or placeholders is data: stored and read back unchanged."""
    evil_id = "E'; DROP DATABASE x; --"
    handler(deliveries([synthetic.transition(event_id=evil_id, description=EVIL, resources=[EVIL, "vm-000"])]))
    row = ch.query(
        f"SELECT event_id, description, resources FROM {db}.transitions WHERE event_id = {{e:String}}",
        parameters={"e": evil_id},
    ).result_rows
    assert row == [(evil_id, EVIL, [EVIL, "vm-000"])]


def test_metrics_count_records_batches_lag_and_dead_letters(ch: Any, db: str) -> None:
    """The OpenTelemetry instruments report what the handler did."""
    reader = InMemoryMetricReader()
    provider = make_meter_provider("test", readers=[reader], env={})
    handler = Handler(Writer(ch, db), source="test", stop=threading.Event(), metrics=IngestMetrics.create(provider))
    handler([*deliveries(synthetic.lifecycle("E-1", 0)), Delivery(b"{", "bad")])
    got = metric_points(reader)
    stored = {p.attributes["outcome"]: p.value for p in got["sevents.ingest.records"]}
    assert stored == {"stored": 3, "dead_letter": 1}
    assert got["sevents.ingest.batches"][0].value == 1
    assert got["sevents.ingest.dead_letters"][0].attributes == {"reason": "bad_json"}
    assert got["sevents.ingest.lag"][0].count == 1
    assert got["sevents.ingest.insert.duration"][0].count == 1


def test_a_dropped_database_is_retried_and_stored_after_recovery(ch: Any, db: str) -> None:
    """While the target database is gone every insert fails and is retried; once it is back the rows land."""
    reader = InMemoryMetricReader()
    metrics = IngestMetrics.create(make_meter_provider("test", readers=[reader], env={}))
    stop = threading.Event()
    handler = Handler(
        Writer(ch, db), source="test", stop=stop, backoff=Backoff(initial=0.01, cap=0.05), metrics=metrics
    )
    ch.command(f"DROP DATABASE {db}")
    done = threading.Event()
    worker = threading.Thread(target=lambda: (handler(deliveries(synthetic.lifecycle("E-1", 0))), done.set()))
    worker.start()
    while sum(p.value for p in metric_points(reader).get("sevents.ingest.insert.failures", [])) < 3:
        assert worker.is_alive()
        done.wait(0.02)
    assert not done.is_set()
    migrate(ch, Target(database=db))
    worker.join(10)
    assert done.is_set()
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 3


def test_event_view_definitions_approved_cancelled_active(ch: Any, db: str, handler: Handler) -> None:
    """approved_at exists only when an event started before NotBefore; outcomes follow the last transition."""
    base = synthetic.BASE_TIME
    late_start = synthetic.lifecycle("E-late", 1)
    late_start[0]["not_before"] = records.format_time(base + timedelta(minutes=4))  # started after NotBefore
    cancelled = [
        synthetic.transition(vm_index=2, event_id="E-cxl"),
        synthetic.transition(
            vm_index=2,
            event_id="E-cxl",
            incarnation=2,
            kind="disappeared",
            status="",
            prev_status="Scheduled",
            observed_at=base + timedelta(minutes=1),
        ),
    ]
    active = [synthetic.transition(vm_index=0, event_id="E-live", incarnation=9)]
    handler(deliveries(synthetic.lifecycle("E-ok", 0) + late_start + cancelled + active))
    got = {
        r[0]: r[1:]
        for r in ch.query(
            f"SELECT event_id, outcome, approved_at IS NOT NULL, notice_s, approval_latency_s, started_to_gone_s "
            f"FROM {db}.events"
        ).result_rows
    }
    assert got["E-ok"] == ("completed", True, 300.0, 300.0, 30.0)
    assert got["E-late"] == ("completed", False, 300.0, None, 30.0)
    assert got["E-cxl"] == ("cancelled", False, None, None, None)
    assert got["E-live"] == ("active", False, None, None, None)


def test_a_row_clickhouse_refuses_is_cornered_and_dead_lettered(ch: Any, db: str, handler: Handler) -> None:
    """A valid record the table refuses (a CHECK constraint) ends in dead_letters; the rest of the batch loads."""
    ch.command(f"ALTER TABLE {db}.transitions ADD CONSTRAINT no_forbidden CHECK event_id != 'E-forbidden'")
    recs = [synthetic.transition(vm_index=i, event_id="E-ok") for i in range(7)]
    recs.insert(5, synthetic.transition(vm_index=9, event_id="E-forbidden"))
    batch = deliveries([*recs, synthetic.heartbeat()])
    batch.append(Delivery(b"{", "bad#1"))
    handler(batch)
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 7
    assert scalar(ch, f"SELECT count() FROM {db}.heartbeats FINAL") == 1
    letters = ch.query(f"SELECT position, error FROM {db}.dead_letters FINAL ORDER BY position").result_rows
    assert [p for p, _ in letters] == ["bad#1", "test#5"]
    assert letters[1][1].startswith("refused_by_clickhouse") and "VIOLATED_CONSTRAINT" in letters[1][1]


def test_a_deduplicated_insert_whose_rows_are_gone_is_inserted_again(ch: Any, db: str) -> None:
    """Issue 17.6: a deduplication entry without its rows (a part lost in a crash) must not swallow the retry.

    The rows of a tokened insert are deleted, leaving the token's entry behind, as a kill between the entry and
    the part reaching disk does; storing the same batch again must put the rows back, not skip them.
    """
    writer = Writer(ch, db)
    batch, _ = prepare(deliveries(synthetic.lifecycle("E-1", 0)), source="t", limits=Limits(), received_at=NOW)
    writer.store(batch)
    ch.command(f"ALTER TABLE {db}.transitions DELETE WHERE 1 SETTINGS mutations_sync = 2")
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 0
    token = insert_token("transitions", batch.values("transitions", "transition_id"))
    ch.insert_arrow(  # the token alone: ClickHouse still drops this insert as a duplicate
        f"{db}.transitions",
        batch.columns["transitions"],
        settings={"insert_deduplicate": 1, "insert_deduplication_token": token},
    )
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 0
    writer.store(batch)
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 3
    writer.store(batch)  # a verified hit is skipped: still one row per transition
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 3
