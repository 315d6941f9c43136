"""The sink never blocks an outbox: an oversize record is dead-lettered (logged, counted, removed), and any
failure of the SDK reaches the shipper as SinkError, never as another exception that would end its thread."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from collector.outbox import Outbox
from collector.settings import load_settings
from collector.ship import Shipper, SinkError, make_sink
from collector.ship_eventhubs import DROP_OVERSIZE, EventHubsSink, outbox_drop_counter
from ingest.source_eventhubs import body_bytes
from sevents.retry import Backoff
from tests.eventhubs.amqp_endpoint import EventHubsEndpoint
from tests.eventhubs.helpers import read_events
from tests.helpers import numbered_transition

OVER_ONE_MB = 1_200_000


def _commit_with_one_giant(outbox: Outbox) -> list[int]:
    """Rows n=0..4 of one VM, the middle one over 1 MB."""
    return outbox.commit(
        [numbered_transition("vm-dl", n, OVER_ONE_MB if n == 2 else 0) for n in range(5)], snapshot=None
    )


def test_an_oversize_record_is_counted_logged_and_removed_without_blocking_the_rest(
    endpoint: EventHubsEndpoint, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The shipper drains the outbox: four records arrive in order, the giant one is one counted, logged drop."""
    caplog.set_level(logging.INFO)
    path = tmp_path / "outbox.sqlite"
    with Outbox(path) as outbox:
        seqs = _commit_with_one_giant(outbox)
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), on_drop=outbox_drop_counter(path))
        assert Shipper(outbox, sink, backoff=Backoff(initial=0.05, cap=0.1)).flush(30)
        sink.close()
        assert outbox.depth() == 0
        assert outbox.drops() == {DROP_OVERSIZE: 1}
    assert sink.dropped == 1
    got = read_events(endpoint.connection_string(), 4)
    assert [json.loads(body_bytes(e))["n"] for _, e in got] == [0, 1, 3, 4]
    assert endpoint.store.total() == 4
    logged = [r for r in caplog.records if r.levelno == logging.ERROR and getattr(r, "seq", None) == seqs[2]]
    assert len(logged) == 1
    assert getattr(logged[0], "reason", None) == DROP_OVERSIZE
    assert getattr(logged[0], "bytes", 0) > OVER_ONE_MB
    assert "x" * 1000 not in logged[0].getMessage() + str(logged[0].__dict__)


def test_a_failed_send_counts_no_drop_and_keeps_every_row(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """With the hub down nothing is dropped or removed: the giant record is dead-lettered only with a send."""
    path = tmp_path / "outbox.sqlite"
    with Outbox(path) as outbox:
        _commit_with_one_giant(outbox)
        endpoint.stop()
        sink = EventHubsSink.from_connection_string(
            endpoint.connection_string(), send_timeout=3, on_drop=outbox_drop_counter(path)
        )
        with pytest.raises(SinkError):
            sink.send(outbox.pending(10))
        sink.close()
        assert outbox.drops() == {}
        assert outbox.depth() == 5


def test_a_drop_that_cannot_be_counted_is_not_a_drop(endpoint: EventHubsEndpoint, tmp_path: Path) -> None:
    """If counting the drop fails, send raises SinkError and the shipper keeps every row for the next try."""

    def broken_counter(reason: str, count: int) -> None:
        raise OSError("disk gone")

    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        _commit_with_one_giant(outbox)
        sink = EventHubsSink.from_connection_string(endpoint.connection_string(), on_drop=broken_counter)
        with pytest.raises(SinkError, match="dead-lettered"):
            sink.send(outbox.pending(10))
        assert not Shipper(outbox, sink, backoff=Backoff(initial=0.05, cap=0.1)).flush(0.5)
        sink.close()
        assert outbox.depth() == 5
    assert sink.dropped == 0


def test_the_collector_settings_sink_counts_drops_in_its_own_outbox(
    endpoint: EventHubsEndpoint, tmp_path: Path
) -> None:
    """sink=eventhubs built from settings dead-letters into the outbox under the state directory."""
    settings = load_settings(
        env={
            "SEVENTS_SINK": "eventhubs",
            "SEVENTS_STATE_DIR": str(tmp_path / "state"),
            "SEVENTS_EVENTHUBS_CONNECTION_STRING": endpoint.connection_string(),
        }
    )
    with Outbox(settings.outbox_path) as outbox:
        _commit_with_one_giant(outbox)
        sink = make_sink(settings)
        assert sink is not None
        assert Shipper(outbox, sink).flush(30)
        sink.close()
        assert outbox.depth() == 0
        assert outbox.drops() == {DROP_OVERSIZE: 1}
    assert endpoint.store.total() == 4


def test_a_malformed_connection_string_is_a_sink_error_that_does_not_show_the_key(tmp_path: Path) -> None:
    """The SDK's ValueError for a bad connection string becomes SinkError; the shipper retries, nothing is lost."""
    key = "n0t-a-real-key-but-secret"
    sink = EventHubsSink.from_connection_string(f"SharedAccessKey={key};Endpoint", send_timeout=2)
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        outbox.commit([numbered_transition("vm-dl", 0)], snapshot=None)
        with pytest.raises(SinkError) as raised:
            sink.send(outbox.pending(10))
        assert key not in str(raised.value)
        assert not Shipper(outbox, sink, backoff=Backoff(initial=0.05, cap=0.1)).flush(0.3)
        assert outbox.depth() == 1
    sink.close()
