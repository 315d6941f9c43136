"""The pure engine, driven by explicit times: incarnation rules, approvals, cancellation, resets, waves."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import Engine
from simulator.errors import ScenarioError
from simulator.loader import parse_scenario
from simulator.scenario import Scenario
from tests.simulator.conftest import small_scenario
from tests.simulator.lifecycle import check_history, check_truth

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def engine(scenario: Scenario, speed: float = 1.0) -> Engine:
    counter = itertools.count()
    return Engine(scenario, start=T0, speed=speed, new_id=lambda: f"EVENT-{next(counter)}")


RICH = small_scenario(
    [
        {"label": "a", "group": "web", "vms": ["web-0"], "type": "Freeze", "at": 0, "notice": 100, "started_for": 50},
        {"label": "b", "group": "web", "fault_domain": 1, "type": "Reboot", "at": 0, "notice": 60, "started_for": 30},
        {"label": "c", "group": "web", "type": "Redeploy", "after": "a", "gap": 10, "notice": 40, "started_for": 20,
         "second_impact": {"after": 5, "duration": 2}},
        {"label": "d", "group": "web", "type": "Freeze", "at": 30, "cancel_after": 20},
        {"label": "e", "group": "web", "vms": ["web-2"], "type": "Reboot", "status": "Started", "at": 45,
         "started_for": 15},
    ],
    approvals=[{"event": "a", "by": "first", "delay": 20}],
)  # fmt: skip


def _views(e: Engine, vm: str) -> list[tuple[int, tuple[object, ...]]]:
    return [(s.incarnation, s.events) for s in e.history(vm)]


def test_rich_scenario_lifecycle() -> None:
    """Appear, approve, start, second impact, end, chain, cancel and host failure happen at their times."""
    e = engine(RICH)
    e.advance(at(1000))
    assert e.done()
    rows = {(r["label"], r["vm_name"]): r for r in e.truth()}
    a = rows[("a", "web-0")]
    assert (a["first_visible_at"], a["approved_at"], a["started_at"], a["ended_at"]) == (at(0), at(20), at(20), at(70))
    assert a["approved_by"] == "web-0" and a["outcome"] == "completed"
    b = rows[("b", "web-1")]
    assert b["approved_at"] is None and b["started_at"] == at(60) and b["resources"] == ["web-1", "web-3"]
    c = rows[("c", "web-3")]
    assert c["first_visible_at"] == at(80) and c["started_at"] == at(120) and c["second_impact_at"] == at(125)
    d = rows[("d", "web-0")]
    assert d["outcome"] == "cancelled" and d["started_at"] is None and d["ended_at"] == at(50)
    host = rows[("e", "web-2")]
    assert host["not_before"] is None and host["started_at"] == at(45) and host["ended_at"] == at(60)
    assert len(e.truth()) == 5 * 4  # every VM of the availability set sees every event


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=400), max_size=40))
def test_documents_do_not_depend_on_how_often_the_engine_is_advanced(steps: list[float]) -> None:
    """Advancing in arbitrary steps yields the same documents, at the same times, as one big step."""
    once, often = engine(RICH), engine(RICH)
    once.advance(at(500))
    for step in sorted(steps):
        often.advance(at(step))
    often.advance(at(500))
    for vm in once.vms:
        assert once.history(vm) == often.history(vm)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=300), st.sampled_from(["web-0", "web-1", "web-2"])), max_size=12
    )
)
def test_incarnation_rises_by_one_exactly_when_the_events_change(approvals: list[tuple[float, str]]) -> None:
    """With approvals at arbitrary times, each new document differs from the last and has incarnation + 1."""
    e = engine(RICH)
    for moment, vm in sorted(approvals):
        e.advance(at(moment))
        _, events, _ = e.poll(vm, at(moment))
        e.approve(vm, [ev.event_id for ev in events], at(moment))
    e.advance(at(1000))
    assert e.done()
    for vm in e.vms:
        served = e.history(vm)
        for before, after in itertools.pairwise(served):
            assert after.incarnation == before.incarnation + 1
            assert after.events != before.events
            assert after.at >= before.at


def test_event_id_is_stable_and_not_before_blank_once_started() -> None:
    """An event keeps its EventId from Scheduled through Started to gone; NotBefore only while Scheduled."""
    e = engine(RICH)
    e.advance(at(1000))
    seen: dict[str, list[str]] = {}
    for served in e.history("web-0"):
        for ev in served.events:
            seen.setdefault(ev.event_id, []).append(ev.status)
            assert (ev.not_before is not None) == (ev.status == "Scheduled")
    assert set(seen) == {"EVENT-0", "EVENT-1", "EVENT-2", "EVENT-3", "EVENT-4"}
    for statuses in seen.values():
        assert statuses == sorted(statuses, key=["Scheduled", "Started"].index)


@pytest.mark.parametrize("policy,expected_start", [("any", 5.0), ("each", 30.0)])
def test_approval_policy(policy: str, expected_start: float) -> None:
    """ "any": one approval by a VM that sees it releases the event; "each": every affected VM must approve."""
    e = engine(small_scenario([{"label": "x", "group": "web", "fault_domain": 0, "type": "Freeze", "at": 0,
                                "approval": policy}]))  # fmt: skip
    e.advance(at(1))
    event_id = e.history("web-0")[-1].events[0].event_id
    unknown, happened = e.approve("web-1", [event_id], at(5))  # sees it, but is not in Resources
    assert unknown == [] and [h.kind for h in happened] == (["approved"] if policy == "any" else [])
    e.approve("web-0", [event_id], at(10))
    e.advance(at(20))
    e.approve("web-2", [event_id], at(30))
    e.advance(at(40))
    assert e.truth()[0]["started_at"] == at(expected_start)
    assert [(a[1], a[3]) for a in e.approval_log] == [("web-1", "http"), ("web-0", "http"), ("web-2", "http")]


def test_approving_unknown_or_finished_events() -> None:
    """Ids a VM never saw come back as unknown; approving a started event changes nothing."""
    e = engine(RICH)
    e.advance(at(45))
    assert e.approve("web-0", ["NOPE"], at(45))[0] == ["NOPE"]
    before = e.history("web-2")
    assert e.approve("web-2", ["EVENT-4"], at(46)) == ([], [])
    e.advance(at(46))
    assert e.history("web-2") == before


def test_start_delay_after_approval() -> None:
    """An approved event starts ``start_delay`` after the approval, not before."""
    e = engine(small_scenario([{"label": "x", "group": "web", "type": "Freeze", "at": 0, "start_delay": 7}]))
    e.advance(at(0))
    e.approve("web-0", ["EVENT-0"], at(3))
    e.advance(at(9))
    assert e.truth()[0]["approved_at"] == at(3) and e.truth()[0]["started_at"] is None
    e.advance(at(11))
    assert e.truth()[0]["started_at"] == at(10)


def test_idle_switch_off_restarts_incarnation() -> None:
    """A VM not polled for longer than idle_off is switched off; its next poll starts over."""
    scenario = parse_scenario(
        {"fleet": {"idle_off": 100, "groups": [{"name": "web", "size": 1}]},
         "events": [{"label": "x", "group": "web", "type": "Freeze", "at": 0, "notice": 5, "started_for": 10}]},
        "idle",
    )  # fmt: skip
    e = engine(scenario)
    e.advance(at(1))
    assert e.poll("web-0", at(1))[0] == 2
    e.advance(at(50))
    assert e.poll("web-0", at(50))[0] == 4
    e.advance(at(200))
    incarnation, events, happened = e.poll("web-0", at(200))
    assert incarnation == 1 and events == () and [h.kind for h in happened] == ["reset"]


def test_scripted_reset_and_wave_order() -> None:
    """A reset sets the incarnation back; a wave runs its fault domains one after another."""
    scenario = parse_scenario(
        {"fleet": {"groups": [{"name": "web", "size": 6, "fault_domains": 3}]},
         "waves": [{"label": "w", "group": "web", "type": "Freeze", "at": 0, "gap": 10, "notice": 30,
                    "started_for": 20}],
         "resets": [{"at": 1000, "incarnation": 1}]},
        "wave",
    )  # fmt: skip
    e = engine(scenario)
    e.advance(at(2000))
    rows = sorted({(r["label"], r["started_at"], r["ended_at"]) for r in e.truth()})
    assert [r[0] for r in rows] == ["w-fd0", "w-fd1", "w-fd2"]
    for (_, _, ended), (_, started, _) in itertools.pairwise(rows):
        assert started is not None and ended is not None and started > ended
    fd_of = {r["label"]: sorted({e.vms[n].fault_domain for n in r["resources"]}) for r in e.truth()}
    assert fd_of == {"w-fd0": [0], "w-fd1": [1], "w-fd2": [2]}
    served = e.history("web-0")
    assert served[-1].incarnation == 1 and served[-2].incarnation == 1 + 3 * 3


def test_invalid_scenario_lists_every_problem() -> None:
    """A bad scenario raises ScenarioError naming each problem, not only the first."""
    with pytest.raises(ScenarioError, match="no VM in fault domain 7"):
        small_scenario([{"group": "web", "fault_domain": 7, "at": 0}])
    with pytest.raises(ScenarioError) as err:
        parse_scenario(
            {"speed": -1, "colour": "red",
             "fleet": {"groups": [{"name": "web", "kind": "cluster", "size": 0}]},
             "events": [{"group": "nope", "type": "Explode", "at": 1, "after": "x"},
                        {"group": "web", "vms": ["web-9", 3], "at": "soon", "notice": -5},
                        {"label": "p", "group": "web", "after": "q"}, {"label": "q", "group": "web", "after": "p"}],
             "approvals": [{"event": "ghost", "by": "someone"}]},
            "bad",
        )  # fmt: skip
    text = "\n".join(err.value.problems)
    for needle in (
        "colour",
        "kind",
        "size",
        "nope",
        "Explode",
        "exactly one",
        "web-9",
        "list of VM names",
        "negative",
        "loops",
        "soon",
        "ghost",
        "someone",
        "speed",
    ):
        assert needle in text, needle


event_specs = st.fixed_dictionaries(
    {
        "group": st.just("web"),
        "type": st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]),
        "at": st.integers(min_value=0, max_value=100),
        "notice": st.integers(min_value=0, max_value=100),
        "started_for": st.integers(min_value=0, max_value=100),
    },
    optional={
        "fault_domain": st.integers(min_value=0, max_value=1),
        "cancel_after": st.integers(min_value=0, max_value=120),
        "status": st.sampled_from(["Scheduled", "Started"]),
        "second_impact": st.fixed_dictionaries({"after": st.integers(min_value=0, max_value=120)}),
        "approval": st.sampled_from(["any", "each"]),
        "start_delay": st.integers(min_value=0, max_value=20),
    },
)
approval_specs = st.fixed_dictionaries(
    {
        "event": st.just("*"),
        "by": st.sampled_from(["first", "all", "web-0", "web-3"]),
        "delay": st.integers(min_value=0, max_value=150),
    }
)


@settings(max_examples=80, deadline=None)
@given(st.lists(event_specs, min_size=1, max_size=5), st.lists(approval_specs, max_size=3), st.data())
def test_any_scenario_runs_to_completion_obeying_the_rules(
    events: list[dict[str, object]], approvals: list[dict[str, object]], data: st.DataObject
) -> None:
    """Any small valid scenario, advanced in arbitrary steps, finishes with lawful documents and truth."""
    e = engine(small_scenario(events, approvals=approvals))
    for step in sorted(data.draw(st.lists(st.integers(min_value=0, max_value=600), max_size=10))):
        e.advance(at(step))
    e.advance(at(10_000))
    assert e.done()
    for vm in e.vms:
        check_history(e.history(vm))
    rows = e.truth()
    check_truth(rows)
    assert len({r["event_id"] for r in rows}) == len(events)


def test_cancel_at_not_before_wins_and_stays_cancelled() -> None:
    """When cancellation and NotBefore fall on the same instant the event is cancelled and never starts."""
    spec = {"label": "x", "group": "web", "type": "Freeze", "at": 0, "notice": 50, "cancel_after": 50}
    e = engine(small_scenario([spec]))
    e.advance(at(1000))
    row = e.truth()[0]
    assert (row["outcome"], row["started_at"], row["ended_at"]) == ("cancelled", None, at(50))
    assert all(ev.status == "Scheduled" for doc in e.history("web-0") for ev in doc.events)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_times_are_scenario_problems(value: float) -> None:
    """TOML allows nan and inf; a scenario time that is not finite is a listed problem, not a crash later."""
    data = {
        "fleet": {"groups": [{"name": "web", "size": 2}]},
        "events": [{"group": "web", "type": "Freeze", "at": 0, "notice": value}],
    }
    with pytest.raises(ScenarioError, match="notice"):
        parse_scenario(data, "odd")


def test_wave_with_a_non_text_group_is_a_scenario_problem() -> None:
    """A wave whose group is not a name (say, a list) is reported as a problem, not a TypeError."""
    data = {"fleet": {"groups": [{"name": "web", "size": 2}]}, "waves": [{"group": ["web"], "type": "Freeze"}]}
    with pytest.raises(ScenarioError, match="group"):
        parse_scenario(data, "odd")


def test_an_end_stops_the_scenario_with_events_still_scheduled() -> None:
    """Nothing due after ``end`` happens: the event stays Scheduled, truth calls it active, the engine is done."""
    event = {"label": "r", "group": "web", "vms": ["web-1"], "type": "Reboot", "at": 10, "notice": 900}
    e = engine(small_scenario([event], end=100, collector_faults=[{"vms": ["*"], "kind": "stop", "at": 50}]))
    e.advance(at(99))
    assert not e.done()
    e.advance(at(5000))  # well past NotBefore
    assert e.done()
    assert {(r["outcome"], r["started_at"], r["ended_at"]) for r in e.truth()} == {("active", None, None)}
    assert [ev.status for ev in e.history("web-1")[-1].events] == ["Scheduled"]


def test_collector_faults_fall_due_once_per_vm() -> None:
    """A collector fault names VMs (or every VM with "*") and falls due at its scenario time; none after the end."""
    faults = [
        {"vms": ["web-3"], "kind": "kill", "at": 20},
        {"vms": ["*"], "kind": "stop", "at": 60},
        {"vms": ["web-0"], "kind": "kill", "at": 500},  # after the end: never
    ]
    e = engine(small_scenario([], end=100, collector_faults=faults), speed=2.0)
    assert e.collector_faults(at(9)) == []
    assert [(f.vm_name, f.kind, f.at) for f in e.collector_faults(at(10))] == [("web-3", "kill", at(10))]
    due = e.collector_faults(at(1000))
    assert [(f.vm_name, f.kind) for f in due] == [
        ("web-3", "kill"), ("web-0", "stop"), ("web-1", "stop"), ("web-2", "stop"), ("web-3", "stop"),
    ]  # fmt: skip


def test_invalid_collector_faults_and_end_are_scenario_problems() -> None:
    with pytest.raises(ScenarioError) as err:
        small_scenario(
            [],
            end=-1,
            collector_faults=[{"vms": ["web-9"], "kind": "pause", "at": -1}, {"vms": [], "colour": "red"}],
        )
    text = "\n".join(err.value.problems)
    for needle in ("web-9", "pause", "at >= 0", "colour", "end: must be positive"):
        assert needle in text, needle
