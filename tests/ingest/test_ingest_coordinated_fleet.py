"""The coordinator on the embedded default, end to end (issue 28): real collector processes on a simulated
three-VM availability set, their drain hooks, the ingest, the coordinator beside it (``demo.coordination``: the
loop of ``sevents-ingest coordinate``, local leases) approving through the simulator's Maintenance API.

Hooks of 1, 3 and 5 s: one acknowledge, after the last VM recorded its hook succeeded, and the event starts then
(the simulator releases it for every VM in Resources); no VM is rebooted mid-drain. One hook failing or hanging:
nothing is approved, the coordinator leaves the event to the platform, and it starts at NotBefore.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from demo.fleetrun import start

pytestmark = pytest.mark.slow

VMS = ("app-0", "app-1", "app-2")
SPEED = 20.0
APPROVAL_COLUMNS = ("vm_name", "decision", "rule", "hook_exit", "hook_ms", "http_status", "decided_at")


def _scenario(tmp_path: Path, hook: str, notice: float, timeout_s: float = 30) -> Path:
    """Three VMs in one fault domain (all in the Reboot's Resources); ``hook``: Python run with the event as
    ``e``; ``notice``: scenario seconds to NotBefore (SPEED of them a wall second)."""
    argv = json.dumps(["{python}", "-c", f"import json, sys, time; e = json.load(sys.stdin); {hook}"])
    path = tmp_path / "three.toml"
    path.write_text(
        f"""name = "three-hooks"
speed = {SPEED}

[fleet]
resource_group = "sevents-demo"
downtime = true
[[fleet.groups]]
name = "app"
kind = "availability-set"
size = 3
fault_domains = 1

[[events]]
label = "reboot"
group = "app"
type = "Reboot"
description = "Host server is undergoing maintenance."
at = 20
notice = {notice}
started_for = 100

[collector_approval]
event_types = ["Reboot"]
sources = ["Platform"]
pre_hook = {argv}
hook_timeout_s = {timeout_s}
"""
    )
    return path


def _run(tmp_path: Path, ch_path: Path, scenario: Path) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the scenario to its end: the simulator's approvals, its truth for the Reboot, and every approval
    record stored (the collectors' and the coordinator's)."""
    database = "coord_" + uuid.uuid4().hex[:8]
    run = start(
        tmp_path / "run",
        scenario=str(scenario),
        poll_interval=0.5,
        heartbeat_interval=1.0,
        batch_max_wait=0.2,
        clickhouse=f"chdb://{ch_path}",
        database=database,
        processes=True,
    )
    try:
        assert run.sim.wait_done(180), run.sim.status()
        run.finish()
        sql = f"SELECT {', '.join(APPROVAL_COLUMNS)} FROM {database}.approvals FINAL ORDER BY decided_at, vm_name"
        rows = [dict(zip(APPROVAL_COLUMNS, r, strict=True)) for r in run.client.query(sql).result_rows]
        return run.sim.approvals(), run.sim.truth(), rows
    finally:
        run.close()


def _at(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def test_three_vms_with_hooks_of_1_3_5_s_are_approved_once_the_last_hook_succeeded(
    ch: Any, ch_path: Path, tmp_path: Path
) -> None:
    hook = "time.sleep({'app-0': 1, 'app-1': 3, 'app-2': 5}[e['vm_name']])"
    approvals, truth, rows = _run(tmp_path, ch_path, _scenario(tmp_path, hook, notice=600))

    (approval,) = approvals  # one approval of the event, through the Maintenance API, on one VM's resource
    acked_at, acked_vm, _, how = approval
    assert how == "maintenance" and acked_vm in VMS
    ready = {r["vm_name"]: r for r in rows if r["decision"] == "ready"}
    assert sorted(ready) == list(VMS)
    # each hook took at least its sleep; how much longer (its interpreter's start) is the machine's load, not ours
    took = [ready[vm]["hook_ms"] / 1000 for vm in VMS]
    assert took == sorted(took) and all(t >= slept for t, slept in zip(took, (1, 3, 5), strict=True))
    last_ready = max(_at(r["decided_at"]) for r in ready.values())
    assert acked_at > last_ready  # after the last hook succeeded, and not before
    (ours,) = [r for r in rows if r["vm_name"] == "coordinator-demo"]
    assert (ours["decision"], ours["rule"], ours["http_status"]) == ("approved", "coordinator", 200)
    assert not [r for r in rows if r["decision"] in ("hook_interrupted", "approved") and r is not ours]
    for fact in truth:  # released for every VM in Resources by the one acknowledge, well before NotBefore
        assert fact["approved_at"] == acked_at == fact["started_at"] < fact["not_before"]
    first_seen = min(fact["first_visible_at"] for fact in truth)
    print(
        "three-VM set (s after the event appeared): ready",
        {vm: round((_at(ready[vm]["decided_at"]) - first_seen).total_seconds(), 2) for vm in VMS},
        "acknowledged",
        round((acked_at - first_seen).total_seconds(), 2),
        "started",
        round((truth[0]["started_at"] - first_seen).total_seconds(), 2),
        "NotBefore",
        round((truth[0]["not_before"] - first_seen).total_seconds(), 2),
    )


@pytest.mark.parametrize(
    ("hook", "decision"),
    [
        ("sys.exit(3 if e['vm_name'] == 'app-2' else 0)", "hook_failed"),
        ("time.sleep(3600 if e['vm_name'] == 'app-2' else 1)", "hook_timeout"),
    ],
    ids=["fails", "hangs"],
)
def test_a_failing_or_hanging_hook_means_nothing_approved_and_the_event_starts_at_not_before(
    ch: Any, ch_path: Path, tmp_path: Path, hook: str, decision: str
) -> None:
    approvals, truth, rows = _run(tmp_path, ch_path, _scenario(tmp_path, hook, notice=300, timeout_s=3))

    assert approvals == []  # neither through IMDS nor through the Maintenance API
    outcomes = {r["vm_name"]: r["decision"] for r in rows if r["vm_name"] in VMS}
    assert outcomes == {"app-0": "ready", "app-1": "ready", "app-2": decision}
    (ours,) = [r for r in rows if r["vm_name"] == "coordinator-demo"]
    assert (ours["decision"], ours["rule"], ours["http_status"]) == ("not_covered", "hook_failed", None)
    for fact in truth:
        assert fact["approved_at"] is None
        assert fact["started_at"] - fact["not_before"] < timedelta(seconds=1)  # the platform's NotBefore
        assert fact["started_at"] >= fact["not_before"]
