"""Issue 27 item 2 through the real Event Hubs consumer: Microsoft's central Scheduled Events feed as a source.

Event Grid's deliveries (Event Grid schema arrays and CloudEvents, with no partition key, as Event Grid sends) go
through the SDK's producer into the project's AMQP endpoint; the ingest is the real ``EventHubsSource`` with the
feed's ``FeedHandler`` into embedded ClickHouse, beside collector records stored by the collectors' ``Handler``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from demo import synthetic
from ingest import queries
from ingest.feed import FeedHandler
from ingest.feed_decode import NOT_JSON, OTHER_TYPE
from ingest.handler import Handler
from ingest.source import Delivery
from ingest.source_eventhubs import EventHubsSource
from ingest.writer import Writer
from sevents.records import encode
from sevents.retry import Backoff
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.eh_fleet import FAST_BALANCE
from tests.helpers import eventually
from tests.ingest.feed_events import cloud_event, event_grid, resource_info


@pytest.fixture
def feed(endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any) -> Iterator[FeedHandler]:
    """The real consumer of the feed's hub storing into ``db`` until the test ends."""
    stop = threading.Event()
    handler = FeedHandler(ch, db, stop=stop, backoff=Backoff(0.05, 0.5))
    source = EventHubsSource.from_connection_string(
        endpoint.connection_string(),
        consumer_group="sevents-ingest",
        checkpoint_store=checkpoint_store(),
        **FAST_BALANCE,
    )
    thread = threading.Thread(target=source.run, args=(handler, stop), daemon=True)
    thread.start()
    yield handler
    stop.set()
    thread.join(30)
    assert source.failures == 0


def _publish(endpoint: EventHubsEndpoint, bodies: list[bytes]) -> None:
    """Each body as one message without a partition key, as Event Grid delivers to an Event Hub."""
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        for body in bodies:
            batch = producer.create_batch()
            batch.add(EventData(body))
            producer.send_batch(batch)


def _collectors_saw(ch: Any, db: str, event_id: str, vm_index: int, at: datetime) -> None:
    """A collector's own records (trusted, as from its outbox): the event Scheduled on its VM, and heartbeats."""
    records = [
        synthetic.transition(vm_index=vm_index, event_id=event_id, observed_at=at, not_before=at + timedelta(hours=1)),
        synthetic.heartbeat(vm_index=vm_index, observed_at=datetime.now(UTC)),
    ]
    handler = Handler(Writer(ch, db), source="outbox", stop=threading.Event())
    handler([Delivery(encode(r), f"outbox#{event_id}-{i}") for i, r in enumerate(records)])


def _events(ch: Any, db: str, since: datetime) -> dict[str, dict[str, Any]]:
    """audit events over the window, by EventId."""
    result = queries.run(ch, queries.EVENTS_IN_WINDOW, db, since=since, until=datetime.now(UTC) + timedelta(hours=1))
    return {row["event_id"]: row for row in result.dicts()}


def _count(ch: Any, sql: str) -> int:
    return int(ch.query(sql).result_rows[0][0])


def test_the_feed_settles_outcomes_shows_platform_only_events_and_stores_a_repeat_once(
    endpoint: EventHubsEndpoint, ch: Any, db: str, feed: FeedHandler
) -> None:
    """Two events a collector saw (sevents infers both active) are settled by the feed's Completed (Event Grid
    schema) and Canceled (CloudEvent); an event announced to a scale-set VM without a collector is in audit events,
    seen by the platform only; a delivery Event Grid repeats is stored once; bad deliveries are dead letters."""
    now = datetime.now(UTC)
    since = now - timedelta(hours=2)
    seen_at = now - timedelta(minutes=30)
    _collectors_saw(ch, db, "E-done", 0, seen_at)
    _collectors_saw(ch, db, "E-called-off", 1, seen_at)
    before = _events(ch, db, since)
    assert {k: (v["outcome"], v["seen_by"]) for k, v in before.items()} == {
        "E-done": ("active", "sevents"),
        "E-called-off": ("active", "sevents"),
    }

    at = now - timedelta(minutes=20)
    done = event_grid("eg-1", resource_info("E-done", "Completed", ["vm-000"]), at)
    called_off = cloud_event("ce-1", resource_info("E-called-off", "Canceled", ["vm-001"]), at)
    scale_set = "virtualMachineScaleSets/batch"
    announced = event_grid("eg-2", resource_info("E-unwatched", "Scheduled", ["batch_7"], parent=scale_set), at)
    started = event_grid("eg-3", resource_info("E-unwatched", "Started", ["batch_7"], parent=scale_set), now)
    other = {**announced, "id": "eg-4", "eventType": "Microsoft.Resources.ResourceWriteSuccess"}
    bodies = [json.dumps([done]).encode(), json.dumps(called_off).encode(), json.dumps([announced]).encode()]
    bodies += [json.dumps([announced]).encode(), json.dumps([started, other]).encode(), b"{not json"]
    _publish(endpoint, bodies)
    ok = eventually(lambda: _count(ch, f"SELECT count() FROM {db}.azure_feed_deliveries") == 4, 60)
    assert ok, (ch.query(f"SELECT * FROM {db}.azure_feed_deliveries").result_rows, feed.stored, feed.repeated)
    assert eventually(lambda: _count(ch, f"SELECT count() FROM {db}.dead_letters") == 2, 30)

    after = _events(ch, db, since)
    assert {k: (v["outcome"], v["outcome_source"], v["seen_by"], v["platform_status"]) for k, v in after.items()} == {
        "E-done": ("completed", "platform", "both", "Completed"),
        "E-called-off": ("cancelled", "platform", "both", "Canceled"),
        "E-unwatched": ("announced", "platform", "platform", "Started"),
    }
    # the whole-history view too (read from 1970: the feed's lookup must not wrap below the first day)
    whole = ch.query(f"SELECT event_id, outcome, seen_by FROM {db}.events ORDER BY event_id").result_rows
    assert [tuple(r) for r in whole] == [
        ("E-called-off", "cancelled", "both"),
        ("E-done", "completed", "both"),
        ("E-unwatched", "announced", "platform"),
    ]
    unwatched = after["E-unwatched"]
    assert (unwatched["event_type"], unwatched["affected_vms"], unwatched["affected_vm_count"]) == (
        "Reboot",
        ["batch_7"],
        1,
    )
    assert unwatched["first_seen_at"] == at.replace(microsecond=at.microsecond // 1000 * 1000)
    assert unwatched["notice_s"] == pytest.approx((now - at).total_seconds(), abs=0.002)
    # the repeated delivery of eg-2: one row in each table, counted as repeated
    assert _count(ch, f"SELECT count() FROM {db}.azure_scheduled_events WHERE event_id = 'E-unwatched'") == 2
    assert _count(ch, f"SELECT count() FROM {db}.azure_feed_deliveries WHERE delivery_id = 'eg-2'") == 1
    assert feed.repeated == 1 and feed.stored == 4
    reasons = sorted(str(r[0]).split(":")[0] for r in ch.query(f"SELECT error FROM {db}.dead_letters").result_rows)
    assert reasons == sorted([NOT_JSON, OTHER_TYPE])


def test_a_redelivered_batch_changes_nothing(ch: Any, db: str) -> None:
    """The same deliveries handled again (a batch read again after a crash before its checkpoint) insert no row."""
    handler = FeedHandler(ch, db, stop=threading.Event())
    at = datetime(2026, 11, 23, 18, tzinfo=UTC)
    bodies = [
        json.dumps([event_grid(f"eg-{s}", resource_info("E-1", s, ["vm-000"]), at)]).encode()
        for s in ("Scheduled", "Started")
    ]
    deliveries = [Delivery(b, f"eventhubs:0:{i}") for i, b in enumerate(bodies)]
    handler(deliveries)
    counts = [_count(ch, f"SELECT count() FROM {db}.{t}") for t in ("azure_scheduled_events", "azure_feed_deliveries")]
    handler(deliveries)
    assert (
        [_count(ch, f"SELECT count() FROM {db}.{t}") for t in ("azure_scheduled_events", "azure_feed_deliveries")]
        == counts
        == [2, 2]
    )
    assert (handler.stored, handler.repeated) == (2, 2)
