"""Each event's stored lifecycle (``event_history``, migration 0017) and each observing VM's (``event_vm_history``,
migration 0022) follow their evidence through the real ingest.

The handler stores a batch and, before acknowledging it, computes again every event the batch touched, or queues
them when it puts the refresh off under load (``ingest.lifecycle_refresher``); the ``events`` view reads those
rows and looks up only the silence of the VMs still showing an event.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from demo import synthetic
from ingest import lifecycle_store
from ingest.handler import Handler
from ingest.writer import Writer

from .conftest import deliveries

ALL = "since_day = toDate('1970-01-01')"
HOLDERS = "arrayMap(h -> (h.1, h.2), holders) AS holders"  # the table names the tuple's elements, the view does not


def _stored(ch: Any, db: str) -> list[tuple[Any, ...]]:
    """The stored rows, newest computation per event, without the moment they were computed."""
    sql = f"SELECT * EXCEPT (computed_at) REPLACE ({HOLDERS}) FROM {db}.event_history FINAL ORDER BY event_id"
    return ch.query(sql).result_rows


def _computed(ch: Any, db: str) -> list[tuple[Any, ...]]:
    """Every event computed now from all its evidence."""
    sql = f"SELECT * REPLACE ({HOLDERS}) FROM {db}.event_evidence_since({ALL}) ORDER BY event_id"
    return ch.query(sql).result_rows


def _outcomes(ch: Any, db: str) -> dict[str, str]:
    return dict(ch.query(f"SELECT event_id, outcome FROM {db}.events").result_rows)


def _vms_agree(ch: Any, db: str) -> list[tuple[Any, ...]]:
    """Asserts that the stored per-VM rows are what the evidence says now, and that read now (silence, horizon)
    they are the rows event_vms computes from the rollups; returns those rows."""
    order = "ORDER BY event_id, vm_id"
    stored = ch.query(f"SELECT * EXCEPT (computed_at) FROM {db}.event_vm_history FINAL {order}").result_rows
    assert stored == ch.query(f"SELECT * FROM {db}.event_vm_evidence_since({ALL}) {order}").result_rows
    read = ch.query(f"SELECT * FROM {db}.event_vm_lifecycles {order}").result_rows
    assert read == ch.query(f"SELECT * FROM {db}.event_vms {order}").result_rows
    return read


def _vm_outcomes(ch: Any, db: str) -> dict[tuple[str, str], str]:
    sql = f"SELECT event_id, vm_name, outcome FROM {db}.event_vm_lifecycles"
    return {(e, vm): outcome for e, vm, outcome in ch.query(sql).result_rows}


def test_every_batch_leaves_the_stored_lifecycles_equal_to_the_evidence(ch: Any, db: str, handler: Handler) -> None:
    """Batch after batch (one VM, then another, then the end), the stored rows are what the evidence says now."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)  # within the 30-day horizon
    first, second = synthetic.lifecycle("E-1", 0, start=start), synthetic.lifecycle("E-1", 1, start=start)
    other = synthetic.transition(vm_index=2, event_id="E-2", observed_at=start)
    batches = [first[:1], [second[0], other], first[1:], second[1:]]
    outcomes = []
    for index, batch in enumerate(batches):
        handler(deliveries(batch, prefix=f"b{index}"))
        assert _stored(ch, db) == _computed(ch, db), f"after batch {index}"
        assert len(_vms_agree(ch, db)) == [1, 3, 3, 3][index], f"after batch {index}"
        outcomes.append(_outcomes(ch, db))
    assert outcomes[0] == {"E-1": "active"}
    assert outcomes[-1] == {"E-1": "completed", "E-2": "active"}


def test_refresh_all_in_slices_stores_every_event_as_the_evidence_says(ch: Any, db: str, handler: Handler) -> None:
    """Rows stored without the ingest's refresh (as a bulk load does) are computed by ``refresh_all``, a slice of the
    EventIds at a time: every event and every (event, VM) once, whatever the number of slices."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    lifecycles = [synthetic.lifecycle(f"E-{event}", vm, start=start) for event in range(12) for vm in range(3)]
    handler(deliveries([record for lifecycle in lifecycles for record in lifecycle]))
    ch.command(f"TRUNCATE TABLE {db}.event_history")
    ch.command(f"TRUNCATE TABLE {db}.event_vm_history")

    reported: list[tuple[int, int]] = []
    slices = lifecycle_store.refresh_all(ch, db, slice_pairs=5, progress=lambda *done: reported.append(done))
    assert slices > 3  # 36 pairs (and their rollup rows): many slices
    assert reported == [(n, slices) for n in range(1, slices + 1)]  # each slice said when done
    assert len(_stored(ch, db)) == 12
    assert _stored(ch, db) == _computed(ch, db)
    assert len(_vms_agree(ch, db)) == 36
    assert set(_outcomes(ch, db).values()) == {"completed"}


def test_a_redelivered_batch_changes_no_stored_lifecycle(ch: Any, db: str, handler: Handler) -> None:
    """At-least-once delivery: the same batch again computes the same rows (only computed_at moves)."""
    batch = synthetic.lifecycle("E-1", 0)
    handler(deliveries(batch))
    before = _stored(ch, db)
    handler(deliveries(batch, prefix="again"))
    assert _stored(ch, db) == before


def test_an_older_computation_never_replaces_a_newer_one(ch: Any, db: str, handler: Handler) -> None:
    """Two workers refreshing one event: the row computed last wins, whatever order the inserts land in."""
    handler(deliveries(synthetic.lifecycle("E-1", 0)))
    newest = ch.query(f"SELECT computed_at FROM {db}.event_history FINAL").result_rows[0][0]
    stale = f"SELECT * REPLACE ('active' AS outcome, now64(6) - INTERVAL 1 HOUR AS computed_at) FROM {db}.event_history"
    ch.command(f"INSERT INTO {db}.event_history {stale}")
    assert _outcomes(ch, db) == {"E-1": "completed"}
    assert ch.query(f"SELECT computed_at FROM {db}.event_history FINAL").result_rows[0][0] == newest


def test_silence_is_looked_up_when_read_not_when_stored(ch: Any, db: str, handler: Handler) -> None:
    """An event still shown by one VM after another saw it end: active while that VM is not silent, not active once
    it is, with no new record of the event in between (the stored row is the same)."""
    now = datetime.now(UTC).replace(microsecond=0)
    shown = synthetic.transition(vm_index=0, event_id="E-1", observed_at=now - timedelta(minutes=20))
    seen = synthetic.transition(vm_index=1, event_id="E-1", observed_at=now - timedelta(minutes=20))
    gone = synthetic.transition(
        vm_index=1,
        event_id="E-1",
        incarnation=2,
        kind="disappeared",
        status="",
        prev_status="Scheduled",
        observed_at=now - timedelta(minutes=19),
    )
    handler(deliveries([shown, seen, gone]))
    stored = _stored(ch, db)
    assert _outcomes(ch, db) == {"E-1": "active"}, "vm 0 has not been silent (no heartbeat yet) and still shows it"
    _vms_agree(ch, db)
    vm0, vm1 = (("E-1", synthetic.vm(i)["vm_name"]) for i in (0, 1))
    assert _vm_outcomes(ch, db) == {vm0: "active", vm1: "cancelled"}
    # vm 0's latest heartbeat is ten minutes old: silent (300 s), and another VM saw the event end
    handler(deliveries([synthetic.heartbeat(vm_index=0, observed_at=now - timedelta(minutes=10))], prefix="hb"))
    assert _stored(ch, db) == stored, "a heartbeat is no evidence of an event"
    assert _outcomes(ch, db) == {"E-1": "cancelled"}
    _vms_agree(ch, db)
    assert _vm_outcomes(ch, db) == {vm0: "cancelled", vm1: "cancelled"}


def test_refresh_of_events_with_no_evidence_stores_nothing(ch: Any, db: str) -> None:
    """An EventId nothing was stored for (or an empty one) computes no row."""
    assert lifecycle_store.refresh(ch, db, ["", "E-unknown"]) == 1
    assert _stored(ch, db) == []


def test_a_lifecycle_put_off_survives_the_worker_and_the_next_one_computes_it(ch: Any, db: str) -> None:
    """Under load the ingest puts refreshes off (ingest.lifecycle_refresher). A worker that stored a batch, queued
    its event and died before refreshing it loses nothing: the next worker's first batch sweeps the queue."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    died = Handler(Writer(ch, db, refresh_every=3600), source="test", stop=threading.Event())
    died(deliveries(synthetic.lifecycle("E-1", 0, start=start)[:1], prefix="a"))  # refreshed at once
    died(deliveries(synthetic.lifecycle("E-2", 1, start=start), prefix="b"))  # put off: queued
    assert _outcomes(ch, db) == {"E-1": "active"}
    assert lifecycle_store.stale(ch, db) == ["E-2"]
    # the worker dies here (never closed); the next one starts with a batch of heartbeats only
    successor = Handler(Writer(ch, db, refresh_every=3600), source="test", stop=threading.Event())
    successor(deliveries([synthetic.heartbeat(vm_index=3, observed_at=start)], prefix="c"))
    assert _stored(ch, db) == _computed(ch, db)
    _vms_agree(ch, db)
    assert _outcomes(ch, db) == {"E-1": "active", "E-2": "completed"}
    assert lifecycle_store.stale(ch, db) == []


def test_a_pipeline_computes_what_it_put_off_when_it_stops(ch: Any, db: str) -> None:
    """Closing the handler (the ingest stopping, or an until-idle run ending) refreshes what was put off."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    handler = Handler(Writer(ch, db, refresh_every=3600), source="test", stop=threading.Event())
    handler(deliveries(synthetic.lifecycle("E-1", 0, start=start)[:1], prefix="a"))
    handler(deliveries(synthetic.lifecycle("E-1", 0, start=start)[1:], prefix="b"))
    assert _outcomes(ch, db) == {"E-1": "active"}
    handler.close()
    assert _outcomes(ch, db) == {"E-1": "completed"}
    assert _stored(ch, db) == _computed(ch, db)
    _vms_agree(ch, db)


def test_a_replayed_history_of_more_than_100_months_is_stored_in_one_refresh(
    ch: Any, db: str, handler: Handler
) -> None:
    """event_history is partitioned by month (migration 0029), and ClickHouse refuses by default an INSERT that
    writes more than 100 partitions: one batch of 110 events, one a month over 9 years (a replayed outbox or
    archive), is stored and computed in one refresh all the same."""
    now = datetime.now(UTC).replace(microsecond=0)
    records = [
        synthetic.transition(event_id=f"E-{month}", observed_at=now - timedelta(days=31 * month))
        for month in range(110)
    ]
    handler(deliveries(records))
    months = ch.query(f"SELECT uniqExact(_partition_id) FROM {db}.event_history").result_rows[0][0]
    assert months > 100
    assert len(_stored(ch, db)) == 110
    assert _stored(ch, db) == _computed(ch, db)
