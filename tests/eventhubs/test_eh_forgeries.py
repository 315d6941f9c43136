"""Issue 29.1 through the real Event Hubs consumer: records a VM cannot prove are dead-lettered, the first stays.

Genuine records go through the collector's own producer (``EventHubsSink``: each record under its vm_id as the
partition key); forgeries through the SDK's producer with the partition key a forger would choose; the ingest
is the real ``EventHubsSource`` and ``Handler`` into embedded ClickHouse. Each forgery class is dead-lettered
with its reason, and no other VM's rows, events, heartbeats or status change.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from collector.ship_eventhubs import EventHubsSink
from demo import synthetic
from ingest.handler import CONFLICT, FUTURE, NOT_ITS_PARTITION_KEY, Handler
from ingest.source_eventhubs import EventHubsSource
from ingest.writer import Writer
from sevents import records
from sevents.records import encode
from sevents.retry import Backoff
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.eh_fleet import FAST_BALANCE
from tests.helpers import eventually, outbox_rows, query_rows

VICTIM, SENDER, LATE = 0, 1, 2  # the VM with a live Reboot, the VM a forger sends from, a VM that joins later
FAR = datetime(2099, 6, 1, tzinfo=UTC)  # far ahead, yet a time the tables can hold


def _vm(index: int) -> str:
    return str(synthetic.vm(index)["vm_id"])


def _ship(endpoint: EventHubsEndpoint, sent: list[dict[str, Any]]) -> None:
    """Genuine records through the collector's producer (partition key: the record's vm_id)."""
    sink = EventHubsSink.from_connection_string(endpoint.connection_string())
    sink.send(outbox_rows(sent))
    sink.close()


def _forge(endpoint: EventHubsEndpoint, forged: list[tuple[str, dict[str, Any]]]) -> None:
    """Each record under the partition key the forger chose, through the SDK's producer."""
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        for key, record in forged:
            batch = producer.create_batch(partition_key=key)
            batch.add(EventData(encode(record)))
            producer.send_batch(batch)


def _transition(vm_index: int, **fields: Any) -> dict[str, Any]:
    """A transition of ``vm_index`` with its key made again over the changed fields (anyone can recompute it)."""
    record = synthetic.transition(vm_index=vm_index)
    record.update(fields)
    key = records.transition_id(record["vm_id"], record["event_id"], record["incarnation"], record["kind"])
    record.update(transition_id=key, record_id=key)
    return record


def _heartbeat(vm_index: int, observed_at: datetime) -> dict[str, Any]:
    return synthetic.heartbeat(vm_index=vm_index, observed_at=observed_at)


@pytest.fixture
def ingest(endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any) -> Iterator[Handler]:
    """The real consumer storing into ``db`` until the test ends."""
    stop = threading.Event()
    handler = Handler(Writer(ch, db), source="eventhubs", stop=stop, backoff=Backoff(0.05, 0.5))
    source = EventHubsSource.from_connection_string(
        endpoint.connection_string(), checkpoint_store=checkpoint_store(), **FAST_BALANCE
    )
    thread = threading.Thread(target=source.run, args=(handler, stop), daemon=True)
    thread.start()
    yield handler
    stop.set()
    thread.join(30)
    assert source.failures == 0


def _state(ch: Any, db: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the victim's and the sender's pages, dashboards and alerts read (the late VM left out)."""
    others = f"vm_id != '{_vm(LATE)}'"
    return {
        "transitions": query_rows(
            ch, f"SELECT * EXCEPT ingested_at FROM {db}.transitions FINAL ORDER BY transition_id"
        ),
        "heartbeats": query_rows(
            ch, f"SELECT * EXCEPT ingested_at FROM {db}.heartbeats FINAL WHERE {others} ORDER BY heartbeat_id"
        ),
        "events": query_rows(ch, f"SELECT * FROM {db}.events ORDER BY event_id"),
        "active": query_rows(ch, f"SELECT * FROM {db}.active_events ORDER BY event_id"),
        "event_vms": query_rows(ch, f"SELECT * FROM {db}.event_vms ORDER BY event_id, vm_id"),
        "status": query_rows(
            ch,
            f"SELECT vm_id, last_heartbeat_at, state, retired_reason FROM {db}.vm_status WHERE {others} ORDER BY vm_id",
        ),
    }


def _dead_letters(ch: Any, db: str) -> dict[bytes, str]:
    found = query_rows(ch, f"SELECT payload, error FROM {db}.dead_letters")
    return {(p if isinstance(p, bytes) else str(p).encode()): str(e) for p, e in found}


def test_each_forgery_class_is_dead_lettered_and_no_other_vm_changes(
    endpoint: EventHubsEndpoint, ch: Any, db: str, ingest: Handler
) -> None:
    """A live Reboot of the victim (Scheduled, then Started) and both VMs' heartbeats are stored; then every
    forgery the issue shows is sent and each is dead-lettered with its reason, the victim's event, rows,
    heartbeats and status unchanged; a genuine record sent after them is stored."""
    now = datetime.now(UTC)
    started, event = now - timedelta(minutes=1), "E-live-reboot"
    genuine = [
        _transition(VICTIM, event_id=event, observed_at=records.format_time(now - timedelta(minutes=4))),
        _transition(
            VICTIM,
            event_id=event,
            incarnation=2,
            kind=records.KIND_STATUS_CHANGED,
            status="Started",
            prev_status="Scheduled",
            observed_at=records.format_time(started),
            prev_observed_at=records.format_time(now - timedelta(minutes=4)),
        ),
        _heartbeat(VICTIM, now - timedelta(seconds=30)),
        _heartbeat(SENDER, now - timedelta(seconds=30)),
    ]
    _ship(endpoint, genuine)
    assert eventually(lambda: ingest.stored == len(genuine), 30), ingest.stored
    before = _state(ch, db)
    assert [row[0] for row in before["active"]] == [event]

    ghost = {**synthetic.vm(7), "vm_id": "ghost-0000"}
    invented = _transition(  # an invented VM turns the live Reboot into a Freeze with NotBefore 2299
        VICTIM,
        **ghost,
        event_id=event,
        incarnation=3,
        kind=records.KIND_UPDATED,
        status="Scheduled",
        event_type="Freeze",
        not_before=records.format_time(FAR),
        observed_at=records.format_time(now),
    )
    terminate = _transition(  # the victim "sees" a Terminate (its silence would read "retired")
        VICTIM, event_id="E-forged-terminate", event_type="Terminate", observed_at=records.format_time(now)
    )
    gone_2299 = _transition(  # a disappearance dated 2299 would mark the Started Reboot completed
        VICTIM,
        event_id=event,
        incarnation=3,
        kind=records.KIND_DISAPPEARED,
        status="",
        prev_status="Started",
        observed_at=records.format_time(FAR),
    )
    appeared_2299 = _transition(VICTIM, event_id="E-2299", observed_at=records.format_time(FAR))
    heartbeat_2299 = _heartbeat(VICTIM, FAR)  # would hide a dead collector
    replaced = {  # the victim's own first record again, with other content (the same transition_id)
        **genuine[0],
        "event_type": "Freeze",
        "not_before": records.format_time(FAR),
        "observed_at": records.format_time(now),
    }
    forgeries = [
        (_vm(VICTIM), invented, NOT_ITS_PARTITION_KEY),  # an invented VM under another VM's partition key
        (_vm(SENDER), terminate, NOT_ITS_PARTITION_KEY),  # claims the victim, under the sender's own key
        (_vm(VICTIM), gone_2299, FUTURE),
        (_vm(VICTIM), appeared_2299, FUTURE),
        (_vm(VICTIM), heartbeat_2299, FUTURE),
        (_vm(VICTIM), replaced, CONFLICT),
    ]
    _forge(endpoint, [(key, record) for key, record, _ in forgeries])
    late = _heartbeat(LATE, now)
    _ship(endpoint, [late])
    total = len(genuine) + len(forgeries) + 1
    assert eventually(lambda: ingest.stored == total, 30), ingest.stored

    dead = _dead_letters(ch, db)
    assert len(dead) == len(forgeries)
    for _, record, reason in forgeries:
        error = dead[encode(record)]
        assert error.startswith(f"{reason}: "), (record["record_type"], error)
    assert "2099-06-01" in dead[encode(heartbeat_2299)] and "enqueued" in dead[encode(heartbeat_2299)]
    assert f"partition key '{_vm(VICTIM)}'" in dead[encode(invented)]
    assert _state(ch, db) == before
    assert query_rows(ch, f"SELECT count() FROM {db}.heartbeats FINAL WHERE vm_id = '{_vm(LATE)}'") == [(1,)]


def test_a_redelivered_record_is_idempotent_and_an_old_one_is_fine(
    endpoint: EventHubsEndpoint, ch: Any, db: str, ingest: Handler
) -> None:
    """The same record twice (a producer's retry) is stored once, without a dead letter; a record observed days
    before it was sent (a backlog) is stored; one a little ahead of the hub's clock (within the bound) too."""
    now = datetime.now(UTC)
    record = _transition(VICTIM, event_id="E-twice", observed_at=records.format_time(now))
    old = _heartbeat(VICTIM, now - timedelta(days=3))
    ahead = _heartbeat(SENDER, now + timedelta(seconds=120))
    _ship(endpoint, [record, old, ahead])
    _ship(endpoint, [record])
    assert eventually(lambda: ingest.stored == 4, 30), ingest.stored
    assert query_rows(ch, f"SELECT count() FROM {db}.dead_letters") == [(0,)]
    assert query_rows(ch, f"SELECT count() FROM {db}.transitions FINAL") == [(1,)]
    assert query_rows(ch, f"SELECT count() FROM {db}.heartbeats FINAL") == [(2,)]
    assert json.loads(encode(record))["record_id"] == record["transition_id"]
