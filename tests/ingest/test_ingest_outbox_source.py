"""The outbox source over real collector outboxes: batches, acknowledges only what was stored, drains."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from collector.outbox import Outbox
from demo import synthetic
from ingest.batching import BatchPolicy
from ingest.handler import Handler
from ingest.metrics import IngestMetrics
from ingest.migrate import Target, migrate
from ingest.source_outbox import OutboxSource, resolve
from ingest.writer import Writer
from sevents.retry import Backoff
from sevents.telemetry import make_meter_provider
from tests.collector_edges import fullfs
from tests.collector_edges.fullfs import fill
from tests.helpers import FakeClock, metric_points, wait_for

from .conftest import scalar


def _failed_attempts(reader: InMemoryMetricReader) -> int:
    return sum(p.value for p in metric_points(reader).get("sevents.ingest.insert.failures", []))


small_fs = fullfs.small_fs  # the fixture, shared with the other full-disk tests


def test_policy_delivers_when_full_or_old_enough_and_never_empty() -> None:
    """A batch is due at the record or byte limit, or once it waited max_wait_s; an empty one never is."""
    policy = BatchPolicy(max_records=10, max_bytes=2048, max_wait_s=1.0)
    assert not policy.due(0, 0, 99.0)
    assert not policy.due(3, 100, 0.5)
    assert policy.due(3, 100, 1.0)
    assert policy.due(10, 100, 0.0)
    assert policy.due(1, 2048, 0.0)
    assert BatchPolicy(max_records=0, max_bytes=1, max_wait_s=-1).problems() == [
        "batch_max_records must be at least 1",
        "batch_max_bytes must be at least 1024",
        "batch_max_wait_s must not be negative",
    ]


def test_resolve_finds_state_dirs_files_and_globs(tmp_path: Path, make_outbox: Callable[..., Outbox]) -> None:
    """Dirs, outbox files and globs name existing outboxes only, each once."""
    for name in ("vm-1", "vm-2", "other"):
        make_outbox(name)
    (tmp_path / "empty").mkdir()
    found = resolve(
        [
            str(tmp_path / "vm-*"),
            str(tmp_path / "vm-1"),
            str(tmp_path / "other" / "outbox.sqlite"),
            str(tmp_path / "empty"),
            str(tmp_path / "missing"),
        ]
    )
    assert sorted(p.parent.name for p in found) == ["other", "vm-1", "vm-2"]


def test_drain_stores_every_outbox_and_removes_what_was_stored(
    ch: Any, db: str, handler: Handler, tmp_path: Path, make_outbox: Callable[..., Outbox]
) -> None:
    """until_idle reads every outbox in small batches, stores everything, leaves the outboxes empty."""
    boxes = [
        make_outbox(f"vm-{i}", [*synthetic.lifecycle(f"E-{i % 2}", i), synthetic.heartbeat(vm_index=i)])
        for i in range(4)
    ]
    source = OutboxSource([str(tmp_path / "*")], policy=BatchPolicy(max_records=5), until_idle=True)
    source.run(handler, threading.Event())
    assert [b.depth() for b in boxes] == [0, 0, 0, 0]
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 12
    assert scalar(ch, f"SELECT count() FROM {db}.heartbeats_latest FINAL") == 4
    assert source.delivered == 16


def test_reading_while_collectors_keep_writing_loses_and_duplicates_nothing(
    ch: Any, db: str, handler: Handler, tmp_path: Path, make_outbox: Callable[..., Outbox]
) -> None:
    """Collectors commit while the source reads and removes; at the end every record is stored exactly once."""
    boxes = [make_outbox(f"vm-{i}") for i in range(3)]
    stop = threading.Event()
    source = OutboxSource(
        [str(tmp_path / "*")],
        policy=BatchPolicy(max_records=7, max_wait_s=0.01),
        poll_interval_s=0.005,
        rescan_interval_s=0.0,
    )
    reader = threading.Thread(target=source.run, args=(handler, stop))
    reader.start()
    for n in range(60):
        for i, box in enumerate(boxes):
            box.commit([synthetic.transition(vm_index=i, event_id=f"E-{n}", incarnation=n)], None)
    wait_for(lambda: not any(b.depth() for b in boxes), 30, what="the outboxes to drain", interval=0.02)
    stop.set()
    reader.join(10)
    assert [b.depth() for b in boxes] == [0, 0, 0]
    assert scalar(ch, f"SELECT count() FROM {db}.transitions") == 180
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 180


def test_clickhouse_unavailable_nothing_acknowledged_then_nothing_lost(
    ch: Any, db: str, tmp_path: Path, make_outbox: Callable[..., Outbox]
) -> None:
    """With the database gone the outbox keeps every row while inserts retry; after recovery all rows land."""
    box = make_outbox("vm-0", synthetic.lifecycle("E-1", 0) + synthetic.lifecycle("E-2", 0))
    ch.command(f"DROP DATABASE {db}")
    stop = threading.Event()
    reader = InMemoryMetricReader()
    metrics = IngestMetrics.create(make_meter_provider("test", readers=[reader], env={}))
    handler = Handler(
        Writer(ch, db), source="outbox", stop=stop, backoff=Backoff(initial=0.01, cap=0.05), metrics=metrics
    )
    source = OutboxSource(
        [str(tmp_path / "*")], policy=BatchPolicy(max_records=4, max_wait_s=0.01), poll_interval_s=0.01
    )
    worker = threading.Thread(target=source.run, args=(handler, stop))
    worker.start()
    wait_for(lambda: _failed_attempts(reader) >= 3, 30, what="three failed attempts")
    assert box.depth() == 6  # nothing acknowledged while nothing could be stored
    assert worker.is_alive()
    migrate(ch, Target(database=db))
    wait_for(lambda: box.depth() == 0, 20, what="the outbox to drain", interval=0.02)
    stop.set()
    worker.join(10)
    assert box.depth() == 0
    assert scalar(ch, f"SELECT count() FROM {db}.transitions FINAL") == 6


def test_stopping_during_an_outage_acknowledges_nothing(
    ch: Any, db: str, tmp_path: Path, make_outbox: Callable[..., Outbox]
) -> None:
    """Shutdown while ClickHouse is down ends the run with every row still in the outbox."""
    box = make_outbox("vm-0", synthetic.lifecycle("E-1", 0))
    ch.command(f"DROP DATABASE {db}")
    stop = threading.Event()
    handler = Handler(Writer(ch, db), source="outbox", stop=stop, backoff=Backoff(initial=0.01, cap=0.05))
    reader = threading.Thread(target=OutboxSource([str(tmp_path / "*")]).run, args=(handler, stop))
    reader.start()
    wait_for(lambda: handler.failing_since is not None, 30, what="a failed insert")  # stopped mid-outage
    stop.set()
    reader.join(10)
    assert not reader.is_alive()
    assert box.depth() == 3


def test_an_outbox_that_cannot_be_changed_is_backed_off(small_fs: Path) -> None:
    """On a full disk the delivered rows cannot be removed: the source rests between tries instead of spinning,
    and removes them once space returns."""
    collector_side = Outbox(small_fs / "vm" / "outbox.sqlite")  # held open, as a running collector does
    collector_side.commit([synthetic.heartbeat(vm_index=1)], None)
    filler: list[Path] = []
    clock = FakeClock()  # the rests between tries are on this clock; the polls run in real time
    deliveries: list[float] = []

    def deliver(batch: Any) -> None:
        deliveries.append(clock.elapsed)
        if not filler:
            filler.append(fill(small_fs))  # stored downstream, then the disk fills before the rows leave

    policy = BatchPolicy(max_records=10, max_bytes=1_000_000, max_wait_s=0.0)
    source = OutboxSource(
        [str(small_fs / "vm")],
        policy=policy,
        poll_interval_s=0.01,
        backoff=Backoff(1.0, cap=1.0),
        monotonic=clock.monotonic,
    )
    stop = threading.Event()
    worker = threading.Thread(target=source.run, args=(deliver, stop), daemon=True)
    worker.start()
    try:
        wait_for(lambda: deliveries, 30, what="the first delivery")
        clock.wait_reads(50)  # many polls while time stands still
        clock.advance(0.45)  # less than the shortest rest (half the 1 s backoff)
        clock.wait_reads(50)
        assert deliveries == [0.0]  # resting, not one try per poll
        assert collector_side.depth() == 1
        clock.advance(0.55)  # the longest rest is over: tried again, once
        wait_for(lambda: len(deliveries) == 2, 30, what="the second try")
        clock.wait_reads(50)
        assert deliveries == [0.0, 1.0] and collector_side.depth() == 1
        filler[0].unlink()
        clock.advance(1.0)
        wait_for(lambda: collector_side.depth() == 0, 30, what="the rows to leave once space returned")
    finally:
        stop.set()
        worker.join(timeout=10)
        collector_side.close()
