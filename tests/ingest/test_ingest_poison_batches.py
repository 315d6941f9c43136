"""Issue 29.2: no batch can stall a partition (real embedded ClickHouse).

A collector's months-old backlog spans more partitions than ClickHouse takes in one insert block (error 252),
and its heartbeats are older than the ``heartbeats`` table's TTL; both used to be retried for ever. A row
ClickHouse refuses for its value is halved out of its batch and dead-lettered; the rest is stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from collector.outbox import Outbox
from demo import synthetic
from ingest.batching import BatchPolicy
from ingest.clickhouse import about_the_data
from ingest.decode import Limits
from ingest.errors import Interrupted, RejectedRows, StoreError
from ingest.handler import Handler, prepare
from ingest.metrics import IngestMetrics
from ingest.rows import Batch
from ingest.source import Delivery
from ingest.source_outbox import OutboxSource
from ingest.writer import Writer, partition_chunks, ttl_of
from sevents.retry import Backoff
from sevents.telemetry import make_meter_provider
from tests.helpers import metric_points

from .conftest import deliveries, scalar

VM = synthetic.vm(0)["vm_id"]


class FailFast(Writer):
    """A writer that stops the run at its first failed insert: a retry loop fails the test instead of hanging it."""

    def __init__(self, client: Any, database: str, stop: threading.Event, **options: Any) -> None:
        super().__init__(client, database, **options)
        self.stop = stop
        self.failures: list[str] = []
        self.stores = 0

    def store(self, batch: Batch, *, retry: bool = False) -> dict[str, int]:
        self.stores += 1
        try:
            return super().store(batch, retry=retry)
        except RejectedRows:
            raise
        except StoreError as error:
            self.failures.append(str(error))
            self.stop.set()
            raise


def fail_fast(ch: Any, db: str, **options: Any) -> tuple[Handler, FailFast, InMemoryMetricReader]:
    """A handler on a FailFast writer (verifying every insert, as a restarted ingest does), with metrics."""
    stop = threading.Event()
    writer = FailFast(ch, db, stop, **options)
    reader = InMemoryMetricReader()
    metrics = IngestMetrics.create(make_meter_provider("test", readers=[reader], env={}))
    handler = Handler(writer, source="test", stop=stop, backoff=Backoff(initial=0.01, cap=0.05), metrics=metrics)
    return handler, writer, reader


def deliver(handler: Handler, writer: FailFast, batch: Sequence[Delivery]) -> None:
    try:
        handler(batch)
    except Interrupted:
        pytest.fail(f"the batch was retried: {writer.failures}")
    assert writer.failures == []


def sums(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], int]:
    """A counter's totals by attributes."""
    out: dict[tuple[tuple[str, Any], ...], int] = {}
    for point in metric_points(reader).get(name, []):
        key = tuple(sorted(point.attributes.items()))
        out[key] = out.get(key, 0) + int(point.value)
    return out


def month_start(now: datetime, back: int) -> datetime:
    """One hour into the first day of the month ``back`` months before ``now``'s."""
    index = now.year * 12 + now.month - 1 - back
    return datetime(index // 12, index % 12 + 1, 1, 1, tzinfo=UTC)


def monthly_lifecycles(now: datetime, months: int) -> list[dict[str, Any]]:
    """One Reboot (appeared, started, gone) per month, in each of the ``months`` months before ``now``'s."""
    found: list[dict[str, Any]] = []
    for back in range(1, months + 1):
        found += synthetic.lifecycle(f"E-m{back}", 0, start=month_start(now, back))
    return found


def rollup_hours(ch: Any, db: str) -> dict[datetime, int]:
    """The hourly rollup of the VM: hour -> heartbeats counted in it."""
    rows = ch.query(
        f"SELECT toUnixTimestamp(hour), bitCount(groupBitOr(heartbeat_minutes)) FROM {db}.heartbeat_hours "
        "WHERE vm_id = {vm:String} GROUP BY hour",
        parameters={"vm": VM},
    ).result_rows
    return {datetime.fromtimestamp(hour, UTC): int(count) for hour, count in rows}


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def test_a_year_of_backlog_from_one_vm_goes_through_in_one_run_with_no_retry(
    ch: Any, db: str, tmp_path: Path, make_outbox: Callable[..., Outbox]
) -> None:
    """An outbox holding a year of one VM's heartbeats (every day) and transitions (every month), shipped after an
    outage, is drained in one batch without a failed insert: every transition stored; every heartbeat in the
    hourly rollup, the last week's in ``heartbeats`` too, and those older than the rollup's TTL counted as
    dropped for retention. (It used to be error 252 retried for ever, then "rows of heartbeats not found".)"""
    now = datetime.now(UTC)
    year = [now - timedelta(days=day, hours=1) for day in range(365)]
    ancient = [now - timedelta(days=day) for day in range(410, 415)]  # older than heartbeat_hours' 400 days
    transitions = monthly_lifecycles(now, 12)
    heartbeats = [synthetic.heartbeat(observed_at=t, seq=i) for i, t in enumerate(year + ancient)]
    box = make_outbox("vm-0", transitions + heartbeats)
    handler, writer, reader = fail_fast(ch, db)
    source = OutboxSource([str(tmp_path / "*")], policy=BatchPolicy(max_records=10_000), until_idle=True)
    source.run(handler, writer.stop)

    assert writer.failures == []
    assert box.depth() == 0
    assert writer.stores == 1  # one batch: no retry, no halving
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == len(transitions) == 36
    assert scalar(ch, f"SELECT count() FROM {db}.dead_letters") == 0
    assert rollup_hours(ch, db) == {hour_of(t): 1 for t in year}
    recent = ch.query(
        f"SELECT observed_at FROM {db}.heartbeats FINAL WHERE observed_at > {{since:DateTime64(3, 'UTC')}}",
        parameters={"since": now - timedelta(days=6, hours=12)},
    ).result_rows
    assert len(recent) == 7
    latest = scalar(ch, f"SELECT toUnixTimestamp64Milli(observed_at) FROM {db}.heartbeats_latest FINAL")
    assert latest == int(year[0].timestamp() * 1000)
    assert handler.dropped == len(ancient)
    assert sums(reader, "sevents.ingest.dropped") == {(("reason", "retention"), ("record_type", "heartbeat")): 5}
    records = sums(reader, "sevents.ingest.records")
    assert records[(("outcome", "stored"), ("record_type", "heartbeat"))] == len(year)
    assert records[(("outcome", "dropped"), ("record_type", "heartbeat"))] == len(ancient)
    assert sums(reader, "sevents.ingest.insert.failures") == {}


def test_five_heartbeats_from_months_back_are_kept_in_the_rollup_and_a_lost_rollup_insert_is_redone(
    ch: Any, db: str
) -> None:
    """The issue's case: heartbeats older than ``heartbeats``' TTL vanish from it at once; they are verified in
    the hourly rollup instead, and a rollup insert lost with its token taken (a crash) is inserted again."""
    now = datetime.now(UTC)
    times = [now - timedelta(days=100 + 3 * i) for i in range(5)]
    batch, _ = prepare(
        deliveries([synthetic.heartbeat(observed_at=t) for t in times]), source="t", limits=Limits(), received_at=now
    )
    writer = Writer(ch, db)
    assert writer.store(batch) == {}
    assert rollup_hours(ch, db) == {hour_of(t): 1 for t in times}
    ch.command(f"ALTER TABLE {db}.heartbeat_hours DELETE WHERE 1 SETTINGS mutations_sync = 2")
    assert writer.store(batch, retry=True) == {}  # the token drops the insert; the look-up finds the hours gone
    assert rollup_hours(ch, db) == {hour_of(t): 1 for t in times}


def test_a_decade_of_monthly_transitions_is_stored_once_however_often_it_is_delivered(ch: Any, db: str) -> None:
    """130 months in one batch (ClickHouse takes 100 partitions per insert) go in as inserts of whole months,
    each with a token derived from its rows: redelivering the batch stores nothing twice, even without FINAL."""
    now = datetime.now(UTC)
    batch = deliveries(monthly_lifecycles(now, 130))
    handler, writer, _ = fail_fast(ch, db)
    for _ in range(3):
        deliver(handler, writer, batch)
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 390
    assert scalar(ch, f"SELECT uniqExact(toYYYYMM(observed_at)) FROM {db}.transitions") == 130
    assert scalar(ch, f"SELECT count() FROM {db}.transitions_by_time FINAL") == 390  # views absorb repeats
    assert scalar(ch, f"SELECT count() FROM {db}.events") == 130


def test_one_poison_row_in_a_backlog_is_dead_lettered_and_the_rest_stored(ch: Any, db: str) -> None:
    """A row ClickHouse refuses for its value (here a throwIf constraint, error 395, which used to be retried as a
    server fault) is halved out of a many-partition batch and dead-lettered; every other record is stored."""
    ch.command(
        f"ALTER TABLE {db}.transitions ADD CONSTRAINT no_poison CHECK throwIf(event_id = 'E-poison', 'poison') = 0"
    )
    now = datetime.now(UTC)
    good = monthly_lifecycles(now, 120)
    heartbeats = [synthetic.heartbeat(observed_at=now - timedelta(days=d, hours=1)) for d in range(150)]
    poison = synthetic.transition(event_id="E-poison", observed_at=month_start(now, 40))
    records = [*good[:200], poison, *good[200:], *heartbeats]
    handler, writer, reader = fail_fast(ch, db)
    deliver(handler, writer, deliveries(records))
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == len(good)
    assert rollup_hours(ch, db) == {hour_of(now - timedelta(days=d, hours=1)): 1 for d in range(150)}
    letters = ch.query(f"SELECT position, error FROM {db}.dead_letters FINAL").result_rows
    assert [p for p, _ in letters] == ["test#200"]
    assert letters[0][1].startswith("refused_by_clickhouse") and "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO" in letters[0][1]
    records_by = sums(reader, "sevents.ingest.records")
    assert records_by[(("outcome", "stored"), ("record_type", "transition"))] == len(good)
    assert records_by[(("outcome", "dead_letter"),)] == 1
    assert handler.dead_letters == 1 and handler.stored == len(records)


def test_a_server_taking_fewer_partitions_than_the_writer_assumes_gets_halved_blocks_and_loses_nothing(
    ch: Any, db: str
) -> None:
    """Error 252 for partitions is about the block, not the server: it is halved until it fits, and since every
    single record fits, nothing is dead-lettered."""
    now = datetime.now(UTC)
    records = monthly_lifecycles(now, 130)
    handler, writer, _ = fail_fast(ch, db, partitions_per_insert=1_000)  # the server's 100 is met only by halving
    deliver(handler, writer, deliveries(records))
    assert writer.stores > 1
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == len(records)
    assert scalar(ch, f"SELECT count() FROM {db}.dead_letters") == 0


@pytest.mark.parametrize(
    ("text", "data"),
    [
        (
            "Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100). (TOO_MANY_PARTS)",
            True,
        ),
        (
            "Code: 252. DB::Exception: Too many parts (3001 with average size of 1 KiB) in table. (TOO_MANY_PARTS)",
            False,
        ),
        (
            "Code: 395. DB::Exception: poison: while executing 'throwIf'. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)",
            True,
        ),
        ("Code: 469. DB::Exception: Constraint `c` for table t is violated. (VIOLATED_CONSTRAINT)", True),
        ("Code: 27. DB::Exception: Cannot parse input. (CANNOT_PARSE_INPUT_ASSERTION_FAILED)", True),
        ("Code: 241. DB::Exception: Memory limit (total) exceeded. (MEMORY_LIMIT_EXCEEDED)", False),
        ("Code: 159. DB::Exception: Timeout exceeded. (TIMEOUT_EXCEEDED)", False),
        ("Code: 81. DB::Exception: Database t does not exist. (UNKNOWN_DATABASE)", False),
        ("HTTPConnectionPool(host='ch', port=8123): Max retries exceeded (Connection refused)", False),
    ],
)
def test_only_errors_about_the_rows_are_taken_for_poison(text: str, data: bool) -> None:
    """The same rows fail the same way for a refused value or too many partitions in a block; a busy, short or
    unreachable server, or one with a part backlog (252 "Too many parts"), is retried."""
    assert about_the_data(Exception(text)) is data


def test_partition_chunks_are_whole_partitions_in_order_and_the_same_every_time() -> None:
    """Rows within the limit are one block, untouched; otherwise blocks of whole partitions, at most ``limit``
    each, in partition order, rows in their order within a partition."""
    days = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=d % 7, hours=d) for d in range(40)]
    rows = pa.table(
        {
            "observed_at": pa.array(days, pa.timestamp("ms", tz="UTC")),
            "heartbeat_id": [f"h{i}" for i in range(len(days))],
        }
    )
    assert list(partition_chunks(rows, "heartbeats", 100)) == [rows]
    blocks = list(partition_chunks(rows, "heartbeats", 3))
    assert blocks == list(partition_chunks(rows, "heartbeats", 3))
    seen: list[tuple[int, int, int]] = []
    for block in blocks:
        partitions = {(t.year, t.month, t.day) for t in block.column("observed_at").to_pylist()}
        assert len(partitions) <= 3
        assert not partitions & set(seen)
        seen += sorted(partitions)
        ids = [int(i[1:]) for i in block.column("heartbeat_id").to_pylist()]
        for day in partitions:
            mine = [i for i, t in zip(ids, block.column("observed_at").to_pylist(), strict=True) if t.day == day[2]]
            assert mine == sorted(mine)
    assert seen == sorted(seen)
    assert sum(b.num_rows for b in blocks) == rows.num_rows
    months = pa.table({"observed_at": pa.array(days, pa.timestamp("ms", tz="UTC"))})
    assert len(list(partition_chunks(months, "transitions", 1))) == len({(t.year, t.month) for t in days})


def test_ttl_is_read_from_the_schema_as_clickhouse_shows_it() -> None:
    assert ttl_of(
        "ReplacingMergeTree(ingested_at) PARTITION BY toYYYYMMDD(observed_at) ORDER BY (vm_id) "
        "TTL toDateTime(observed_at) + toIntervalDay(7) SETTINGS index_granularity = 8192"
    ) == timedelta(days=7)
    assert ttl_of("AggregatingMergeTree PARTITION BY toYYYYMM(hour) ORDER BY (hour) TTL hour + toIntervalDay(400)") == (
        timedelta(days=400)
    )
    assert ttl_of("MergeTree ORDER BY a TTL d + INTERVAL 2 HOUR") == timedelta(hours=2)
    assert ttl_of("ReplacingMergeTree(ingested_at) PARTITION BY toYYYYMM(observed_at) ORDER BY (a)") is None


class Refusing(Writer):
    """A writer whose first ``refusals`` stores fail as a server fault would (ClickHouse away); before each store it
    asks ``probe`` (what /readyz would say then)."""

    def __init__(self, client: Any, database: str, refusals: int) -> None:
        super().__init__(client, database)
        self.refusals = refusals
        self.probe: Callable[[], str] = lambda: ""
        self.seen: list[str] = []

    def store(self, batch: Batch, *, retry: bool = False) -> dict[str, int]:
        self.seen.append(self.probe())
        if self.refusals:
            self.refusals -= 1
            raise StoreError("connection refused")
        return super().store(batch, retry=retry)


def test_the_ingest_is_not_ready_while_clickhouse_refuses_its_writes(ch: Any, db: str) -> None:
    """/readyz's check: while inserts are retried the handler says for how long; once stored it is ready again."""
    writer = Refusing(ch, db, refusals=3)
    handler = Handler(writer, source="t", stop=threading.Event(), backoff=Backoff(0.05, cap=0.05))
    writer.probe = lambda: handler.store_problem(0.0)
    handler(deliveries(synthetic.lifecycle("e-ready", 0)))
    first, *retried = writer.seen
    assert first == "" and len(retried) == 3  # three refusals, then the store that succeeded
    assert all(p.startswith("ClickHouse has refused writes for") for p in retried)
    assert handler.store_problem(0.0) == ""
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 3
