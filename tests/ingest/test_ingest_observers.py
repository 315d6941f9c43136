"""Observers that stop, end to end: real collector processes, real ingest, embedded ClickHouse (issue 26).

Two built-in scenarios run through ``demo.fleetrun`` with collector processes, one after the other. In
``stopped-scheduled`` every collector is stopped cleanly (SIGTERM: a final heartbeat) while a Reboot and a Freeze
are still Scheduled, and the run ends long before they would start. In ``observer-killed`` web-3 sees web-0's
Reboot and its collector is killed (SIGKILL: no last word) while the event runs; web-0, web-1 and web-2 see the
event end.

What is stored is read twice: right after the runs, when every VM is still within the silence threshold, and once
the stopped collectors have been silent for longer than it. chDB knows no custom settings (a query naming
``custom_sevents_silent_after_s`` fails there with UNKNOWN_SETTING), so the views' default threshold applies and
the test waits it out, once for both cases: about six minutes, nearly all of it asleep.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from dashboards.alerts import RULES
from demo.fleetrun import FleetRun, start
from ingest import event_sql
from simulator.state import CollectorFault
from tests.helpers import wait_for

SILENT_AFTER_S = event_sql.SILENT_AFTER_S  # the views' custom_sevents_silent_after_s default
MARGIN_S = 2.0  # past the threshold: the heartbeat's wire time, the query's own now64()
REBOOT_ALERT = next(r for r in RULES if r.title == "Reboot or Redeploy scheduled")

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, ch_path: Path, scenario: str) -> tuple[FleetRun, str]:
    database = "obs_" + uuid.uuid4().hex[:8]
    run = start(
        tmp_path,
        scenario=scenario,
        poll_interval=0.5,
        heartbeat_interval=1.0,
        batch_max_wait=0.2,
        clickhouse=f"chdb://{ch_path}",
        database=database,
        processes=True,
    )
    return run, database


def _finish(run: FleetRun) -> tuple[list[dict[str, Any]], list[CollectorFault]]:
    """Run the scenario to its end and drain every outbox; the truth rows and the collector faults done."""
    try:
        assert run.sim.wait_done(120), run.sim.status()
        run.finish()
        assert run.downtimes is not None
        return run.sim.truth(), list(run.downtimes.faulted)
    finally:
        run.close()


def _seen(ch: Any, db: str, event_id: str) -> dict[str, bool]:
    """Each observer of the event: whether it saw the event end."""
    sql = f"SELECT vm_name, ended_at IS NOT NULL FROM {db}.event_vms WHERE event_id = '{event_id}'"
    return {vm: bool(ended) for vm, ended in ch.query(sql).result_rows}


def _state(ch: Any, db: str, event_id: str) -> tuple[str, bool, bool]:
    """The event's outcome, whether it is in ``active_events``, whether the Reboot/Redeploy alert fires for it."""
    outcome = ch.query(f"SELECT outcome FROM {db}.events WHERE event_id = '{event_id}'").result_rows
    active = ch.query(f"SELECT count() FROM {db}.active_events WHERE event_id = '{event_id}'").result_rows[0][0]
    alert = ch.query(REBOOT_ALERT.sql.replace("sevents.", f"{db}.")).result_rows
    return outcome[0][0], active > 0, any(event_id in row for row in alert)


def _wait_silent(ch: Any, db: str, vms: list[str]) -> None:
    """Until each of ``vms`` has been without a heartbeat for longer than the silence threshold, by the view's
    own clock (the threshold cannot be lowered on chDB: this is real waiting, nearly all of the test's time)."""
    names = ", ".join(f"'{vm}'" for vm in vms)
    sql = f"SELECT vm_name, silent_for_s FROM {db}.vm_status WHERE vm_name IN ({names})"

    def silent() -> bool:
        silent_for = dict(ch.query(sql).result_rows)
        assert sorted(silent_for) == sorted(vms)
        return min(silent_for.values()) > SILENT_AFTER_S + MARGIN_S

    wait_for(silent, SILENT_AFTER_S + MARGIN_S + 120, what=f"{vms} to be silent past the threshold", interval=1.0)


@pytest.mark.timeout(SILENT_AFTER_S + 600)
def test_observers_that_stop_neither_hold_events_active_nor_cancel_them(ch: Any, ch_path: Path, tmp_path: Path) -> None:
    """One wait for both cases (the threshold cannot be lowered on chDB). ``stopped-scheduled``: every collector
    stopped cleanly with a Reboot and a Freeze Scheduled; once they are retired, neither event is active, and
    neither is cancelled: their end was not seen. ``observer-killed``, run second: once web-3, killed, has been
    silent past the threshold while the others, still reporting, saw the Reboot end, the event is completed, no
    longer active, its alert resolved. Before the threshold, both are active."""
    run, stopped_db = _run(tmp_path / "stopped", ch_path, "stopped-scheduled")
    truth, faulted = _finish(run)
    assert sorted((f.vm_name, f.kind) for f in faulted) == [("web-0", "stop"), ("web-1", "stop"), ("web-2", "stop")]
    ids = {r["label"]: r["event_id"] for r in truth}
    assert {(r["outcome"], r["started_at"]) for r in truth} == {("active", None)}  # still Scheduled at the end
    finals = ch.query(f"SELECT vm_name, final FROM {stopped_db}.vm_status ORDER BY vm_name").result_rows
    assert finals == [("web-0", True), ("web-1", True), ("web-2", True)], "a clean stop's last word"
    for event_id in ids.values():
        assert not any(_seen(ch, stopped_db, event_id).values())
    assert _state(ch, stopped_db, ids["reboot"]) == ("active", True, True), "stopped moments ago: not silent yet"

    run, killed_db = _run(tmp_path / "killed", ch_path, "observer-killed")
    truth, faulted = _finish(run)
    assert [(f.vm_name, f.kind) for f in faulted] == [("web-3", "kill")]
    (reboot,) = {r["event_id"] for r in truth}
    assert {r["outcome"] for r in truth} == {"completed"}
    assert _seen(ch, killed_db, reboot) == {"web-0": True, "web-1": True, "web-2": True, "web-3": False}
    assert _state(ch, killed_db, reboot) == ("active", True, True), "web-3 is not silent yet"

    _wait_silent(ch, killed_db, ["web-3"])  # the first run's collectors stopped before web-3 was killed
    # web-0..2 stopped cleanly at the end of the second run, well after web-3 was killed: within the threshold
    states = dict(ch.query(f"SELECT vm_name, state FROM {killed_db}.vm_status").result_rows)
    assert states == {"web-0": "reporting", "web-1": "reporting", "web-2": "reporting", "web-3": "silent"}
    retired = ch.query(f"SELECT DISTINCT state FROM {stopped_db}.vm_status").result_rows
    after = {
        "stopped reboot": _state(ch, stopped_db, ids["reboot"]),
        "stopped freeze": _state(ch, stopped_db, ids["freeze"])[:2],
        "killed reboot": _state(ch, killed_db, reboot),
    }
    assert retired == [("retired",)]
    assert after == {
        "stopped reboot": ("end_not_seen", False, False),
        "stopped freeze": ("end_not_seen", False),
        "killed reboot": ("completed", False, False),
    }
