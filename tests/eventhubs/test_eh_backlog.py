"""Issue 29.2 through the real Event Hubs consumer: a partition carrying a collector's year-old backlog keeps moving."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from collector.ship_eventhubs import EventHubsSink
from demo import synthetic
from ingest.handler import Handler
from ingest.metrics import IngestMetrics
from ingest.source_eventhubs import EventHubsSource
from ingest.writer import Writer
from sevents.retry import Backoff
from sevents.telemetry import make_meter_provider
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.eh_fleet import FAST_BALANCE
from tests.helpers import eventually, outbox_rows


def _ship(endpoint: EventHubsEndpoint, records: list[dict[str, Any]]) -> None:
    sink = EventHubsSink.from_connection_string(endpoint.connection_string())
    sink.send(outbox_rows(records))
    sink.close()


def test_a_partition_carrying_a_year_of_backlog_keeps_moving(
    endpoint: EventHubsEndpoint, ch: Any, db: str, checkpoint_store: Any
) -> None:
    """One VM's year of daily heartbeats and monthly transitions arrives on its partition in batches spanning
    hundreds of days; every batch is stored at the first attempt and a live record sent after it is stored too."""
    now = datetime.now(UTC)
    heartbeats = [synthetic.heartbeat(observed_at=now - timedelta(days=d, hours=1), seq=d) for d in range(365)]
    transitions: list[dict[str, Any]] = []
    for month in range(12):
        start = now - timedelta(days=30 * month + 2)
        transitions += synthetic.lifecycle(f"E-m{month}", 0, start=start)
    _ship(endpoint, heartbeats[::-1] + transitions)  # oldest first, as an outbox ships them
    reader = InMemoryMetricReader()
    metrics = IngestMetrics.create(make_meter_provider("test", readers=[reader], env={}))
    stop = threading.Event()
    handler = Handler(Writer(ch, db), source="eventhubs", stop=stop, backoff=Backoff(0.05, 0.5), metrics=metrics)
    source = EventHubsSource.from_connection_string(
        endpoint.connection_string(), checkpoint_store=checkpoint_store(), **FAST_BALANCE
    )
    thread = threading.Thread(target=source.run, args=(handler, stop), daemon=True)
    thread.start()
    try:

        def count(sql: str) -> int:
            return int(ch.query(sql).result_rows[0][0])

        hours = f"SELECT count() FROM (SELECT hour FROM {db}.heartbeat_hours GROUP BY hour)"
        assert eventually(lambda: count(hours) == 365, 60), count(hours)
        assert eventually(lambda: count(f"SELECT count() FROM {db}.transitions FINAL") == 36, 30)
        live = synthetic.transition(event_id="E-live", observed_at=now)
        _ship(endpoint, [live])
        assert eventually(
            lambda: count(f"SELECT count() FROM {db}.transitions FINAL WHERE event_id = 'E-live'") == 1, 30
        )
    finally:
        stop.set()
        thread.join(30)
    data = reader.get_metrics_data()
    names = {m.name for r in (data.resource_metrics if data else []) for s in r.scope_metrics for m in s.metrics}
    assert "sevents.ingest.insert.failures" not in names
    assert source.failures == 0
