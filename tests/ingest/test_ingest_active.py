"""The active set and retirement: alerts page once per event, and a VM that is gone stops holding events open.

Rows go into the tables of record (`transitions`, `heartbeats`) as the ingest writes them; the alert rules'
own SQL (from the dashboards package) is run against the rollups that follow.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dashboards.alerts import RULES
from dashboards.filters import ACTIVE_IDS, since
from ingest import lifecycle_store


def _now() -> datetime:
    """Now, taken when a row is written (a module-level clock would age while other tests run first)."""
    return datetime.now(UTC)


def _transition(db: str, ch: Any, tid: str, vm: int, kind: str, status: str, ago_s: float, **extra: Any) -> None:
    row = {
        "transition_id": tid,
        "observed_at": _now() - timedelta(seconds=ago_s),
        "vm_id": f"vm-id-{vm}",
        "vm_name": f"vm-{vm}",
        "fault_domain": vm % 2,
        "event_id": extra.pop("event_id", "E-reboot"),
        "kind": kind,
        "status": status,
        "event_type": extra.pop("event_type", "Reboot"),
        "resources": extra.pop("resources", ["vm-0", "vm-1", "vm-2"]),
        "affects_this_vm": True,
        "not_before": extra.pop("not_before", _now() + timedelta(minutes=15)),
        **extra,
    }
    ch.insert(f"{db}.transitions", [list(row.values())], column_names=list(row))
    lifecycle_store.refresh(ch, db, [row["event_id"]])  # as the ingest does after storing a batch


def _heartbeat(db: str, ch: Any, vm: int, ago_s: float, *, final: bool = False, started_ago_s: float = 3600) -> None:
    row = {
        "heartbeat_id": f"hb-{vm}-{ago_s}",
        "observed_at": _now() - timedelta(seconds=ago_s),
        "vm_id": f"vm-id-{vm}",
        "vm_name": f"vm-{vm}",
        "last_poll_ok": True,
        "started_at": _now() - timedelta(seconds=started_ago_s),
        "final": final,
    }
    ch.insert(f"{db}.heartbeats", [list(row.values())], column_names=list(row))


def _alert(ch: Any, db: str, title: str, ref_id: str = "A") -> list[dict[str, Any]]:
    rule = next(r for r in RULES if r.title == title)
    sql = rule.sql if ref_id == "A" else dict(rule.figures)[ref_id]
    result = ch.query(sql.replace("sevents.", f"{db}."))
    return [dict(zip(result.column_names, row, strict=True)) for row in result.result_rows]


def _labels(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """What Grafana makes labels of: every string column."""
    return {tuple((k, v) for k, v in row.items() if isinstance(v, str)) for row in rows}


def test_an_event_pages_once_through_its_whole_life(ch: Any, db: str) -> None:
    """Scheduled, more VMs reporting, a NotBefore change, Started: one label set all along, figures follow."""
    rule = "Reboot or Redeploy scheduled"
    seen = []
    _transition(db, ch, "a0", 0, "appeared", "Scheduled", 600)
    seen.append(_labels(_alert(ch, db, rule)))
    _transition(db, ch, "a1", 1, "appeared", "Scheduled", 590)
    _transition(db, ch, "a2", 2, "appeared", "Scheduled", 580)
    seen.append(_labels(_alert(ch, db, rule)))
    later = (_now() + timedelta(minutes=30)).replace(microsecond=0)
    _transition(db, ch, "u0", 0, "updated", "Scheduled", 300, not_before=later, changed_fields=["not_before"])
    seen.append(_labels(_alert(ch, db, rule)))
    assert _alert(ch, db, rule, "not_before")[0]["value"] == int(later.timestamp())
    _transition(db, ch, "s0", 0, "status_changed", "Started", 100, not_before=None)
    seen.append(_labels(_alert(ch, db, rule)))
    assert _alert(ch, db, rule, "status")[0]["value"] == 2
    assert _alert(ch, db, rule, "vms")[0]["value"] == 3
    assert seen == [{(("event_id", "E-reboot"), ("event_type", "Reboot"))}] * 4
    for vm in range(3):
        _transition(db, ch, f"d{vm}", vm, "disappeared", "", 10 - vm)
    assert _alert(ch, db, rule) == [], "resolved once every VM saw it go"


def test_a_terminated_vm_does_not_hold_its_event_open(ch: Any, db: str) -> None:
    """The VM whose Terminate started never reports the end; the others saw it go: completed, no alert."""
    for vm in range(3):
        kwargs = {"event_id": "E-term", "event_type": "Terminate", "resources": ["vm-2"]}
        _transition(db, ch, f"ta{vm}", vm, "appeared", "Scheduled", 300, **{**kwargs, "affects_this_vm": vm == 2})
        _transition(db, ch, f"ts{vm}", vm, "status_changed", "Started", 200, **{**kwargs, "affects_this_vm": vm == 2})
    assert [r["event_id"] for r in _alert(ch, db, "Preempt or Terminate scheduled")] == ["E-term"]
    for vm in (0, 1):  # vm-2 is gone: its collector never reports the disappearance
        _transition(db, ch, f"td{vm}", vm, "disappeared", "", 100, event_id="E-term", event_type="Terminate")
    assert _alert(ch, db, "Preempt or Terminate scheduled") == []
    outcome = ch.query(f"SELECT outcome, ended_at IS NOT NULL FROM {db}.events WHERE event_id = 'E-term'")
    assert outcome.result_rows == [("completed", True)]


def test_retired_vms_are_apart_and_release_their_events(ch: Any, db: str) -> None:
    """Silent, stopped cleanly, gone beyond the horizon, terminated: only the silent one pages as silent."""
    _heartbeat(db, ch, 0, 30)  # reporting
    _heartbeat(db, ch, 1, 900)  # silent
    _heartbeat(db, ch, 2, 900, final=True)  # clean stop, quiet since
    _heartbeat(db, ch, 3, 4 * 86400)  # beyond the three-day horizon
    _heartbeat(db, ch, 4, 900, started_ago_s=7200)
    _transition(db, ch, "p4", 4, "status_changed", "Started", 1000, event_id="E-pre", event_type="Preempt",
                resources=["vm-4"])  # fmt: skip
    _heartbeat(db, ch, 5, 10, final=True)  # stopping right now: not retired yet
    states = dict(ch.query(f"SELECT vm_name, state FROM {db}.vm_status").result_rows)
    assert states == {
        "vm-0": "reporting", "vm-1": "silent", "vm-2": "retired", "vm-3": "retired", "vm-4": "retired",
        "vm-5": "reporting",
    }  # fmt: skip
    retired = {r[0] for r in ch.query(f"SELECT vm_id FROM {db}.vm_status WHERE state = 'retired'").result_rows}
    assert {r[0] for r in ch.query(f"SELECT vm_id FROM {db}.retired_vms").result_rows} == retired, "one rule"
    assert [r["vm_name"] for r in _alert(ch, db, "Collector silent for five minutes")] == ["vm-1"]
    # a Reboot still shown to the retired VMs only is no longer active; shown to a silent one, it still is
    for vm in (2, 3):
        _transition(db, ch, f"r{vm}", vm, "appeared", "Scheduled", 5000, event_id="E-old")
    _transition(db, ch, "r1", 1, "appeared", "Scheduled", 5000, event_id="E-quiet")
    active = {r["event_id"] for r in _alert(ch, db, "Reboot or Redeploy scheduled")}
    assert active == {"E-quiet"}
    outcomes = dict(ch.query(f"SELECT event_id, outcome FROM {db}.events").result_rows)
    # no VM saw E-old start or end before its VMs were retired: nothing says it was cancelled
    assert outcomes["E-old"] == "end_not_seen" and outcomes["E-quiet"] == "active"
    # each VM's row, stored and read now, says the same as the one computed from the rollups
    per_vm = f"SELECT event_id, vm_name, outcome FROM {db}.{{}} WHERE event_id LIKE 'E-%' ORDER BY event_id, vm_name"
    stored = ch.query(per_vm.format("event_vm_lifecycles")).result_rows
    assert stored == ch.query(per_vm.format("event_vms")).result_rows
    assert stored == [
        ("E-old", "vm-2", "end_not_seen"), ("E-old", "vm-3", "end_not_seen"), ("E-pre", "vm-4", "completed"),
        ("E-quiet", "vm-1", "active"),
    ]  # fmt: skip


def test_an_event_announced_weeks_ago_is_read_whole(ch: Any, db: str) -> None:
    """Panels look for an event's first day in recent rollup parts only (for the active set, twice the 30-day
    horizon back): an event announced 20 days ago and started now is still read from its first observation."""
    _transition(db, ch, "a", 0, "appeared", "Scheduled", 20 * 86400, not_before=_now() + timedelta(days=1))
    _transition(db, ch, "b", 0, "status_changed", "Started", 60)
    _transition(db, ch, "c", 1, "appeared", "Scheduled", 200 * 86400, event_id="E-long-gone")
    sql = f"SELECT event_id, first_seen_at, started_at, transitions FROM {since(ACTIVE_IDS, 'events')}"
    rows = ch.query(sql.replace("sevents.", f"{db}.")).result_rows
    first, started = ch.query(
        f"SELECT min(observed_at), max(observed_at) FROM {db}.transitions WHERE event_id = 'E-reboot'"
    ).result_rows[0]
    assert rows == [("E-reboot", first, started, 2)]
    assert _now() - first.replace(tzinfo=UTC) > timedelta(days=19), "the first observation, not a later one"
