"""Downtime a collector measures on its VM: pauses, reboots, the event each belongs to (pure), and the alive file."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.downtime import PAUSE, REBOOT, event_for, pause, reboot, snapshot_before
from collector.liveness import AliveFile, Ticker, load_alive, read_boot_id, running_since
from collector.model import Alive, Downtime, Event, Snapshot, Tracked
from tests.collector_core.core_helpers import at, event, started
from tests.tiers import examples

VM = "WestNO_0"  # event() names WestNO_0 and WestNO_1 in Resources


def _snapshot(*events: Event) -> Snapshot:
    return Snapshot(incarnation=1, events=tuple(Tracked(e, at(0)) for e in events))


@settings(max_examples=examples(200), deadline=None)
@given(st.floats(0, 600, allow_nan=False), st.floats(0.1, 10))
def test_a_gap_is_a_pause_exactly_when_it_reaches_the_threshold(gap_s: float, pause_min_s: float) -> None:
    """A pause ends now and lasts the gap; below the threshold there is none."""
    found = pause(at(1000), gap_s, pause_min_s=pause_min_s)
    if gap_s < pause_min_s:
        assert found is None
        return
    assert found is not None and found.detected_by == PAUSE and found.ended_at == at(1000)
    assert abs(found.duration_ms - gap_s * 1000) <= 1


boot_ids = st.sampled_from(["", "boot-a", "boot-b"])


@settings(max_examples=examples(200), deadline=None)
@given(boot_ids, boot_ids, st.floats(-100, 100, allow_nan=False))
def test_a_reboot_is_a_new_boot_id_after_the_last_moment_alive(last_boot: str, boot: str, offset_s: float) -> None:
    """Only a known, different boot id counts, and only when the VM came back after it was last alive."""
    last = Alive(last_boot, at(0))
    found = reboot(last, boot, at(offset_s))
    if not last_boot or not boot or last_boot == boot or at(offset_s) <= at(0):
        assert found is None
        return
    assert found == Downtime(REBOOT, at(0), at(offset_s))
    assert reboot(None, boot, at(offset_s)) is None


kinds = st.sampled_from(["Freeze", "Reboot", "Redeploy"])
statuses = st.sampled_from(["Scheduled", "Started", None])  # None: absent from that snapshot
mine = st.booleans()


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(kinds, statuses, statuses, mine), max_size=5), st.sampled_from([PAUSE, REBOOT]), st.randoms())
def test_the_event_of_a_downtime_was_started_across_it_and_names_this_vm(
    specs: list[tuple[str, str | None, str | None, bool]], how: str, rnd: object
) -> None:
    """Whatever the snapshots hold and in whatever order: the chosen event names this VM and was Started before
    or after the downtime, or gone after it; an event Scheduled on both sides, or of other VMs, never is."""
    before: list[Event] = []
    after: list[Event] = []
    eligible = set()
    for i, (kind, first, then, ours) in enumerate(specs):
        resources = (VM,) if ours else ("Other_9",)
        e = event(f"E{i}", event_type=kind, resources=resources)
        if first is not None:
            before.append(started(e) if first == "Started" else e)
        if then is not None:
            after.append(started(e) if then == "Started" else e)
        was_started = "Started" in (first, then) or (first is not None and then is None)
        if ours and was_started:
            eligible.add(e.event_id)
    downtime = Downtime(how, at(10), at(15))
    chosen = event_for(downtime, _snapshot(*before), _snapshot(*after), VM)
    if not eligible:
        assert chosen is None
        return
    assert chosen is not None and chosen.event_id in eligible
    rnd.shuffle(before)  # type: ignore[attr-defined]
    rnd.shuffle(after)  # type: ignore[attr-defined]
    again = event_for(downtime, _snapshot(*before), _snapshot(*after), VM)
    assert again is not None and again.event_id == chosen.event_id  # the document order does not matter


def test_an_event_of_the_downtimes_kind_wins() -> None:
    """A pause belongs to the Freeze Started then, not to a Reboot Started too; a reboot the other way round."""
    freeze = started(event("F", event_type="Freeze", resources=(VM,)))
    boot = started(event("R", event_type="Reboot", resources=(VM,)))
    both = _snapshot(freeze, boot)
    assert event_for(Downtime(PAUSE, at(1), at(5)), both, both, VM) == freeze
    assert event_for(Downtime(REBOOT, at(1), at(5)), both, both, VM) == boot


def test_a_freeze_that_started_and_ended_during_the_pause_still_owns_it() -> None:
    """Scheduled before the pause, gone after it: it ran while the VM was paused."""
    freeze = event("F", resources=(VM,))
    assert event_for(Downtime(PAUSE, at(1), at(5)), _snapshot(freeze), _snapshot(), VM) == freeze
    assert event_for(Downtime(PAUSE, at(1), at(5)), _snapshot(freeze), _snapshot(freeze), VM) is None


def test_the_snapshot_before_a_downtime_is_the_last_committed_by_then() -> None:
    first, second = _snapshot(event("A")), _snapshot(event("B"))
    history = [(at(0), first), (at(10), second)]
    assert snapshot_before(history, at(5)) is first
    assert snapshot_before(history, at(10)) is second
    assert snapshot_before(history, at(-1)) is None


def test_the_alive_file_keeps_the_boot_and_the_last_moment(tmp_path: Path) -> None:
    """Overwritten in place at every beat; read back after a restart; unreadable means unknown, never a crash."""
    alive = AliveFile(tmp_path, "boot-a")
    alive.beat(at(1))
    alive.beat(at(2))
    alive.close()
    assert load_alive(tmp_path) == Alive("boot-a", at(2))
    (tmp_path / "alive").write_bytes(b"\xff\xfe garbage")
    assert load_alive(tmp_path) is None
    assert load_alive(tmp_path / "missing") is None


def test_the_boot_id_is_read_from_its_file(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    path.write_text("6c6e1a4e-0d0b-4f57-9a55-4f7e3c7b2f10\n")
    assert read_boot_id(path) == "6c6e1a4e-0d0b-4f57-9a55-4f7e3c7b2f10"
    assert read_boot_id(tmp_path / "none") == ""  # reboots are then not measured


def test_running_since_never_precedes_the_last_moment_alive() -> None:
    """In a process older than the last beat (a collector restarted in-process), the VM is back now."""
    assert running_since(Alive("b", at(0)), at(100)) <= at(100)
    assert running_since(Alive("b", at(10**9)), at(100)) == at(100)


def test_the_ticker_reports_a_jump_of_its_clock_as_a_pause() -> None:
    """A tick that finds its counting clock 6 s on (the process was stopped) reports a pause of 6 s."""
    readings = iter([0.0, 0.5, 1.0, 7.0])
    seen: list[Downtime] = []
    done = threading.Event()

    def counting() -> float:
        try:
            return next(readings)
        except StopIteration:
            done.set()
            return 7.0

    ticker = Ticker(period_s=0.01, pause_min_s=1.5, clock=lambda: at(100), counting=counting, on_pause=seen.append)
    thread = threading.Thread(target=ticker.run, args=(done,))
    thread.start()
    thread.join(10)
    assert [(d.detected_by, d.duration_ms, d.ended_at) for d in seen] == [(PAUSE, 6000, at(100))]
    assert seen[0].began_at == at(100) - timedelta(seconds=6)


def test_the_tickers_last_tick_at_the_stop_reports_a_pause_the_stop_came_at_the_end_of() -> None:
    """A stop that wakes the ticker as the VM runs again (its wait for the next tick would have timed out) still
    finds the pause: the ticker ticks once more after the stop."""
    readings = iter([0.0, 6.0])
    seen: list[Downtime] = []
    stop = threading.Event()
    stop.set()
    ticker = Ticker(
        period_s=3600.0, pause_min_s=1.5, clock=lambda: at(100), counting=lambda: next(readings), on_pause=seen.append
    )
    ticker.run(stop)
    assert [(d.detected_by, d.duration_ms, d.ended_at) for d in seen] == [(PAUSE, 6000, at(100))]
