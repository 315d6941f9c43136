"""An event's lifecycle from all the evidence (migration 0013): sightings by every observer, the downtime a VM
measured for the event, sevents' own approval records, and which observers still report.

Rows go into the tables of record (``transitions``, ``impacts``, ``approvals``, ``heartbeats``) as the ingest
writes them; ``events``, ``event_vms`` and ``active_events`` are read as the audits and the alerts read them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import lifecycle_store
from tests.tiers import examples

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
NOT_BEFORE = T0 + timedelta(minutes=15)


def _at(second: float) -> datetime:
    return T0 + timedelta(seconds=second)


def _transition(ch: Any, db: str, vm: str, kind: str, status: str, second: float, **extra: Any) -> None:
    event_id, refresh = extra.pop("event_id", "E-1"), extra.pop("refresh", True)
    row = {
        "transition_id": f"{vm}-{event_id}-{kind}-{status}-{second}",
        "observed_at": _at(second),
        "vm_id": f"id-{vm}",
        "vm_name": vm,
        "fault_domain": extra.pop("fault_domain", 0),
        "event_id": event_id,
        "kind": kind,
        "status": status,
        "event_type": extra.pop("event_type", "Reboot"),
        "resources": extra.pop("resources", [vm]),
        "affects_this_vm": extra.pop("affects_this_vm", True),
        "not_before": None if status == "Started" or kind == "disappeared" else extra.pop("not_before", NOT_BEFORE),
        **extra,
    }
    ch.insert(f"{db}.transitions", [list(row.values())], column_names=list(row))
    if refresh:  # as the ingest does after storing a batch (False: more rows of the same batch follow)
        lifecycle_store.refresh(ch, db, [event_id])


def _impact(
    ch: Any,
    db: str,
    vm: str,
    began: float,
    seconds: float,
    event_id: str = "E-1",
    read: float | None = None,
    refresh: bool = True,
) -> None:
    """A downtime ``vm`` measured; ``read``: its collector's first read after it (None: sent by a collector before
    impacts carried it)."""
    row = {
        "impact_id": f"i-{vm}-{began}",
        "observed_at": _at(began + seconds),
        "vm_id": f"id-{vm}",
        "vm_name": vm,
        "detected_by": "reboot",
        "began_at": _at(began),
        "duration_ms": int(seconds * 1000),
        "event_id": event_id,
        "event_type": "Reboot",
        "read_at": None if read is None else _at(read),
    }
    ch.insert(f"{db}.impacts", [list(row.values())], column_names=list(row))
    if refresh:
        lifecycle_store.refresh(ch, db, [event_id])


def _approval(ch: Any, db: str, vm: str, second: float, event_id: str = "E-1") -> None:
    row = {
        "approval_id": f"a-{vm}-{event_id}",
        "observed_at": _at(second),
        "vm_id": f"id-{vm}",
        "vm_name": vm,
        "event_id": event_id,
        "decision": "approved",
        "rule": "first-in-resources",
        "event_type": "Reboot",
        "not_before": NOT_BEFORE,
        "decided_at": _at(second),
    }
    ch.insert(f"{db}.approvals", [list(row.values())], column_names=list(row))
    lifecycle_store.refresh(ch, db, [event_id])


def _heartbeat(ch: Any, db: str, vm: str, ago_s: float, *, final: bool = False) -> None:
    now = datetime.now(UTC)
    row = {
        "heartbeat_id": f"hb-{vm}-{ago_s}",
        "observed_at": now - timedelta(seconds=ago_s),
        "vm_id": f"id-{vm}",
        "vm_name": vm,
        "last_poll_ok": True,
        "started_at": now - timedelta(hours=2),
        "final": final,
    }
    ch.insert(f"{db}.heartbeats", [list(row.values())], column_names=list(row))


def _utc(value: Any) -> Any:
    """The embedded engine hands DateTime64('UTC') back naive."""
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) else value


def _rows(ch: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(_utc(v) for v in row) for row in ch.query(sql).result_rows]


def _event(ch: Any, db: str, event_id: str = "E-1", **query_settings: Any) -> dict[str, Any]:
    result = ch.query(f"SELECT * FROM {db}.events WHERE event_id = '{event_id}'", settings=query_settings)
    (row,) = result.result_rows
    return {name: _utc(value) for name, value in zip(result.column_names, row, strict=True)}


def _active(ch: Any, db: str, **query_settings: Any) -> set[str]:
    return {r[0] for r in ch.query(f"SELECT event_id FROM {db}.active_events", settings=query_settings).result_rows}


def _standalone_reboot(ch: Any, db: str, *, down_at: float, back_at: float, gone_at: float) -> None:
    """A standalone VM's Reboot: seen Scheduled at 0, the VM down from ``down_at`` (the event started then) to
    ``back_at``; its first polls after the reboot find the event already gone."""
    _transition(ch, db, "db-0", "appeared", "Scheduled", 0)
    _impact(ch, db, "db-0", down_at, back_at - down_at)
    _transition(ch, db, "db-0", "disappeared", "", gone_at)


def test_a_reboot_that_ended_while_its_vm_was_down_is_completed_from_its_downtime(ch: Any, db: str) -> None:
    """Nobody saw it Started: the downtime the VM measured for it says when it started, and that it did."""
    _standalone_reboot(ch, db, down_at=2.0, back_at=65.0, gone_at=66.0)
    event = _event(ch, db)
    assert event["outcome"] == "completed"
    assert (event["started_at"], event["started_at_source"]) == (_at(2.0), "downtime")
    assert event["notice_s"] == 2.0
    # started before NotBefore, with no sevents approval: someone outside sevents approved it, by then
    assert (event["approved_at"], event["approval_latency_s"], event["released_by"]) == (_at(2.0), 2.0, "outside")
    # the end is known only as the first poll after the reboot: a bound, said so
    assert (event["ended_at"], event["ended_at_source"]) == (_at(66.0), "after_downtime")


def test_a_collector_slow_to_start_after_its_reboot_only_bounds_the_end(ch: Any, db: str) -> None:
    """A loaded VM's collector first reads IMDS 8 s after its process started: what that read found gone is still
    only "gone by then", however long after the VM came back it came (the impact says which read it was)."""
    _transition(ch, db, "db-0", "appeared", "Scheduled", 0)
    _impact(ch, db, "db-0", 2.0, 63.0, read=73.0)
    _transition(ch, db, "db-0", "disappeared", "", 73.0)
    event = _event(ch, db)
    assert (event["ended_at"], event["ended_at_source"]) == (_at(73.0), "after_downtime")


def test_an_end_seen_at_a_later_read_after_the_downtime_is_seen(ch: Any, db: str) -> None:
    """Back at 65, the VM read the event still there at 66 and gone at 68: it saw the end, soon after it came back."""
    _transition(ch, db, "db-0", "appeared", "Scheduled", 0)
    _transition(ch, db, "db-0", "status_changed", "Started", 1.5)
    _impact(ch, db, "db-0", 2.0, 63.0, read=66.0)
    _transition(ch, db, "db-0", "disappeared", "", 68.0)
    event = _event(ch, db)
    assert (event["ended_at"], event["ended_at_source"]) == (_at(68.0), "seen")
    assert event["started_to_gone_s"] == 66.5


def test_a_vm_down_for_another_event_sees_this_ones_end_late(ch: Any, db: str) -> None:
    """db-1 rebooted for a host failure of its own (E-2) while E-1, which names db-0, ended: what db-1's first read
    after coming back found is no sighting of E-1's end; db-0 saw it end at 40."""
    for vm in ("db-0", "db-1"):
        _transition(ch, db, vm, "appeared", "Scheduled", 0, resources=["db-0"], affects_this_vm=vm == "db-0")
    _transition(ch, db, "db-1", "appeared", "Started", 2.0, event_id="E-2")
    _impact(ch, db, "db-1", 2.5, 62.5, event_id="E-2", read=73.0)
    _transition(ch, db, "db-0", "disappeared", "", 40.0)
    _transition(ch, db, "db-1", "disappeared", "", 73.0, resources=["db-0"], affects_this_vm=False)
    event = _event(ch, db)
    assert (event["ended_at"], event["ended_at_source"]) == (_at(40.0), "seen")


def test_impacts_without_their_read_keep_the_five_second_rule(ch: Any, db: str) -> None:
    """Impacts stored before collectors sent ``read_at``: an end 5 s or more after the VM came back counts as seen,
    one sooner only bounds it."""
    _standalone_reboot(ch, db, down_at=2.0, back_at=65.0, gone_at=71.0)
    assert (_event(ch, db)["ended_at_source"]) == "seen"
    _transition(ch, db, "db-1", "appeared", "Scheduled", 0, event_id="E-2")
    _impact(ch, db, "db-1", 2.0, 63.0, event_id="E-2")
    _transition(ch, db, "db-1", "disappeared", "", 69.0, event_id="E-2")
    assert (_event(ch, db, "E-2")["ended_at_source"]) == "after_downtime"


def test_sevents_own_approval_gives_the_approval_moment(ch: Any, db: str) -> None:
    _standalone_reboot(ch, db, down_at=3.0, back_at=65.0, gone_at=66.0)
    _approval(ch, db, "db-0", 1.5)
    event = _event(ch, db)
    assert (event["approved_at"], event["approval_latency_s"], event["released_by"]) == (_at(1.5), 1.5, "sevents")
    (vm,) = _rows(ch, f"SELECT approved_at, started_at, vm_started_at, outcome FROM {db}.event_vms")
    assert vm == (_at(1.5), _at(3.0), None, "completed"), "the VM's row takes the event's moments"


def test_a_whole_set_seen_late_starts_at_its_first_downtime(ch: Any, db: str) -> None:
    """Every observer affected: each sees Started only when back; the event started when the first went down, and
    per VM (hence per fault domain) approval latency is the event's, not the VM's late sighting."""
    vms = ["web-0", "web-1", "web-2"]
    for n, vm in enumerate(vms):
        _transition(ch, db, vm, "appeared", "Scheduled", 0.2 * n, resources=vms, fault_domain=n)
        _impact(ch, db, vm, 2.0 + 0.1 * n, 5.0)
        _transition(ch, db, vm, "status_changed", "Started", 7.5 + n, resources=vms, fault_domain=n)
        _transition(ch, db, vm, "disappeared", "", 200 + n, resources=vms, fault_domain=n)
    event = _event(ch, db)
    assert (event["started_at"], event["started_at_source"], event["outcome"]) == (_at(2.0), "downtime", "completed")
    assert (event["notice_s"], event["approval_latency_s"]) == (2.0, 2.0)
    # each VM saw Started after its downtime, then the end while polling: a sighting
    assert (event["ended_at"], event["ended_at_source"]) == (_at(202), "seen")
    per_vm = ch.query(
        f"SELECT dateDiff('millisecond', e.first_seen_at, v.approved_at) / 1000 FROM {db}.event_vms AS v "
        f"JOIN {db}.events AS e USING (event_id)"
    ).result_rows
    assert per_vm == [(2.0,)] * 3


def test_a_sighting_before_the_downtime_wins(ch: Any, db: str) -> None:
    """An unaffected VM of the set saw Started at once: that sighting, not the bound, is the start."""
    vms = ["web-0", "web-1"]
    _transition(ch, db, "web-0", "appeared", "Scheduled", 0, resources=["web-0"])
    _transition(ch, db, "web-1", "appeared", "Scheduled", 0, resources=["web-0"], affects_this_vm=False)
    _transition(ch, db, "web-1", "status_changed", "Started", 2.4, resources=["web-0"], affects_this_vm=False)
    _impact(ch, db, "web-0", 2.6, 5.0)
    for vm in vms:
        _transition(ch, db, vm, "disappeared", "", 100, resources=["web-0"], affects_this_vm=vm == "web-0")
    event = _event(ch, db)
    assert (event["started_at"], event["started_at_source"]) == (_at(2.4), "seen")


def test_a_downtime_never_dates_the_start_before_the_vm_saw_the_event(ch: Any, db: str) -> None:
    _transition(ch, db, "db-0", "appeared", "Scheduled", 10.0)
    _impact(ch, db, "db-0", 9.0, 30.0)  # the last moment alive on disk predates the first sighting
    _transition(ch, db, "db-0", "disappeared", "", 41.0)
    assert _event(ch, db)["started_at"] == _at(10.0)


def test_who_released_it(ch: Any, db: str) -> None:
    """NotBefore reached only where a NotBefore was seen and Started came after it; no NotBefore: no notice."""
    late = (NOT_BEFORE - T0).total_seconds() + 1
    _transition(ch, db, "a", "appeared", "Scheduled", 0, event_id="E-late")
    _transition(ch, db, "a", "status_changed", "Started", late, event_id="E-late")
    _transition(ch, db, "b", "appeared", "Started", 5, event_id="E-host", not_before=None)
    _transition(ch, db, "c", "appeared", "Scheduled", 0, event_id="E-pending")
    released = dict(ch.query(f"SELECT event_id, released_by FROM {db}.events").result_rows)
    assert released == {"E-late": "not_before", "E-host": "no_notice", "E-pending": None}


def test_a_silent_observer_does_not_hold_an_ended_event_active(ch: Any, db: str) -> None:
    """web-2's collector died while the event ran (it never saw the end); the others saw it go. Once web-2 is
    silent the event is over and its alert resolves; while it reports, it holds the event as before."""
    vms = ["web-0", "web-1", "web-2"]
    for vm in vms:
        _transition(ch, db, vm, "appeared", "Scheduled", 0, resources=["web-0"], affects_this_vm=vm == "web-0")
    for vm in vms[:2]:
        _transition(ch, db, vm, "status_changed", "Started", 3, resources=["web-0"], affects_this_vm=vm == "web-0")
        _transition(ch, db, vm, "disappeared", "", 60, resources=["web-0"], affects_this_vm=vm == "web-0")
    _heartbeat(ch, db, "web-0", 10)
    _heartbeat(ch, db, "web-1", 10)
    _heartbeat(ch, db, "web-2", 600)  # silent ten minutes (past the 300 s threshold), not yet retired
    event = _event(ch, db)
    assert (event["outcome"], event["ended_at"]) == ("completed", _at(60))
    assert _active(ch, db) == set()
    outcomes = dict(_rows(ch, f"SELECT vm_name, outcome FROM {db}.event_vms"))
    assert outcomes == {"web-0": "completed", "web-1": "completed", "web-2": "completed"}
    _heartbeat(ch, db, "web-2", 5)  # it reports again, still showing the event: it is active on web-2
    assert (_event(ch, db)["outcome"], _active(ch, db)) == ("active", {"E-1"})
    assert dict(_rows(ch, f"SELECT vm_name, outcome FROM {db}.event_vms"))["web-2"] == "active"


def test_a_silent_last_observer_still_holds_an_event_nobody_saw_end(ch: Any, db: str) -> None:
    _transition(ch, db, "db-0", "appeared", "Scheduled", 0)
    _heartbeat(ch, db, "db-0", 600)
    assert _event(ch, db)["outcome"] == "active"
    assert _active(ch, db) == {"E-1"}


def test_collectors_stopped_cleanly_while_scheduled_leave_an_end_not_seen(ch: Any, db: str) -> None:
    for vm in ("web-0", "web-1"):
        _transition(ch, db, vm, "appeared", "Scheduled", 0, resources=["web-0", "web-1"])
        _heartbeat(ch, db, vm, 600, final=True)
    event = _event(ch, db)
    assert (event["outcome"], event["ended_at"], event["released_by"]) == ("end_not_seen", None, None)
    assert _active(ch, db) == set()


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sightings=st.lists(st.one_of(st.none(), st.integers(1, 50)), min_size=1, max_size=4),
    downs=st.lists(st.one_of(st.none(), st.integers(1, 50)), min_size=1, max_size=4),
)
def test_the_start_is_the_earliest_evidence(
    ch: Any, db: str, sightings: list[int | None], downs: list[int | None]
) -> None:
    """Over any observers: started_at is the earliest Started sighting or downtime start (never before that VM
    saw the event), NULL when there is neither; the event is completed exactly when it has one."""
    for table in ("transitions", "transitions_by_time", "event_vm_rollup", "event_rollup", "impacts"):
        ch.command(f"TRUNCATE TABLE {db}.{table}")
    vms = [f"vm-{n}" for n in range(max(len(sightings), len(downs)))]
    expected: list[float] = []
    for n, vm in enumerate(vms):  # the whole story as one batch, refreshed once after it as the ingest does
        _transition(ch, db, vm, "appeared", "Scheduled", n, resources=vms, refresh=False)
        seen = sightings[n] if n < len(sightings) else None
        down = downs[n] if n < len(downs) else None
        if seen is not None:
            _transition(ch, db, vm, "status_changed", "Started", n + seen, resources=vms, refresh=False)
            expected.append(n + seen)
        if down is not None:
            _impact(ch, db, vm, n + down - 0.5, 3.0, refresh=False)
            expected.append(n + max(down - 0.5, 0))
        _transition(ch, db, vm, "disappeared", "", 200, resources=vms, refresh=False)
    lifecycle_store.refresh(ch, db, ["E-1"])
    event = _event(ch, db)
    assert event["started_at"] == (_at(min(expected)) if expected else None)
    assert event["outcome"] == ("completed" if expected else "cancelled")


def test_a_downtime_just_before_not_before_is_no_approval(ch: Any, db: str) -> None:
    """A Redeploy that started at its NotBefore, its VM's last tick 0.4 s before: the platform released it, nobody
    approved it. A downtime a second or more before NotBefore is an approval (from outside sevents)."""
    at_deadline = (NOT_BEFORE - T0).total_seconds()
    _transition(ch, db, "api-4", "appeared", "Scheduled", 0, event_id="E-deadline")
    _impact(ch, db, "api-4", at_deadline - 0.4, 8.0, event_id="E-deadline")
    _transition(ch, db, "api-4", "disappeared", "", at_deadline + 20, event_id="E-deadline")
    _transition(ch, db, "api-5", "appeared", "Scheduled", 0, event_id="E-early", resources=["api-5"])
    _impact(ch, db, "api-5", at_deadline - 30, 8.0, event_id="E-early")
    _transition(ch, db, "api-5", "disappeared", "", at_deadline - 10, event_id="E-early", resources=["api-5"])
    rows = _rows(ch, f"SELECT event_id, released_by, approved_at IS NULL FROM {db}.events ORDER BY event_id")
    assert rows == [("E-deadline", "not_before", 1), ("E-early", "outside", 0)]
    per_vm = _rows(ch, f"SELECT event_id, released_by, approved_at IS NULL FROM {db}.event_vms ORDER BY event_id")
    assert per_vm == rows, "the VM's row says the same"
