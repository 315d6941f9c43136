"""The approvals sevents made, end to end: collectors with a policy approve, the ingest stores, the dashboards show."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dashboards.templating import Selection
from demo.fleetrun import start
from tests.dashboards.dash_helpers import all_of, context, dashboards, panel, run
from tests.helpers import eventually


def _everything(client: Any, since: datetime, until: datetime) -> dict[str, Selection]:
    """Every template variable on All, its options from its own query (as Grafana loads them)."""
    chosen: dict[str, Selection] = {}
    for variable in dashboards()["sevents-approval"]["templating"]["list"]:
        if variable["type"] == "query":
            frame = run(client, variable["query"]["rawSql"], chosen, context(since, until))
            chosen[variable["name"]] = all_of(tuple(str(row[0]) for row in frame.rows))
        elif variable["type"] == "custom":
            chosen[variable["name"]] = all_of(tuple(o["value"] for o in variable["options"]))
    chosen.setdefault("event_id", Selection(values=("",), multi=False))
    return chosen


@pytest.mark.slow
def test_the_dashboards_show_who_approved_each_event(ch: Any, ch_path: Path, tmp_path: Path) -> None:
    """approve-drain with a Reboot policy: the first VM in Resources approves after its hook; the approval panels
    name it, its rule and hook, and the event counts as released by sevents, not by someone outside it."""
    config = tmp_path / "collector.toml"
    hook = ", ".join(json.dumps(a) for a in (sys.executable, "-c", "import time; time.sleep(0.2)"))
    # the event names two VMs: approved by the first without waiting for the other (no coordinator runs here)
    policy = f'event_types = ["Reboot"]\npre_hook = [{hook}]\nmulti_vm = "approve-without-waiting"\n'
    config.write_text(f"[collector]\n\n[approval]\n{policy}")
    began = datetime.now(UTC)
    fleet = start(
        tmp_path / "run",
        scenario="approve-drain",
        speed=20,
        poll_interval=0.1,
        heartbeat_interval=1.0,
        batch_max_wait=0.2,
        clickhouse=f"chdb://{ch_path}",
        database="sevents",
        approval=config,
    )
    try:
        assert fleet.sim.wait_done(60), fleet.sim.status()
        fleet.finish()
        truth = [t for t in fleet.sim.truth() if t["affected"]]
        approvals = fleet.sim.approvals()
        since, until = began - timedelta(minutes=1), datetime.now(UTC) + timedelta(minutes=1)
        chosen = _everything(fleet.client, since, until)
        ours = run(fleet.client, panel("sevents-approval", "Approved by sevents").sql, chosen, context(since, until))
        released = run(
            fleet.client, panel("sevents-approval", "Who released the event").sql, chosen, context(since, until)
        )
        decisions = run(
            fleet.client, panel("sevents-approval", "Approval policy decisions").sql, chosen, context(since, until)
        )
    finally:
        fleet.close()
    (fact,) = {t["event_id"]: t for t in truth}.values()
    assert [vm for _, vm, _, how in approvals] == [fact["resources"][0]]
    (row,) = ours.dicts()
    assert (row["event_id"], row["approved_by"], row["rule"]) == (
        fact["event_id"],
        fact["resources"][0],
        "first-in-resources",
    )
    assert row["hook_exit"] == 0 and row["hook_s"] >= 0.2 and row["http_status"] == 200
    # notice saved: from the approval to NotBefore, as the simulator had them (a second's rounding of NotBefore)
    saved = (fact["not_before"] - fact["approved_at"]).total_seconds()
    assert abs(row["notice_saved_s"] - saved) <= 1.5
    assert dict(released.rows) == {"sevents policy (StartRequests)": 1}
    counts = {(r["decision"], r["rule"]): r["decisions"] for r in decisions.dicts()}
    assert counts == {("approved", "first-in-resources"): 1, ("left_to_approver", "first-in-resources"): 1}


# -- users' own reboots (issue 28 item 2) -----------------------------------------------------------------------

USER_REBOOT = """name = "user-reboot-waits"
speed = 60

[fleet]
[[fleet.groups]]
name = "solo"
kind = "standalone"
size = 1

[[events]]
label = "reboot"
group = "solo"
type = "Reboot"
source = "User"
at = 2
notice = 600
started_for = 60

[collector_approval]
event_types = ["Reboot"]
sources = ["Platform"]
"""


def _user_waits(client: Any, ch_path: Path, event_id: str, since: datetime) -> tuple[list[Any], list[Any]]:
    """The event's rows in the approval dashboard's panel and in ``sevents-ingest audit user-waits``."""
    from ingest import cli

    until = datetime.now(UTC) + timedelta(minutes=1)
    chosen = _everything(client, since, until)
    shown = run(
        client, panel("sevents-approval", "User-initiated events that waited").sql, chosen, context(since, until)
    )
    argv = ["audit", "user-waits", "--since", "15m", "--clickhouse", f"chdb://{ch_path}", "--format", "json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(argv) == 0
    audited = [r for r in json.loads(out.getvalue()) if r["event_id"] == event_id]
    return [r for r in shown.dicts() if r["event_id"] == event_id], audited


@pytest.mark.slow
@pytest.mark.parametrize("preset", [False, True], ids=["without-preset", "approve-user-initiated"])
def test_a_user_initiated_reboot_waits_for_not_before_unless_the_preset_approves_it(
    ch: Any, ch_path: Path, tmp_path: Path, preset: bool
) -> None:
    """A user's Reboot of a polled VM, under a policy for the platform's Reboots only: without the preset the panel
    and the audit show it waiting while Scheduled, then released by NotBefore after the whole notice; with
    approve_user_initiated it is approved at the poll that first saw it (before the VM's next answer), and both
    show it released by sevents with that wait, next to nothing."""
    scenario = tmp_path / "user-reboot.toml"
    scenario.write_text(USER_REBOOT + ("approve_user_initiated = true\n" if preset else ""))
    began = datetime.now(UTC)
    fleet = start(
        tmp_path / "run",
        scenario=str(scenario),
        poll_interval=0.2,
        heartbeat_interval=1.0,
        batch_max_wait=0.2,
        clickhouse=f"chdb://{ch_path}",
        database="sevents",
    )
    waiting: list[Any] = []

    def shown_waiting() -> bool:
        ids = [t["event_id"] for t in fleet.sim.truth() if t["first_visible_at"] is not None]
        shown = _user_waits(fleet.client, ch_path, ids[0], began)[0] if ids else []
        waiting[:] = [r for r in shown if r["wait_state"] == "waiting"]
        return bool(waiting)

    try:
        if not preset:  # Scheduled: shown waiting (asserted below, after the run)
            eventually(shown_waiting, 60, interval=0.2)
        assert fleet.sim.wait_done(60), fleet.sim.status()
        fleet.finish()
        (fact,) = fleet.sim.truth()
        answers = fleet.sim.served(fact["vm_name"])
        (row,), (audited,) = _user_waits(fleet.client, ch_path, fact["event_id"], began)
    finally:
        fleet.close()
    assert (row["vm_name"], row["event_type"], row["wait_state"]) == (fact["vm_name"], "Reboot", "released")
    assert {k: audited[k] for k in ("vm_name", "wait_state", "released_by")} == {
        "vm_name": row["vm_name"],
        "wait_state": "released",
        "released_by": row["released_by"],
    }
    assert audited["waited_s"] == pytest.approx(row["waited_s"], abs=0.002)
    seen = row["first_seen_at"]
    if preset:
        (approval,) = fleet.sim.approvals()
        after = [t for t in answers if t >= fact["first_visible_at"]]
        assert approval[0] < after[1]  # approved within the poll that first saw it
        assert row["released_by"] == "sevents" and row["waited_s"] <= (after[1] - after[0]).total_seconds()
    else:
        assert waiting and waiting[0]["waited_s"] >= 0  # the panel showed it waiting while it was Scheduled
        assert fleet.sim.approvals() == [] and row["released_by"] == "not_before"
        assert fact["started_at"] >= fact["not_before"]
        # from its first sight to its start at NotBefore: the whole notice (each end seen within one poll)
        assert row["waited_s"] == pytest.approx((fact["started_at"] - seen).total_seconds(), abs=0.2 + 0.5)
        assert row["waited_s"] > 0.9 * (fact["not_before"] - fact["first_visible_at"]).total_seconds()
    print("user-initiated Reboot,", "preset" if preset else "no preset", ": waited", row["waited_s"], "s")
