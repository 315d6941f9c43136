"""The shipper: the pure ship-now decision, removal only after the sink accepted, and shutdown reporting."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from collector.outbox import Outbox
from collector.ship import Shipper, ship_now
from sevents.retry import Backoff
from tests.collector_edges.test_edges_agent import ScriptedSink
from tests.helpers import wait_for

QUICK = Backoff(initial=0.01, cap=0.02)


def fill(outbox: Outbox, n: int) -> None:
    outbox.commit([{"record_type": "transition", "record_id": str(i)} for i in range(n)], None)


@given(st.integers(0, 2000), st.floats(0, 10), st.integers(1, 1000), st.floats(0, 5), st.booleans())
def test_ship_now_never_ships_nothing(pending: int, waited: float, batch: int, max_wait: float, draining: bool) -> None:
    """Nothing pending is never shipped; a full batch or a drain always is."""
    decision = ship_now(pending, waited, batch=batch, max_wait_s=max_wait, draining=draining)
    if pending == 0:
        assert not decision
    elif pending >= batch or draining:
        assert decision


def test_partial_batch_waits_until_max_wait() -> None:
    """A partial batch waits for max_wait_s, then goes."""
    assert not ship_now(3, 0.2, batch=500, max_wait_s=1.0, draining=False)
    assert ship_now(3, 1.0, batch=500, max_wait_s=1.0, draining=False)


def test_rows_removed_only_after_acceptance(tmp_path: Path) -> None:
    """While the sink refuses, rows stay; once it accepts, each row was sent once and removed."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        fill(outbox, 25)
        sink = ScriptedSink(failures=3)
        shipper = Shipper(outbox, sink, batch=10, backoff=QUICK)
        assert shipper.flush(timeout=5.0)
        assert [r.seq for r in sink.received] == list(range(1, 26))
        assert outbox.depth() == 0
        assert shipper.failures == 3


def test_shutdown_reports_what_is_left(tmp_path: Path) -> None:
    """A sink that never accepts leaves every row in the outbox, and shutdown says how many."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        fill(outbox, 7)
        sink = ScriptedSink(failures=10**6)
        shipper = Shipper(outbox, sink, backoff=QUICK)
        assert shipper.shutdown(timeout=0.2) == 7
        assert sink.closed
        assert outbox.depth() == 7


def test_run_ships_and_stops_promptly(tmp_path: Path) -> None:
    """run(stop) ships committed rows in the background and returns soon after stop is set."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        sink = ScriptedSink()
        shipper = Shipper(outbox, sink, max_wait_s=0.05, idle_s=0.05, backoff=QUICK)
        stop = threading.Event()
        worker = threading.Thread(target=shipper.run, args=(stop,))
        worker.start()
        fill(outbox, 5)
        shipper.wake()
        wait_for(lambda: outbox.depth() == 0, 30, what="the outbox to drain", interval=0.01)
        stop.set()
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert len(sink.received) == 5 and outbox.depth() == 0


def test_a_long_sink_outage_does_not_kill_the_shipper(tmp_path: Path) -> None:
    """Past a thousand refused batches (hours of outage at the real cap) the backoff still answers and rows ship."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        fill(outbox, 3)
        sink = ScriptedSink(failures=1100)
        shipper = Shipper(outbox, sink, backoff=Backoff(initial=0.0, cap=0.0))
        assert shipper.flush(timeout=60.0)
        assert [r.seq for r in sink.received] == [1, 2, 3]
        assert shipper.failures == 1100


def test_shutdown_without_time_sends_nothing(tmp_path: Path) -> None:
    """shutdown(0) (the agent's close after run() already drained) only closes the sink: no send past the drain."""
    with Outbox(tmp_path / "o.sqlite") as outbox:
        fill(outbox, 4)
        sink = ScriptedSink()
        shipper = Shipper(outbox, sink, backoff=QUICK)
        assert shipper.shutdown(timeout=0.0) == 4
        assert sink.received == [] and sink.closed
