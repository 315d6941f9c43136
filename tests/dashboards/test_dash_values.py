"""Panel and alert values against the simulator's ground truth (All selected, the whole run in range)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from statistics import mean
from typing import Any

import pytest

from dashboards import approval
from dashboards.templating import Selection
from tests.dashboards.conftest import PENDING, Seeded, around
from tests.dashboards.dash_helpers import Frame, alert_rules, context, observed_in, panel, run
from tests.dashboards.test_dash_panels import _options, selections

DESTRUCTIVE = ("Reboot", "Redeploy", "Terminate", "Preempt")


@pytest.fixture(scope="module")
def everything(seeded: Seeded) -> dict[str, Selection]:
    return selections(_options(seeded))


def _run(seeded: Seeded, uid: str, title: str, variables: dict[str, Selection]) -> Frame:
    start, end = around(seeded)
    return run(seeded.client, panel(uid, title).sql, variables, context(start, end))


def _affected(seeded: Seeded) -> list[dict[str, Any]]:
    return [row for row in seeded.truth if row["affected"]]


def test_fleet_now(seeded: Seeded, everything: dict[str, Selection]) -> None:
    """Active events, active by type, upcoming destructive events with NotBefore, collectors, dead letters."""
    truth = seeded.events()
    active = {e: t for e, t in truth.items() if t["outcome"] == "active"}
    assert {t["label"] for t in active.values()} == set(PENDING)
    assert _run(seeded, "sevents-fleet", "Events active now", everything).rows == [(len(active),)]
    by_type = dict(_run(seeded, "sevents-fleet", "Active events by type", everything).rows)
    assert by_type == dict(Counter(t["event_type"] for t in active.values()))
    upcoming = _run(seeded, "sevents-fleet", "Upcoming Reboot, Redeploy, Terminate and Preempt", everything).dicts()
    assert {r["event_id"] for r in upcoming} == {
        e for e, t in active.items() if t["started_at"] is None and t["event_type"] in DESTRUCTIVE
    }
    for row in upcoming:
        assert row["not_before"] == truth[row["event_id"]]["not_before"]
        assert row["vms"] == ", ".join(truth[row["event_id"]]["resources"])
        assert row["starts_in_s"] > 3600
    collectors = _run(seeded, "sevents-fleet", "Collectors", everything).dicts()
    assert collectors == [{"reporting": len(seeded.vm_names), "silent": 0, "retired": 0}]
    assert _run(seeded, "sevents-fleet", "Silent and retired collectors", everything).rows == []
    assert _run(seeded, "sevents-fleet", "Dead letters", everything).rows == [(1,)]
    first_seen = _run(seeded, "sevents-fleet", "Events first seen, by type", everything)
    per_type: Counter[str] = Counter()
    for _, event_type, count in first_seen.rows:
        per_type[event_type] += count
    assert per_type == Counter(t["event_type"] for t in truth.values())


def _lane_states(frame: Frame) -> dict[str, list[tuple[datetime, int]]]:
    lanes: dict[str, list[tuple[datetime, int]]] = {}
    for time, lane, state in frame.rows:
        states = lanes.setdefault(lane, [])
        if not states or states[-1][1] != state:
            states.append((time, state))
    return lanes


def test_state_timeline_follows_lifecycles(seeded: Seeded, everything: dict[str, Selection]) -> None:
    """Each affected VM's lane goes Scheduled -> Started -> gone as the simulator drove it, at the true times."""
    lanes = _lane_states(_run(seeded, "sevents-timeline", "VM state by fault domain", everything))
    affected = _affected(seeded)
    assert len(lanes) == len(affected)
    for truth in affected:
        lane = f"{seeded.fd_label(truth)} / {truth['vm_name']} / {truth['event_id'][:8]}"
        expected: list[tuple[datetime, int, str]] = []
        if truth["first_visible_at"] != truth["started_at"]:
            expected.append((truth["first_visible_at"], 1, "first_seen_at"))
        if truth["started_at"] is not None:
            expected.append((truth["started_at"], 2, "started_at"))
        if truth["ended_at"] is not None:
            expected.append((truth["ended_at"], 0, "ended_at"))
        got = lanes[lane]
        assert [s for _, s in got] == [s for _, s, _ in expected], lane
        window = seeded.windows([truth])  # this VM's polls
        for (at, _), (true_at, _, field) in zip(got, expected, strict=True):
            assert observed_in(at, true_at, window.get((truth["event_id"], field))), (lane, field)


def test_drill_down_one_event(seeded: Seeded, everything: dict[str, Selection]) -> None:
    """The drill-down lists every VM that saw the Reboot, which were affected, and per fault domain."""
    reboot = next(t for t in seeded.events().values() if t["label"] == "reboot")
    variables = {**everything, "event_id": Selection(values=(reboot["event_id"],), multi=False)}
    rows = _run(seeded, "sevents-timeline", "EventId across VMs", variables).dicts()
    truth = [t for t in seeded.truth if t["event_id"] == reboot["event_id"]]
    assert sorted(r["vm_name"] for r in rows) == sorted(t["vm_name"] for t in truth)
    assert {r["vm_name"] for r in rows if r["affects_this_vm"]} == set(reboot["resources"])
    for row in rows:
        t = next(t for t in truth if t["vm_name"] == row["vm_name"])
        assert row["fault_domain"] == t["fault_domain"] and row["outcome"] == t["outcome"]
        assert row["fault_set"] == seeded.groups[row["vm_name"]]
        window = seeded.windows([t])  # this VM's polls
        assert observed_in(row["started_at"], t["started_at"], window.get((t["event_id"], "started_at")))
        assert observed_in(row["ended_at"], t["ended_at"], window.get((t["event_id"], "ended_at")))
    by_fd = {
        r["fault_domain"]: r for r in _run(seeded, "sevents-timeline", "EventId by fault domain", variables).dicts()
    }
    assert set(by_fd) == {t["fault_domain"] for t in truth}
    assert all(r["fault_set"] == "web" for r in by_fd.values())
    for fd, row in by_fd.items():
        assert row["observing_vms"] == sum(1 for t in truth if t["fault_domain"] == fd)
        assert row["affected_vms"] == sum(1 for t in truth if t["fault_domain"] == fd and t["affected"])


def _released_by(t: dict[str, Any]) -> str:
    """Who released the event in truth, in the approval dashboard's words."""
    if t["approved_at"] is not None:
        return "approved outside sevents"  # the seeded fleet's approvals are scripted in the simulator
    if t["started_at"] is not None:
        # a host failure is Started when it first appears, with no NotBefore
        return "started without notice" if t["not_before"] is None else "platform (NotBefore reached)"
    return {"cancelled": "cancelled", "end_not_seen": "end not seen"}.get(t["outcome"], "pending")


def test_approval_panels(seeded: Seeded, everything: dict[str, Selection]) -> None:
    """Approval latency by type and source, who released each event, and the notice given, as simulated."""
    truth, windows = seeded.events(), seeded.windows()
    approved = [t for t in truth.values() if t["approved_at"] is not None]
    assert approved, "the scenario approves some events"
    rows = {
        r["type_source"]: r
        for r in _run(seeded, "sevents-approval", "Approval latency by type and source", everything).dicts()
    }
    assert set(rows) == {f"{t['event_type']} / {t['event_source']}" for t in approved}
    for t in approved:
        low, high = windows[(t["event_id"], "approval_latency_s")]  # as the collectors' polls allow
        row = rows[f"{t['event_type']} / {t['event_source']}"]
        assert row["approved"] == 1 and low < row["max_s"] < high
    pie = dict(_run(seeded, "sevents-approval", "Who released the event", everything).rows)
    assert pie == dict(Counter(_released_by(t) for t in truth.values()))
    notice = {r["event_id"]: r for r in _run(seeded, "sevents-approval", "Notice given per event", everything).dicts()}
    assert set(notice) == set(truth)
    for event_id, row in notice.items():
        t = truth[event_id]
        assert row["released"] == _released_by(t)
        if t["not_before"] is not None:
            # NotBefore minus the first observation; the document gives NotBefore in whole seconds
            first_low, first_high = windows[(event_id, "first_seen_at")]
            not_before = t["not_before"].timestamp()
            assert not_before - first_high - 1.0 < row["announced_notice_s"] < not_before - first_low + 1.0
        if t["started_at"] is not None:
            low, high = windows[(event_id, "notice_s")]
            assert low < row["notice_s"] < high


# A measured downtime runs from the collector's last tick before it was stopped to its first after it was
# resumed: at most a tick longer than the stop really done to it (plus the resumed process being scheduled).
TICK_S = 0.5
CLOCKS_S = 0.05  # millisecond wire times and the boot-time to wall-time conversion


def test_impact_panels(seeded: Seeded, everything: dict[str, Selection]) -> None:
    """Impact per fault domain of each set and announced versus observed per event equal the downtime the
    simulated VMs really had (their collectors were stopped or restarted for it), not how long events stayed Started."""
    hit = [t for t in _affected(seeded) if t["down_s"] is not None]
    frame = _run(seeded, "sevents-impact", "Impact per fault domain", everything)
    rows = {r["fault_domain"]: r for r in frame.dicts()}
    assert len(rows) == len(frame.rows), "one row per fault domain of each set"
    assert set(rows) == {seeded.fd_label(t) for t in hit}
    # the Reboot hit FD 0 of web and the Freeze FD 0 of api: two domains, two rows, never one row of both
    assert {"web / FD 0", "api / FD 0"} <= set(rows)
    for fd_label, row in rows.items():
        mine = [t for t in hit if seeded.fd_label(t) == fd_label]
        downs = [seeded.real_down_s[(t["event_id"], t["vm_name"])] for t in mine]
        assert row["events_hit"] == len({t["event_id"] for t in mine})
        assert row["vms_hit"] == len({t["vm_name"] for t in mine})
        assert mean(downs) - CLOCKS_S <= row["avg_impact_s"] <= mean(downs) + TICK_S + 0.5
        assert max(downs) - CLOCKS_S <= row["max_impact_s"] <= max(downs) + TICK_S + 0.5
    truth, windows = seeded.events(), seeded.windows()
    table = _run(seeded, "sevents-impact", "Announced DurationInSeconds versus observed impact", everything).dicts()
    assert {r["event_id"] for r in table} == {e for e, t in truth.items() if t["started_at"] is not None}
    for row in table:
        t = truth[row["event_id"]]
        downs = [seeded.real_down_s[(h["event_id"], h["vm_name"])] for h in hit if h["event_id"] == row["event_id"]]
        assert row["announced_s"] == t["duration_s"]
        assert row["hit"] == len(downs)
        if downs:
            assert max(downs) - CLOCKS_S <= row["observed_s"] <= max(downs) + TICK_S + 0.5
        else:
            assert row["observed_s"] is None  # a Terminate ends the VM: nothing left on it to measure
        if t["ended_at"] is not None:
            low, high = windows[(row["event_id"], "started_to_gone_s")]  # as the collectors' polls allow
            assert low < row["started_to_gone_s"] < high


def test_unannounced_pauses_panel_is_empty_when_every_downtime_was_announced(
    seeded: Seeded, everything: dict[str, Selection]
) -> None:
    """Every downtime of the seeded fleet belongs to an event: no row claims an unannounced pause."""
    assert _run(seeded, "sevents-impact", "Unannounced pauses and reboots", everything).rows == []
    stored = seeded.client.query("SELECT count(), countIf(event_id = '') FROM sevents.impacts FINAL").result_rows[0]
    assert stored == (5, 0)


def test_impact_per_fault_domain_keeps_the_set_when_one_vm_is_picked(seeded: Seeded) -> None:
    """Picking web-0 leaves one row, labelled by web-0's set ("web / FD 0"), not by web-0 alone."""
    chosen = selections(_options(seeded), vm=("web-0",))
    rows = _run(seeded, "sevents-impact", "Impact per fault domain", chosen).dicts()
    hit = [t for t in _affected(seeded) if t["vm_name"] == "web-0" and t["down_s"] is not None]
    assert [r["fault_domain"] for r in rows] == ["web / FD 0"]
    assert rows[0]["events_hit"] == len(hit) and rows[0]["vms_hit"] == 1


def test_pipeline_panels(seeded: Seeded, everything: dict[str, Selection]) -> None:
    """Heartbeat ages cover every VM, lag is small and positive, the poison record shows as a dead letter."""
    ages = _run(seeded, "sevents-pipeline", "Heartbeat age", everything).dicts()
    assert sorted(r["vm_name"] for r in ages) == sorted(seeded.vm_names)
    assert all(r["last_poll_ok"] for r in ages)
    depth = _run(seeded, "sevents-pipeline", "Outbox depth", everything)
    assert depth.rows and all(r[1] >= 0 for r in depth.rows)
    lag = _run(seeded, "sevents-pipeline", "Ingest lag (observed on the VM to stored in ClickHouse)", everything)
    assert lag.rows and all(0 <= r[1] <= r[2] <= r[3] < 600 for r in lag.rows)
    timing = _run(
        seeded, "sevents-pipeline", "Insert timing (transitions stored per interval of ingest time)", everything
    )
    total = seeded.client.query("SELECT count() FROM sevents.transitions FINAL").result_rows[0][0]
    assert sum(r[1] for r in timing.rows) == total
    coverage = _run(seeded, "sevents-pipeline", "Heartbeat coverage", everything).dicts()
    assert max(r["vms_reporting"] for r in coverage) == len(seeded.vm_names)
    letters = _run(seeded, "sevents-pipeline", "Dead letters", everything)
    assert [(r[1], r[2]) for r in letters.rows] == [("outbox", 1)]
    latest = _run(seeded, "sevents-pipeline", "Latest dead letters", everything).dicts()
    assert len(latest) == 1 and '"schema_version":999' in latest[0]["payload_head"]


def _alert(seeded: Seeded, uid: str, ref_id: str = "A") -> Frame:
    rule = next(r for r in alert_rules() if r["uid"] == uid)
    query = next(d for d in rule["data"] if d["refId"] == ref_id)
    window = query["relativeTimeRange"]["from"]
    now = datetime.now(UTC)
    return run(seeded.client, query["model"]["rawSql"], {}, context(now - timedelta(seconds=window), now))


def _numeric_columns(frame: Frame) -> int:
    """Grafana makes string columns labels; the rest must be exactly one value column."""
    return sum(1 for t in frame.types if not t.startswith(("String", "LowCardinality(String")))


def test_alert_rules(seeded: Seeded) -> None:
    """One alert instance per pending EventId, labelled by EventId and type only; its figures match the truth."""
    truth = seeded.events()
    for uid, types in (
        ("sevents-reboot-redeploy", ("Reboot", "Redeploy")),
        ("sevents-preempt-terminate", ("Preempt", "Terminate")),
    ):
        frame = _alert(seeded, uid)
        assert _numeric_columns(frame) == 1, "Grafana needs exactly one numeric column per row"
        assert [c for c in frame.columns if c != "value"] == ["event_id", "event_type"], "labels identify the event"
        rows = frame.dicts()
        expected = {e for e, t in truth.items() if t["outcome"] == "active" and t["event_type"] in types}
        assert {r["event_id"] for r in rows} == expected and len(rows) == len(expected) == 1
        figures = {
            ref: {r["event_id"]: r["value"] for r in _alert(seeded, uid, f"{ref}_query").dicts()}
            for ref in ("status", "not_before", "vms", "fault_domains", "sets")
        }
        for row in rows:
            t = truth[row["event_id"]]
            assert row["event_type"] == t["event_type"]
            fds = {seeded.fd_label(r) for r in seeded.truth if r["event_id"] == t["event_id"] and r["affected"]}
            assert figures["vms"][row["event_id"]] == len(t["resources"])
            assert figures["fault_domains"][row["event_id"]] == len(fds)
            assert figures["sets"][row["event_id"]] == len({label.split(" / ")[0] for label in fds})
            assert figures["status"][row["event_id"]] == 1, "Scheduled"
            assert figures["not_before"][row["event_id"]] == int(t["not_before"].timestamp())
    silent = _alert(seeded, "sevents-collector-silent")
    assert _numeric_columns(silent) == 1
    assert silent.dicts() == [], "nobody is silent yet"
    letters = _alert(seeded, "sevents-dead-letters")
    assert _numeric_columns(letters) == 1
    assert letters.dicts() == [{"source": "outbox", "new_dead_letters": 1.0}]


def test_state_timeline_carries_in_events_under_way(seeded: Seeded, everything: dict[str, Selection]) -> None:
    """A range starting while the Reboot is Started opens each of its lanes at the range start, Started."""
    reboot = next(t for t in seeded.events().values() if t["label"] == "reboot")
    middle = reboot["started_at"] + (reboot["ended_at"] - reboot["started_at"]) / 2
    start = middle.replace(microsecond=0)  # $__fromTime has whole seconds
    if start <= reboot["started_at"] + timedelta(seconds=0.5):
        start += timedelta(seconds=1)
    query = panel("sevents-timeline", "VM state by fault domain")
    lanes = _lane_states(
        run(seeded.client, query.sql, everything, context(start, seeded.finished + timedelta(minutes=1)))
    )
    for vm in reboot["resources"]:
        fd = next(seeded.fd_label(t) for t in seeded.truth if t["vm_name"] == vm)
        states = lanes[f"{fd} / {vm} / {reboot['event_id'][:8]}"]
        assert states[0] == (start, 2) and states[-1][1] == 0
    pending = [t for t in seeded.truth if t["label"] in PENDING and t["affected"]]
    assert all(lanes[f"{seeded.fd_label(t)} / {t['vm_name']} / {t['event_id'][:8]}"] == [(start, 1)] for t in pending)


def test_a_range_after_the_last_transition_shows_exactly_the_events_still_open(
    seeded: Seeded, everything: dict[str, Selection]
) -> None:
    """An event last seen before the range overlaps it only while it is still open: the pending ones, each once,
    and none of the events that ended (their rollup rows are read, then dropped by the range)."""
    start = seeded.finished + timedelta(minutes=1)
    frame = run(
        seeded.client,
        panel("sevents-timeline", "Events").sql,
        everything,
        context(start, start + timedelta(minutes=10)),
    )
    pending = {t["event_id"] for t in seeded.truth if t["label"] in PENDING}
    rows = frame.dicts()
    assert sorted(r["event_id"] for r in rows) == sorted(pending)
    assert {r["outcome"] for r in rows} == {"active"} and all(r["ended_at"] is None for r in rows)


def test_released_by_labels_agree_with_the_report(seeded: Seeded) -> None:
    """The approval panels' SQL and the report label every released_by value (and, for events that never started,
    every outcome) alike: the ones the seeded fleet has and those it has not (end not seen, an unknown value)."""
    cases = [(value, "completed") for value, _ in approval.RELEASED] + [
        (None, outcome) for outcome in ("cancelled", "end_not_seen", "active")
    ]
    cases.append(("a_later_value", "completed"))
    each = "SELECT arrayJoin({cases:Array(Tuple(Nullable(String), String))}) AS c, c.1 AS released_by, c.2 AS outcome"
    rows = seeded.client.query(
        f"SELECT {approval.RELEASED_BY} AS released FROM ({each})", parameters={"cases": cases}
    ).result_rows
    assert [r[0] for r in rows] == [approval.released(value, outcome) for value, outcome in cases]
    assert [r[0] for r in rows][-4:] == ["cancelled", "end not seen", "pending", "a_later_value"]
