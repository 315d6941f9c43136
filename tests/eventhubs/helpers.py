"""Test helpers: read what a hub holds through the real SDK, and wait for conditions without sleeping blindly."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from azure.eventhub import EventData, EventHubConsumerClient


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


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
    wait_for(lambda: len(got) >= count, timeout)
    client.close()
    thread.join(10)
    with lock:
        return list(got)
