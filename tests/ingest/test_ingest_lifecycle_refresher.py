"""When the ingest computes the events' lifecycles (``ingest.lifecycle_refresher``): at once after a quiet spell,
together while batches keep coming, and never lost: what is put off is marked with its rows, and a sweep finds it."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.lifecycle_refresher import Refresher
from tests.helpers import FakeClock, wait_for
from tests.tiers import examples


class Store:
    """What the refresher calls, kept in memory: refreshed calls, the marks (which ClickHouse writes with the rows:
    ``batch`` marks, then tells the refresher), and each event's last refresh."""

    def __init__(self, clock: FakeClock, *, cost: float = 0.0) -> None:
        self.clock = clock
        self.cost = cost  # seconds a refresh takes on the fake clock
        self.refreshed: list[list[str]] = []
        self.marked: dict[str, float] = {}
        self.computed: dict[str, float] = {}
        self.fail = False
        self.lock = threading.Lock()

    def refresh(self, ids: list[str]) -> None:
        if self.fail:
            raise ConnectionError("ClickHouse is away")
        self.clock.advance(self.cost)
        with self.lock:
            self.refreshed.append(list(ids))
            for i in ids:
                self.computed[i] = self.clock.elapsed

    def batch(self, refresher: Refresher, ids: list[str]) -> None:
        """A batch naming ``ids`` stored (so marked), then handed to the refresher as the writer does."""
        for i in filter(None, ids):
            self.marked[i] = self.clock.elapsed
        refresher.touched(ids)

    def stale(self) -> list[str]:
        return sorted(i for i, at in self.marked.items() if self.computed.get(i, -1.0) < at)

    def refresher(self, **options: float) -> Refresher:
        return Refresher(self.refresh, self.stale, clock=self.clock.monotonic, **options)


def test_every_zero_refreshes_each_batch_at_once() -> None:
    clock = FakeClock()
    store = Store(clock)
    refresher = store.refresher(every=0)
    store.batch(refresher, ["E-2", "E-1", ""])
    store.batch(refresher, ["E-3"])
    assert store.refreshed == [["E-1", "E-2"], ["E-3"]]
    assert store.stale() == []


def test_batches_within_the_gap_are_put_off_then_refreshed_together() -> None:
    """The first batch after a quiet spell is refreshed at once; the next ones, within a second, are put off (their
    marks stale) and refreshed with the first batch after the second has passed."""
    clock = FakeClock()
    store = Store(clock)
    refresher = store.refresher(every=1.0, share=0.05)
    store.batch(refresher, ["E-1"])
    clock.advance(0.3)
    store.batch(refresher, ["E-2"])
    clock.advance(0.3)
    store.batch(refresher, ["E-3"])
    assert store.refreshed == [["E-1"]]
    assert store.stale() == ["E-2", "E-3"]
    clock.advance(0.5)
    store.batch(refresher, ["E-4"])
    assert store.refreshed == [["E-1"], ["E-2", "E-3", "E-4"]]
    assert store.stale() == []
    refresher.close()


def test_a_costly_refresh_waits_longer_for_the_next() -> None:
    """A refresh that took 0.2 s is followed by at least 4 s without one at a 5% share."""
    clock = FakeClock()
    store = Store(clock, cost=0.2)
    refresher = store.refresher(every=1.0, share=0.05)
    store.batch(refresher, ["E-1"])
    clock.advance(3.0)
    store.batch(refresher, ["E-2"])
    assert store.refreshed == [["E-1"]]
    clock.advance(1.0)
    store.batch(refresher, ["E-3"])
    assert store.refreshed == [["E-1"], ["E-2", "E-3"]]
    refresher.close()


def test_a_refresh_is_never_put_off_longer_than_the_longest() -> None:
    clock = FakeClock()
    store = Store(clock, cost=5.0)
    refresher = store.refresher(every=1.0, share=0.02, longest=10.0)  # 5 s at 2% would wait 250 s
    store.batch(refresher, ["E-1"])  # began at 0, took 5 s
    clock.advance(4.0)
    store.batch(refresher, ["E-2"])
    assert store.refreshed == [["E-1"]]
    clock.advance(1.0)
    store.batch(refresher, ["E-3"])
    assert store.refreshed == [["E-1"], ["E-2", "E-3"]]
    refresher.close()


def test_what_is_put_off_is_refreshed_by_the_timer_without_another_batch() -> None:
    clock = FakeClock()
    store = Store(clock)
    refresher = store.refresher(every=0.05)
    store.batch(refresher, ["E-1"])
    store.batch(refresher, ["E-2"])  # the fake clock stands still: put off for every (real) 0.05 s
    wait_for(lambda: ["E-2"] in store.refreshed, 30, what="the timer's refresh")
    assert store.stale() == []
    refresher.close()


def test_close_refreshes_what_is_put_off_and_a_failure_keeps_it_stale() -> None:
    clock = FakeClock()
    store = Store(clock)
    refresher = store.refresher(every=60.0)
    store.batch(refresher, ["E-1"])
    store.batch(refresher, ["E-2"])
    store.fail = True
    refresher.close()  # logged, not raised: E-2's mark keeps it for the next sweep
    assert store.stale() == ["E-2"]
    store.fail = False
    refresher.close()
    assert store.stale() == []


def test_close_waits_for_a_refresh_the_timer_began() -> None:
    """A timer's refresh in flight when the ingest stops ends before ``close`` returns: the client is closed next,
    and a query still running then would meet a closed engine."""
    clock = FakeClock()
    store = Store(clock)
    began, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow_refresh(ids: list[str]) -> None:
        if ids == ["E-2"]:
            began.set()
            release.wait(30)
            order.append("timer's refresh ended")
        store.refresh(ids)

    refresher = Refresher(slow_refresh, store.stale, clock=clock.monotonic, every=0.05)
    store.batch(refresher, ["E-1"])
    store.batch(refresher, ["E-2"])  # put off: the timer refreshes it
    assert began.wait(30), "the timer's refresh did not begin"
    closing = threading.Thread(target=lambda: (refresher.close(), order.append("close returned")))
    closing.start()
    closing.join(0.2)
    assert closing.is_alive(), "close returned while the timer's refresh was still running"
    release.set()
    closing.join(30)
    assert order == ["timer's refresh ended", "close returned"]
    assert store.stale() == []


def test_the_first_batch_sweeps_what_an_earlier_process_put_off() -> None:
    """A worker died with refreshes put off: the next writer's first batch refreshes them, heartbeats-only or not."""
    clock = FakeClock()
    store = Store(clock)
    died = store.refresher(every=60.0)
    store.batch(died, ["E-1"])
    store.batch(died, ["E-2", "E-3"])  # put off, then the process dies (no close)
    assert store.stale() == ["E-2", "E-3"]
    successor = store.refresher(every=60.0)
    store.batch(successor, [])
    assert store.refreshed[-1] == ["E-2", "E-3"]
    assert store.stale() == []
    refreshed = len(store.refreshed)
    store.batch(successor, [])  # the next sweep is a minute away
    assert len(store.refreshed) == refreshed


def test_a_failed_refresh_raises_for_the_batch_and_is_tried_again() -> None:
    """The batch is then not acknowledged; its events are refreshed when the store is back."""
    clock = FakeClock()
    store = Store(clock)
    refresher = store.refresher(every=1.0)
    store.fail = True
    try:
        store.batch(refresher, ["E-1"])
    except ConnectionError:
        pass
    else:
        raise AssertionError("the refresh's failure must reach the batch")
    store.fail = False
    store.batch(refresher, ["E-2"])
    assert store.refreshed == [["E-1", "E-2"]]


steps = st.lists(
    st.tuples(st.lists(st.sampled_from(["E-1", "E-2", "E-3", "E-4", ""]), max_size=3), st.floats(0, 2)),
    max_size=30,
)


@settings(max_examples=examples(200), deadline=None)
@given(steps=steps, cost=st.sampled_from([0.0, 0.02, 0.3]), every=st.sampled_from([0.0, 0.5, 1.0, 60.0]))
def test_no_touched_event_is_left_without_a_refresh_or_a_mark(
    steps: list[tuple[list[str], float]], cost: float, every: float
) -> None:
    """Whatever the timing: after each batch, every event it touched is refreshed since or stale (so a sweep would
    find it); after close, every touched event is refreshed after its last touch."""
    clock = FakeClock()
    store = Store(clock, cost=cost)
    refresher = store.refresher(every=every, sweep_every=1e9)
    last_touch: dict[str, float] = {}
    for ids, pause in steps:
        clock.advance(pause)
        store.batch(refresher, ids)
        for i in filter(None, ids):
            last_touch[i] = clock.elapsed
        for i, touched_at in last_touch.items():
            assert store.computed.get(i, -1.0) >= touched_at - cost or i in store.stale(), i
    refresher.close()
    assert all(store.computed.get(i, -1.0) >= at - cost for i, at in last_touch.items())
    assert store.stale() == []
