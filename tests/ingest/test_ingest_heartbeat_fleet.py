"""The heartbeat benchmark's fleet (benchmarks/heartbeat_fleet.py): synthetic's records, at the issue's rates."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.heartbeat_fleet import EVENT_EVERY_S, MINUTE_MS, Fleet, same_as_synthetic
from tests.tiers import examples

START = datetime(2026, 11, 26, 18, 0, tzinfo=UTC)


@settings(max_examples=examples(50), deadline=None)
@given(vms=st.integers(1, 200_000), data=st.data())
def test_each_heartbeat_is_the_one_synthetic_builds(vms: int, data: st.DataObject) -> None:
    """Whatever the fleet's size, a VM's heartbeat of any minute is encode(synthetic.heartbeat(...)) byte for byte."""
    vm = data.draw(st.integers(0, vms - 1))
    minute = data.draw(st.integers(0, 3 * 1440))
    assert same_as_synthetic(Fleet(vms, START), [(vm, minute)])


def test_a_minute_holds_one_heartbeat_per_vm_spread_over_it_in_time_order() -> None:
    """Every VM heartbeats once a minute under its own heartbeat_id, whatever the windows the minute is read in."""
    fleet = Fleet(1_000, START)
    end = 2 * MINUTE_MS
    made = [item for at in range(0, end, 7_000) for item in fleet.records_between(at, min(end, at + 7_000))]
    times = [at for at, _ in made]
    assert times == sorted(times)
    beats = [orjson.loads(p) for _, p in made if b'"record_type":"heartbeat"' in p]
    assert fleet.made["heartbeats"] == len(beats) == 2 * 1_000
    assert len({b["heartbeat_id"] for b in beats}) == len(beats)
    for minute in (0, 1):
        of_minute = [b for b in beats if b["seq"] == minute + 1]
        assert sorted(int(b["vm_id"][-12:]) for b in of_minute) == list(range(1_000))
        assert len({b["observed_at"] for b in of_minute}) == 1_000  # spread: one VM a 60 ms


def test_100000_vms_have_the_issue_s_events_and_transitions() -> None:
    """An event of 91 VMs every three minutes (480 a day; the issue: 500), each VM's lifecycle three transitions:
    5,460 an hour once under way (131,040 a day; the issue: 137,000), each under its own transition_id."""
    fleet = Fleet(100_000, START)
    hour = 60 * MINUTE_MS
    changes = [orjson.loads(p) for _, p in fleet.transitions_between(hour, 2 * hour)]
    assert {c["record_type"] for c in changes} == {"transition"}
    assert fleet.vms_per_event == 91 and 24 * 3600 // EVENT_EVERY_S == 480
    assert len(changes) == 3 * 91 * 3600 // EVENT_EVERY_S == 5_460
    assert len({c["transition_id"] for c in changes}) == len(changes)
    assert {c["kind"] for c in changes} == {"appeared", "status_changed", "disappeared"}
