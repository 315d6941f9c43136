"""The verifier's pure comparisons: every figure against the simulator's own moments, within a stated tolerance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from demo.compare import (
    Check,
    approval_checks,
    compare,
    fault_domain_means,
    fault_domain_truth,
    near,
)
from simulator.state import DownSpan
from tests.tiers import examples

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLL_S = 1.0
TOLERANCE_S = POLL_S + 0.5  # what the demo passes: one poll + 0.5 s
DOWN_TOLERANCE_S = 1.0
GROUPS = {"web-0": "web", "web-1": "web", "web-2": "web"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def truth_row(vm: str, fault_domain: int, **changes: Any) -> dict[str, Any]:
    """The simulator's truth for a Reboot of web-0 and web-1 that web-2 sees too: visible at 0 s, approved at 2 s,
    Started at 2 s, gone at 20 s; its affected VMs down 5 s from Started."""
    row = {
        "event_id": "E-1",
        "label": "reboot",
        "vm_name": vm,
        "fault_domain": fault_domain,
        "fault_set": GROUPS[vm],
        "event_type": "Reboot",
        "event_source": "Platform",
        "description": "",
        "duration_s": -1,
        "resources": ["web-0", "web-1"],
        "first_visible_at": at(0),
        "not_before": at(900),
        "approved_at": at(2),
        "vm_approved_at": at(2) if vm == "web-0" else None,
        "started_at": at(2),
        "ended_at": at(20),
        "outcome": "completed",
        "down_s": 5.0 if vm in ("web-0", "web-1") else None,
    }
    return {**row, **changes}


def truth(**changes: Any) -> list[dict[str, Any]]:
    return [truth_row(vm, i, **changes) for i, vm in enumerate(GROUPS)]


def recorded(**changes: Any) -> dict[str, Any]:
    """The events row the pipeline stores for it, each moment seen at a poll 0.4 s after the truth."""
    row = {
        "event_id": "E-1",
        "event_type": "Reboot",
        "event_source": "Platform",
        "description": None,
        "duration_s": -1,
        "outcome": "completed",
        "affected_vms": ["web-0", "web-1"],
        "affected_vm_count": 2,
        "fault_domains": [0, 1],
        "fault_domain_labels": ["web / FD 0", "web / FD 1"],
        "first_seen_at": at(0.4),
        "not_before_first": at(900),
        "approved_at": at(2.4),
        "started_at": at(2.4),
        "ended_at": at(20.4),
        "notice_s": 2.0,
        "approval_latency_s": 2.0,
        "started_to_gone_s": 18.0,
        "started_at_source": "seen",
        "ended_at_source": "seen",
    }
    return {**row, **changes}


def bad_fields(checks: list[Check]) -> set[str]:
    return {c.field for c in checks if not c.ok}


def test_every_value_within_tolerance_passes() -> None:
    """Each moment a poll late, each duration off by less than a poll: nothing fails."""
    assert not bad_fields(compare([recorded()], truth(), TOLERANCE_S, groups=GROUPS))


def test_a_start_late_by_a_downtime_fails_even_where_an_answers_window_would_pass() -> None:
    """The VM was down 5 s from Started, its requests held: the first answer after Started came 5 s late, so a
    window built from answers would take a start seen 5 s late. Against the simulator's moment it is 5 s late."""
    late = recorded(started_at=at(7.4), approved_at=at(7.4), notice_s=7.0, approval_latency_s=7.0)
    held = {"web-0": [at(s) for s in (-1, 0.5, 1.5, 7.0, 8.0)]}  # nothing answered while it was down
    down = {"web-0": [(at(2.0), at(7.0))]}  # so the answer at 7.0 was held: it allows no lateness
    checks = compare([late], truth(), TOLERANCE_S, served=held, groups=GROUPS, down=down)
    assert bad_fields(checks) == {"started_at", "approved_at", "notice_s", "approval_latency_s"}
    started = next(c for c in checks if c.field == "started_at")
    assert started.delta_s == 5.4


def test_a_wrong_value_of_each_printed_column_fails() -> None:
    """Outcome, the VMs count, the FD labels and the announced duration are compared exactly."""
    wrong = recorded(outcome="cancelled", affected_vm_count=3, fault_domain_labels=["web / FD 0"], duration_s=5)
    assert bad_fields(compare([wrong], truth(), TOLERANCE_S, groups=GROUPS)) == {
        "outcome",
        "affected_vm_count",
        "fault_domain_labels",
        "duration_s",
    }


def test_an_event_printed_but_not_in_the_truth_fails() -> None:
    ghost = recorded(event_id="E-ghost")
    checks = compare([recorded(), ghost], truth(), TOLERANCE_S, groups=GROUPS)
    assert [(c.event_id, c.field) for c in checks if not c.ok] == [("E-ghost", "event_id")]


def test_an_event_in_the_truth_never_recorded_fails() -> None:
    checks = compare([], truth(), TOLERANCE_S, groups=GROUPS)
    assert {"outcome", "first_seen_at", "started_at", "notice_s"} <= bad_fields(checks)


def test_an_end_after_the_vms_downtime_is_a_bound() -> None:
    """Gone while its VM was down: the first poll after the downtime says only "gone by then". Later than the
    truth passes; earlier than the truth (less the tolerance) does not; a sighting that late fails."""
    bound = recorded(ended_at=at(26), started_to_gone_s=23.6, ended_at_source="after_downtime")
    assert not bad_fields(compare([bound], truth(), TOLERANCE_S))
    early = recorded(ended_at=at(17), started_to_gone_s=14.6, ended_at_source="after_downtime")
    assert bad_fields(compare([early], truth(), TOLERANCE_S)) == {"ended_at", "started_to_gone_s"}
    seen_late = recorded(ended_at=at(26), started_to_gone_s=23.6, ended_at_source="seen")
    assert bad_fields(compare([seen_late], truth(), TOLERANCE_S)) == {"ended_at", "started_to_gone_s"}


def test_a_start_from_a_measured_downtime_is_held_to_the_tolerance() -> None:
    """The VM goes down as its event starts: a start taken from the downtime is as tight as a poll."""
    from_downtime = recorded(started_at=at(1.8), started_at_source="downtime", notice_s=1.4)
    assert not bad_fields(compare([from_downtime], truth(), TOLERANCE_S))
    loose = recorded(started_at=at(-0.5), started_at_source="downtime", notice_s=-0.9)
    assert bad_fields(compare([loose], truth(), TOLERANCE_S)) == {"started_at", "notice_s"}


def test_end_not_seen_is_right_only_when_the_observers_all_stopped_while_it_was_scheduled() -> None:
    """Every collector stopped at 10 s while the event was Scheduled (Started at 30 s after that): its end was not
    seen, and its start, approval and end are blank. Stopped at 25 s, after the event ended, it is wrong."""
    later = truth(approved_at=at(30), started_at=at(30), ended_at=at(40))
    unseen = recorded(
        outcome="end_not_seen",
        approved_at=None,
        started_at=None,
        ended_at=None,
        notice_s=None,
        approval_latency_s=None,
        started_to_gone_s=None,
    )
    stopped_early = dict.fromkeys(GROUPS, at(10))
    checks = compare([unseen], later, TOLERANCE_S, stopped=stopped_early)
    assert not bad_fields(checks)
    assert [c.field for c in checks if c.note] == ["outcome"], "the output says why end_not_seen is right"
    assert "outcome" in bad_fields(compare([unseen], later, TOLERANCE_S))  # nobody stopped: its end was there to see
    stopped_late = dict.fromkeys(GROUPS, at(45))
    assert "outcome" in bad_fields(compare([unseen], later, TOLERANCE_S, stopped=stopped_late))
    one_looks_on = {"web-0": at(10), "web-1": at(10)}  # web-2 never stopped: it saw what happened
    assert "outcome" in bad_fields(compare([unseen], later, TOLERANCE_S, stopped=one_looks_on))


def test_an_ended_event_may_stay_active_while_an_observer_that_ended_showing_it_is_not_silent() -> None:
    """web-2's collector was killed at 10 s, the event ended at 20 s and web-0 and web-1 saw it go: until web-2 is
    silent, sevents cannot tell it from a slow collector, so active with no end is right, and says why. Killed
    after the end (it saw it go), or silent already (not listed), it is wrong."""
    held = recorded(outcome="active", ended_at=None, started_to_gone_s=None)
    checks = compare([held], truth(), TOLERANCE_S, not_silent={"web-2": at(10)})
    assert not bad_fields(checks)
    assert [c.note for c in checks if c.note] == [
        "held active by web-2: its collector ended while showing it, not yet silent"
    ]
    assert bad_fields(compare([held], truth(), TOLERANCE_S, not_silent={"web-2": at(25)})) == {
        "outcome",
        "ended_at",
        "started_to_gone_s",
    }
    assert "outcome" in bad_fields(compare([held], truth(), TOLERANCE_S, not_silent={}))


def test_not_before_and_approval_are_not_expected_when_no_answer_showed_the_event_scheduled() -> None:
    quick = truth(first_visible_at=at(1.1), approved_at=at(1.6), started_at=at(1.6))
    mine = recorded(first_seen_at=at(2), not_before_first=None, approved_at=None, approval_latency_s=None)
    mine.update(started_at=at(2), notice_s=0.0, started_to_gone_s=18.4)
    none_between = {vm: [at(s) for s in (0, 1, 2, 3)] for vm in GROUPS}
    assert not bad_fields(compare([mine], quick, TOLERANCE_S, served=none_between))
    one_between = {**none_between, "web-2": [at(s) for s in (0, 1, 1.3, 2, 3)]}
    assert "not_before_first" in bad_fields(compare([mine], quick, TOLERANCE_S, served=one_between))


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(-1500, 1500))
def test_any_shift_within_the_tolerance_passes(shift_ms: int) -> None:
    """Every recorded moment shifted by the same amount, up to the tolerance either way: all match."""
    shift = timedelta(milliseconds=shift_ms)
    moved = recorded(
        first_seen_at=at(0) + shift,
        approved_at=at(2) + shift,
        started_at=at(2) + shift,
        ended_at=at(20) + shift,
        notice_s=2.0,
        approval_latency_s=2.0,
        started_to_gone_s=18.0,
    )
    assert not bad_fields(compare([moved], truth(), TOLERANCE_S, groups=GROUPS))


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1501, 600_000), st.sampled_from([-1, 1]), st.sampled_from(["started_at", "ended_at"]))
def test_any_shift_beyond_the_tolerance_fails(shift_ms: int, sign: int, moment: str) -> None:
    """One moment off by more than the tolerance, either way: it fails, and so does each duration it ends."""
    shift = timedelta(milliseconds=sign * shift_ms)
    moved = recorded(**{moment: recorded()[moment] - timedelta(seconds=0.4) + shift})
    spans = {"started_at": "notice_s", "ended_at": "started_to_gone_s"}
    moved[spans[moment]] = recorded()[spans[moment]] + sign * shift_ms / 1000  # the span it ends, as long
    bad = bad_fields(compare([moved], truth(), TOLERANCE_S))
    assert moment in bad and spans[moment] in bad


@settings(max_examples=examples(200), deadline=None)
@given(st.floats(-100, 100, allow_nan=False), st.floats(0.1, 5))
def test_near_is_the_tolerance_and_nothing_else(delta: float, tolerance: float) -> None:
    """A number passes exactly when it is within the tolerance; a bound only fails below it."""
    assert near(10.0 + delta, 10.0, tolerance)[0] == (abs((10.0 + delta) - 10.0) <= tolerance)
    assert near(10.0 + delta, 10.0, tolerance, at_least=True)[0] == ((10.0 + delta) - 10.0 >= -tolerance)
    assert near(None, 10.0, tolerance) == (False, None)
    assert near(None, 10.0, tolerance, blank_ok=True) == (True, None)
    assert near(None, None, tolerance) == (True, None)


def fd_row(fault_domain: int, latency: float | None, impact: float | None, events: int = 1) -> dict[str, Any]:
    return {
        "fault_set": "web",
        "fault_domain": fault_domain,
        "events": events,
        "avg_approval_latency_s": latency,
        "avg_observed_impact_s": impact,
    }


def test_per_fd_means_are_the_events_approval_and_the_vms_real_downtime() -> None:
    """Only affected VMs count; a collector stopped longer than the simulator said is what its VM went through."""
    span = DownSpan("web-1", "E-1", "reboot", at(2), at(7), "reboot")
    real = fault_domain_truth(truth(), GROUPS, done={span: 6.2})
    assert real == {
        ("web", 0): {"events": 1, "avg_approval_latency_s": 2.0, "avg_observed_impact_s": 5.0},
        ("web", 1): {"events": 1, "avg_approval_latency_s": 2.0, "avg_observed_impact_s": 6.2},
    }
    assert fault_domain_truth(truth(), GROUPS, unknowable={"E-1"})[("web", 0)]["avg_approval_latency_s"] is None


def test_a_per_fd_mean_off_by_more_than_the_tolerance_fails() -> None:
    """The issue's figure: 7.3 s recorded against a true 2.0 s (approval taken from when the rebooted VM saw
    Started, after its downtime) fails; 2.9 s passes; a downtime 1.2 s off fails its own tolerance."""
    real = fault_domain_truth(truth(), GROUPS)
    late = [fd_row(0, 7.3, 5.3), fd_row(1, 2.9, 6.2)]
    checks = fault_domain_means(late, real, TOLERANCE_S, DOWN_TOLERANCE_S)
    assert [(c.label, c.field) for c in checks if not c.ok] == [
        ("web / FD 0", "avg_approval_latency_s"),
        ("web / FD 1", "avg_observed_impact_s"),
    ]
    right = [fd_row(0, 2.4, 5.3), fd_row(1, 2.4, 5.4)]
    assert all(c.ok for c in fault_domain_means(right, real, TOLERANCE_S, DOWN_TOLERANCE_S))


def test_a_per_fd_row_only_one_side_has_fails() -> None:
    real = fault_domain_truth(truth(), GROUPS)
    checks = fault_domain_means([fd_row(0, 2.0, 5.0), fd_row(2, None, None)], real, TOLERANCE_S, DOWN_TOLERANCE_S)
    assert {(c.label, c.ok) for c in checks} == {("web / FD 0", True), ("web / FD 1", False), ("web / FD 2", False)}


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(-3000, 3000))
def test_a_per_fd_mean_passes_exactly_within_the_tolerance(shift_ms: int) -> None:
    real = fault_domain_truth(truth(), GROUPS)
    latency = 2.0 + shift_ms / 1000
    checks = fault_domain_means([fd_row(0, latency, 5.0), fd_row(1, 2.0, 5.0)], real, TOLERANCE_S, DOWN_TOLERANCE_S)
    assert all(c.ok for c in checks) == (abs(shift_ms) <= 1500)


def approval(vm: str, decision: str = "approved", saved: float | None = 898.0) -> dict[str, Any]:
    return {"event_id": "E-1", "vm_name": vm, "decision": decision, "notice_saved_s": saved}


def test_an_approved_row_is_held_to_the_approval_the_simulator_received() -> None:
    """The VM that approved, and the notice it saved (NotBefore - the approval); other decisions are not
    compared; an approval recorded but never received, or received but never recorded, fails."""
    received = [(at(2), "web-0", "E-1", "http"), (at(2.5), "web-0", "E-1", "http"), (at(1), "web-1", "E-1", "script")]
    rows = [approval("web-0", saved=897.7), approval("web-1", "left_to_approver", None)]
    checks = approval_checks(rows, received, truth(), TOLERANCE_S)
    assert [(c.label, c.field, c.ok) for c in checks] == [("reboot web-0", "notice_saved_s", True)]
    off = approval_checks([approval("web-0", saved=890.0)], received, truth(), TOLERANCE_S)
    assert [c.ok for c in off] == [False]
    wrong_vm = approval_checks([approval("web-1")], received, truth(), TOLERANCE_S)
    assert sorted((c.label, c.ours, c.truth, c.ok) for c in wrong_vm) == [
        ("reboot web-0", None, "web-0", False),
        ("reboot web-1", "web-1", None, False),
    ]


def test_the_coordinator_s_approval_is_held_to_the_acknowledge_the_simulator_received() -> None:
    """A coordinator's approved row (rule "coordinator", its own name as VM) against the event's acknowledge through
    the Maintenance API, whichever VM's resource it named; the collectors' ready rows are not compared; an
    acknowledge never recorded, or a coordinator approval never received, fails."""
    received = [(at(2), "web-1", "E-1", "maintenance")]
    ours = {**approval("coordinator-a", saved=897.7), "rule": "coordinator"}
    rows = [ours, {**approval("web-0", "ready", None), "rule": "coordinator"}]
    checks = approval_checks(rows, received, truth(), TOLERANCE_S)
    assert [(c.label, c.field, c.ok) for c in checks] == [("reboot coordinator-a", "notice_saved_s", True)]
    unheard = approval_checks(rows[1:], received, truth(), TOLERANCE_S)
    assert [(c.label, c.ours, c.truth, c.ok) for c in unheard] == [
        ("reboot maintenance-api", None, "maintenance-api", False)
    ]
    never = approval_checks([ours], [], truth(), TOLERANCE_S)
    assert [(c.label, c.ours, c.truth, c.ok) for c in never] == [("reboot coordinator-a", "coordinator-a", None, False)]
