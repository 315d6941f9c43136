"""Event Hubs test helpers: read what a hub holds through the real SDK (waiting: tests/helpers.py)."""

from __future__ import annotations

import threading
from typing import Any

from azure.eventhub import EventData, EventHubConsumerClient

from tests.helpers import eventually


def read_events(
    connection_string: str, count: int, *, timeout: float = 20.0, consumer_group: str = "$Default", **receive: Any
) -> list[tuple[str, EventData]]:
    """(partition id, event) for the first ``count`` events a fresh consumer receives, in arrival order."""
    got: list[tuple[str, EventData]] = []
    lock = threading.Lock()
    client = EventHubConsumerClient.from_connection_string(connection_string, consumer_group=consumer_group)

    def on_batch(context: Any, events: list[EventData]) -> None:
        with lock:
            got.extend((context.partition_id, e) for e in events)

    options = {"starting_position": "-1", "max_wait_time": 0.2, **receive}
    thread = threading.Thread(target=client.receive_batch, kwargs={"on_event_batch": on_batch, **options}, daemon=True)
    thread.start()
    eventually(lambda: len(got) >= count, timeout)
    client.close()
    thread.join(10)
    with lock:
        return list(got)
