"""The local Event Hubs endpoint, checked through the real azure-eventhub SDK (it must behave like the service)."""

from __future__ import annotations

import datetime as dt

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub.exceptions import AuthenticationError, EventHubError

from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.helpers import read_events


def _send(endpoint: EventHubsEndpoint, key: str, bodies: list[bytes], **props: str) -> None:
    with EventHubProducerClient.from_connection_string(endpoint.connection_string(), retry_total=0) as producer:
        batch = producer.create_batch(partition_key=key)
        for body in bodies:
            event = EventData(body)
            event.properties = dict(props)
            batch.add(event)
        producer.send_batch(batch)


def test_management_reads_hub_and_partition_properties(endpoint: EventHubsEndpoint) -> None:
    """Hub properties list the partitions, and a partition's properties follow what was sent to it."""
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        assert producer.get_partition_ids() == ["0", "1", "2", "3"]
        before = producer.get_partition_properties("0")
        assert before["is_empty"] is True
    partition = endpoint.store.partition_for_key("vm-a")
    _send(endpoint, "vm-a", [b"one", b"two"])
    with EventHubProducerClient.from_connection_string(endpoint.connection_string()) as producer:
        after = producer.get_partition_properties(partition)
    assert after["is_empty"] is False
    assert after["last_enqueued_sequence_number"] == 1


def test_partition_key_keeps_order_and_annotations_reach_the_consumer(endpoint: EventHubsEndpoint) -> None:
    """Events with one key land on one partition in order, with sequence number, offset, time, key and properties."""
    bodies = [f'{{"n":{i}}}'.encode() for i in range(20)]
    _send(endpoint, "vm-a", bodies[:10], schema_version="1")
    _send(endpoint, "vm-a", bodies[10:], schema_version="1")
    got = read_events(endpoint.connection_string(), 20)
    assert [b"".join(e.body) for _, e in got] == bodies
    assert {p for p, _ in got} == {endpoint.store.partition_for_key("vm-a")}
    assert [e.sequence_number for _, e in got] == list(range(20))
    offsets = [int(e.offset) for _, e in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == 20
    first = got[0][1]
    assert first.partition_key == b"vm-a"
    assert first.properties == {b"schema_version": b"1"}
    assert abs(first.enqueued_time - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1)


def test_receivers_start_at_offset_sequence_number_time_or_latest(endpoint: EventHubsEndpoint) -> None:
    """Starting positions select the events after (or from) the given offset, sequence number or time."""
    _send(endpoint, "vm-a", [b"a", b"b", b"c", b"d"])
    partition = endpoint.store.partition_for_key("vm-a")
    events = endpoint.store.events(partition)
    cs = endpoint.connection_string()
    by_offset = read_events(cs, 2, starting_position={partition: str(events[1].offset)}, timeout=5)
    assert [e.sequence_number for _, e in by_offset] == [2, 3]
    inclusive = read_events(
        cs, 3, starting_position={partition: 1}, starting_position_inclusive={partition: True}, timeout=5
    )
    assert [e.sequence_number for _, e in inclusive] == [1, 2, 3]
    later = dt.datetime.fromtimestamp(events[-1].enqueued_ms / 1000 + 1, dt.UTC)
    assert read_events(cs, 1, starting_position={partition: later}, timeout=2) == []
    assert read_events(cs, 1, starting_position="@latest", timeout=2) == []


def test_a_wrong_key_is_refused(endpoint: EventHubsEndpoint) -> None:
    """A SAS token signed with another key fails claims-based auth, as the service would refuse it."""
    producer = EventHubProducerClient.from_connection_string(endpoint.connection_string(key="wrong"), retry_total=0)
    with pytest.raises((AuthenticationError, EventHubError)):
        producer.get_partition_ids()
    producer.close()
    assert endpoint.store.total() == 0


def test_data_survives_a_restart_on_the_same_port(endpoint: EventHubsEndpoint) -> None:
    """Stopping and starting the endpoint keeps its port and its stored events."""
    _send(endpoint, "vm-a", [b"kept"])
    port = endpoint.port
    endpoint.stop()
    endpoint.start()
    assert endpoint.port == port
    got = read_events(endpoint.connection_string(), 1)
    assert [b"".join(e.body) for _, e in got] == [b"kept"]


def test_busy_endpoint_refuses_events(endpoint: EventHubsEndpoint) -> None:
    """While told to be busy the endpoint rejects sends (server-busy) and stores nothing."""
    endpoint.busy = True
    with pytest.raises(EventHubError):
        _send(endpoint, "vm-a", [b"x"])
    assert endpoint.store.total() == 0
    endpoint.busy = False
    _send(endpoint, "vm-a", [b"x"])
    assert endpoint.store.total() == 1
