"""Observed impact end to end: collector processes really paused and rebooted, their downtime stored and rolled up.

The simulator's ``vm-downtime`` scenario takes web-0 down for its Freeze (4 s), web-1 for its Reboot (5 s) and
web-2 for a pause no event announces (3 s); web-3 sees both events and keeps running. ``demo.processes`` does
that to real ``sevents-collector run`` processes (SIGSTOP/SIGCONT; SIGKILL and a start with a new boot id).
Each figure is compared with what the system could know: when the process was really stopped and resumed.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo.fleetrun import start
from demo.processes import Applied
from ingest import queries

PAUSE_MIN_S = 1.5  # the collector's default: a tick later than this would itself have been a pause
CLOCKS_S = 0.05  # millisecond wire times, /proc's start time in clock ticks, boot-time to wall-time conversion


def _one(items: list[Any]) -> Any:
    assert len(items) == 1, items
    return items[0]


@pytest.mark.slow
def test_collectors_measure_the_downtime_their_vms_really_had(ch: Any, ch_path: Path, tmp_path: Path) -> None:
    database = "down_" + uuid.uuid4().hex[:8]
    began = datetime.now(UTC)
    run = start(
        tmp_path,
        scenario="vm-downtime",
        poll_interval=0.5,
        heartbeat_interval=2.0,
        batch_max_wait=0.2,
        clickhouse=f"chdb://{ch_path}",
        database=database,
        processes=True,
    )
    try:
        assert run.sim.wait_done(120), run.sim.status()
        run.finish()
        assert run.downtimes is not None
        applied = {a.span.vm_name: a for a in run.downtimes.applied}
        ids = {row["label"]: row["event_id"] for row in run.sim.truth()}
        window = {"since": began - timedelta(minutes=1), "until": datetime.now(UTC) + timedelta(minutes=1)}
        impacts = queries.run(ch, queries.DOWNTIME, database, **window).dicts()
        reads = dict(ch.query(f"SELECT vm_name, read_at FROM {database}.impacts FINAL").result_rows)
        served = {vm: run.sim.served(vm) for vm in reads}
        pairs = ch.query(
            f"SELECT event_id, vm_name, observed_impact_s FROM {database}.event_vms ORDER BY event_id, vm_name"
        ).result_rows
        events = {e["event_id"]: e for e in queries.run(ch, queries.EVENTS_IN_WINDOW, database, **window).dicts()}
        # the Impact table's own view gives events' values for its columns, measured downtime included
        shown = "event_id, duration_s, started_at, ended_at, observed_impact_s, impacted_vms, affected_vm_count"
        narrow = f"SELECT {shown} FROM {database}.event_impacts_since(since_day = toDate('1970-01-01'))"
        assert sorted(ch.query(narrow).result_rows) == sorted(
            ch.query(f"SELECT {shown} FROM {database}.events").result_rows
        )
    finally:
        run.close()

    assert sorted(applied) == ["web-0", "web-1", "web-2"]
    by_vm: dict[str, list[dict[str, Any]]] = {}
    for row in impacts:
        by_vm.setdefault(row["vm_name"], []).append(row)
    assert sorted(by_vm) == ["web-0", "web-1", "web-2"]  # web-3 was never down: it reports nothing

    freeze, reboot, pause = _one(by_vm["web-0"]), _one(by_vm["web-1"]), _one(by_vm["web-2"])
    assert (freeze["detected_by"], freeze["event_id"]) == ("pause", ids["freeze"])
    assert (reboot["detected_by"], reboot["event_id"]) == ("reboot", ids["reboot"])
    assert (pause["detected_by"], pause["event_id"]) == ("pause", "")
    for row, vm in ((freeze, "web-0"), (reboot, "web-1"), (pause, "web-2")):
        _covers_what_was_done(row, applied[vm])
        _stored_by_the_first_read_after_it(reads[vm], row, served[vm])

    observed = {(event_id, vm): seconds for event_id, vm, seconds in pairs}
    assert observed[(ids["freeze"], "web-0")] == pytest.approx(freeze["duration_s"])
    assert observed[(ids["reboot"], "web-1")] == pytest.approx(reboot["duration_s"])
    hit = {key for key, seconds in observed.items() if seconds is not None}
    assert hit == {(ids["freeze"], "web-0"), (ids["reboot"], "web-1")}  # every other VM of the set: NULL
    for label, row in (("freeze", freeze), ("reboot", reboot)):
        event = events[ids[label]]
        assert event["impacted_vms"] == 1
        assert event["observed_impact_s"] == pytest.approx(row["duration_s"])
        assert event["started_to_gone_s"] > event["observed_impact_s"]  # Started lasts longer than the downtime


def _stored_by_the_first_read_after_it(read_at: datetime | None, row: dict[str, Any], served: list[datetime]) -> None:
    """Each downtime carries the moment its collector read IMDS after it, never before the downtime ended (the
    answer read then may have been in flight across a pause: an end found at the next read is then taken as seen)."""
    assert read_at is not None
    read_at = read_at.replace(tzinfo=UTC)  # the embedded engine hands DateTime64('UTC') back naive
    ended = row["began_at"].replace(tzinfo=UTC) + timedelta(seconds=row["duration_s"])
    assert read_at >= ended
    assert any(answer <= read_at + timedelta(seconds=CLOCKS_S) for answer in served), read_at


def _covers_what_was_done(row: dict[str, Any], applied: Applied) -> None:
    """The measured stretch runs from the last moment the collector ran before it was stopped (its last tick or
    beat) to the first after it was resumed or started again: it covers the real stop, and begins shortly before."""
    assert applied.up_at is not None
    clocks = timedelta(seconds=CLOCKS_S)
    began = row["began_at"]
    ended = began + timedelta(seconds=row["duration_s"])
    assert applied.down_at - timedelta(seconds=PAUSE_MIN_S) <= began <= applied.down_at + clocks
    assert ended >= applied.up_at - clocks
    assert row["duration_s"] >= (applied.up_at - applied.down_at).total_seconds() - 2 * CLOCKS_S
