"""The Event Hubs sink's link: opened before the first record, and replaced at once when the service dropped it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from azure.eventhub.exceptions import (
    AuthenticationError,
    ConnectError,
    ConnectionLostError,
    EventDataSendError,
    OperationTimeoutError,
)

from collector.outbox import Outbox
from collector.ship import Shipper
from collector.ship_eventhubs import EventHubsSink, link_lost
from collector.ship_link import open_promptly
from collector.sink import Connects
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.helpers import eventually, numbered_transition, outbox_rows


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (ConnectionLostError("link detached"), True),
        (ConnectError("connection reset"), True),
        (OperationTimeoutError("no answer in time"), False),
        (AuthenticationError("token refused"), False),
        (EventDataSendError("server busy"), False),
        (OSError("anything else"), False),
    ],
)
def test_only_a_lost_connection_or_link_is_sent_again_at_once(error: Exception, lost: bool) -> None:
    """A lost connection or link is retried on a new one at once; a time-out, a refusal or anything else is not."""
    assert link_lost(error) is lost


def test_connect_opens_the_link_that_the_first_send_then_uses(endpoint: EventHubsEndpoint) -> None:
    """After connect, the endpoint has the sink's connection, and the first send makes no other."""
    sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=5)
    assert isinstance(sink, Connects)
    sink.connect()
    assert endpoint.accepted == 1
    assert endpoint.store.total() == 0  # opened, nothing sent
    sink.send(outbox_rows([numbered_transition("vm-1", 0)]))
    assert endpoint.accepted == 1
    assert endpoint.store.total() == 1
    sink.close()


def test_a_send_after_the_service_dropped_the_connection_goes_on_a_new_one(endpoint: EventHubsEndpoint) -> None:
    """Every connection dropped while the sink was idle: its next send is accepted in the same call, on a new
    connection, with no failure for the shipper to back off from."""
    sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=5)
    sink.send(outbox_rows([numbered_transition("vm-1", 0)]))
    endpoint.stop()  # every socket closed, as when the service drops its connections
    endpoint.start()
    sink.send(outbox_rows([numbered_transition("vm-1", 1)]))
    assert sink.failures == 0
    assert endpoint.accepted == 2
    assert endpoint.store.total() == 2
    sink.close()


def test_a_hub_that_stays_down_is_a_failure_after_one_new_connection(endpoint: EventHubsEndpoint) -> None:
    """With the hub gone for good, the send on the dropped link and the one on a new connection both fail: one
    SinkError, and the rows are the shipper's to send again."""
    from collector.sink import SinkError

    sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=3)
    sink.send(outbox_rows([numbered_transition("vm-1", 0)]))
    endpoint.stop()
    with pytest.raises(SinkError):
        sink.send(outbox_rows([numbered_transition("vm-1", 1)]))
    assert sink.failures == 1
    sink.close()


def test_the_shipper_opens_the_link_before_the_first_record(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """A running shipper with an empty outbox has its connection open; the first commit goes out on it."""
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=5)
        shipper = Shipper(outbox, sink)
        stop = threading.Event()
        worker = threading.Thread(target=shipper.run, args=(stop,), daemon=True)
        worker.start()
        assert eventually(lambda: endpoint.accepted == 1, 20)
        assert sink.events_sent == 0
        outbox.commit([numbered_transition("vm-1", 0)], None)
        shipper.wake()
        assert eventually(lambda: outbox.depth() == 0, 20)
        stop.set()
        worker.join(10)
        assert shipper.shutdown(5) == 0
        assert endpoint.accepted == 1
        assert endpoint.store.total() == 1


def test_opening_promptly_declines_a_client_it_does_not_know() -> None:
    """An object without the SDK's producer internals is left alone: not opened, nothing raised."""
    assert open_promptly(object(), timeout=1.0) is False
