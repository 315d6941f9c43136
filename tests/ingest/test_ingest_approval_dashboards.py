"""The approvals sevents made, end to end: collectors with a policy approve, the ingest stores, the dashboards show."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dashboards.templating import Selection
from demo.fleetrun import start
from tests.dashboards.dash_helpers import all_of, context, dashboards, panel, run


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
