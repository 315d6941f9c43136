"""EventHubsSink with the real outbox and shipper, against the local endpoint over the real SDK."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from azure.core.credentials import AccessToken

from collector.outbox import Outbox, OutboxRow
from collector.ship import Shipper, SinkError
from collector.ship_eventhubs import EventHubsSink, partition_key, runs_by_key
from sevents.retry import Backoff
from sevents.tracing import parse_traceparent
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.helpers import read_events
from tests.helpers import eventually, numbered_transition


def _fill(outbox: Outbox, vm_id: str, count: int, pad: int = 0) -> list[int]:
    return outbox.commit([numbered_transition(vm_id, n, pad) for n in range(count)], snapshot=None)


def test_rows_arrive_in_order_on_the_vm_partition_with_properties(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """Every row is one event on the VM id's partition, in seq order, with schema, type, id and traceparent."""
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        seqs = _fill(outbox, "vm-1", 30)
        sink = EventHubsSink.from_connection_string(endpoint.connection_string())
        assert Shipper(outbox, sink, batch=7).flush(30)
        sink.close()
        assert outbox.depth() == 0
    got = read_events(endpoint.connection_string(), 30)
    assert {p for p, _ in got} == {endpoint.store.partition_for_key("vm-1")}
    records = [json.loads(b"".join(e.body)) for _, e in got]
    assert [r["seq"] for r in records] == seqs
    event = got[0][1]
    assert event.content_type == "application/json"
    assert event.properties[b"schema_version"] == b"1"
    assert event.properties[b"record_type"] == b"transition"
    assert event.properties[b"record_id"].decode() == records[0]["record_id"]
    context = parse_traceparent(event.properties[b"traceparent"])
    assert context is not None and f"{context.trace_id:032x}" == records[0]["record_id"]


def test_batches_fill_up_to_the_one_megabyte_limit(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """Rows totalling about 2.4 MB go out as three batches, none over 1 MB, and all arrive."""
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        _fill(outbox, "vm-big", 8, pad=300_000)
        sink = EventHubsSink.from_connection_string(endpoint.connection_string())
        sink.send(outbox.pending(100))
        sink.close()
    assert sink.batches_sent == 3
    assert sink.events_sent == 8
    assert endpoint.store.total() == 8


def test_unreachable_hub_raises_sink_error_and_keeps_rows(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """With the endpoint down, send raises SinkError and the shipper leaves every row in the outbox."""
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        _fill(outbox, "vm-1", 5)
        endpoint.stop()
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=3)
        with pytest.raises(SinkError):
            sink.send(outbox.pending(10))
        assert not Shipper(outbox, sink, backoff=Backoff(initial=0.05, cap=0.1)).flush(1.0)
        assert outbox.depth() == 5
        sink.close()


def test_outage_then_recovery_drains_in_order(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """The shipper backs off while the hub is down, the outbox grows, and it drains in order once it is back."""
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=3)
        shipper = Shipper(outbox, sink, batch=50, max_wait_s=0.05, backoff=Backoff(initial=0.1, cap=0.5))
        stop = threading.Event()
        worker = threading.Thread(target=shipper.run, args=(stop,), daemon=True)
        worker.start()
        outbox.commit([numbered_transition("vm-1", n) for n in range(10)], None)
        assert eventually(lambda: outbox.depth() == 0, 20)
        endpoint.stop()
        outbox.commit([numbered_transition("vm-1", n) for n in range(10, 40)], None)
        assert eventually(lambda: shipper.failures >= 2, 30)
        assert outbox.depth() == 30
        endpoint.start()
        assert eventually(lambda: outbox.depth() == 0, 60)
        stop.set()
        worker.join(10)
        assert shipper.shutdown(5) == 0
    got = read_events(endpoint.connection_string(), 40)
    numbers = [json.loads(b"".join(e.body))["n"] for _, e in got]
    deduped = list(dict.fromkeys(numbers))
    assert deduped == list(range(40))


def test_throttling_is_retried_until_accepted(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """A busy hub (server-busy) makes sends fail; once it relents, the shipper delivers everything."""
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        _fill(outbox, "vm-1", 3)
        endpoint.busy = True
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), send_timeout=3)
        with pytest.raises(SinkError):
            sink.send(outbox.pending(10))
        timer = threading.Timer(1.0, lambda: setattr(endpoint, "busy", False))
        timer.start()
        assert Shipper(outbox, sink, backoff=Backoff(initial=0.2, cap=0.5)).flush(30)
        sink.close()
    assert endpoint.store.total() == 3


def test_partition_key_runs_keep_outbox_order() -> None:
    """Rows are grouped into runs of one VM id without reordering; records without a VM id share a key."""
    rows = [
        OutboxRow(1, "heartbeat", b'{"vm_id": ""}'),
        OutboxRow(2, "transition", b'{"vm_id": "a"}'),
        OutboxRow(3, "transition", b'{"vm_id": "a"}'),
        OutboxRow(4, "transition", b"not json"),
    ]
    assert [(key, [r.seq for r in run]) for key, run in runs_by_key(rows)] == [
        ("unknown", [1]),
        ("a", [2, 3]),
        ("unknown", [4]),
    ]
    assert partition_key(b"[1]") == "unknown"


class StaticToken:
    """A TokenCredential of our own: what managed identity hands the SDK, without a directory to ask."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
        self.scopes.extend(scopes)
        return AccessToken("eyJ0eXAiOiJKV1QifQ.e30.local", int(time.time()) + 3600)


def test_token_credential_path_authenticates_with_a_bearer_token(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """The managed-identity constructor (namespace + credential) puts a JWT on $cbs for the Event Hubs scope."""
    credential = StaticToken()
    sink = EventHubsSink.from_namespace(f"127.0.0.1:{endpoint.port}", "hub", credential=credential, use_tls=False)
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        _fill(outbox, "vm-mi", 3)
        sink.send(outbox.pending(10))
    sink.close()
    assert endpoint.store.total() == 3
    assert credential.scopes  # the SDK asks for its Event Hubs scope (spelled with a double slash in 5.15)
    assert all(s.startswith("https://eventhubs.azure.net/") and s.endswith(".default") for s in credential.scopes)
