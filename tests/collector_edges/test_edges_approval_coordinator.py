"""Events naming several VMs (issue 28 item 1, the collector's side): with ``multi_vm = "coordinator"`` (the
default) each VM drains and records ``ready``, and none approves; only ``"approve-without-waiting"`` lets the
approver go ahead alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from collector.approval import ApprovalPolicy
from collector.settings import CollectorSettings
from collector.wiring import build_agent
from tests.collector_edges.fake_imds import FakeImds, event


def _poll(settings: CollectorSettings, policy: ApprovalPolicy) -> list[dict[str, Any]]:
    agent = build_agent(settings, approval=policy)
    try:
        agent.poll_once()
        rows = [json.loads(r.payload) for r in agent.outbox.pending(limit=10_000)]
        return [r for r in rows if r["record_type"] == "approval"]
    finally:
        agent.close()


def _several(event_id: str, resources: tuple[str, ...] = ("web-0", "web-1", "web-2")) -> dict[str, Any]:
    return {**event(event_id), "Resources": list(resources)}


def _policy(tmp_path: Path, code: str = "", **kw: Any) -> ApprovalPolicy:
    runs = tmp_path / "runs"
    hook = (sys.executable, "-c", f"open({str(runs)!r}, 'a').write('run\\n'); {code}")
    return ApprovalPolicy(enabled=True, event_types=("Reboot",), pre_hook=hook, **kw)


def _outcomes(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (r["event_id"], r["decision"], r["rule"], r["approver"], r["hook_exit"], r["http_status"]) for r in rows
    )


def test_with_a_coordinator_every_vm_drains_records_ready_and_none_approves(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """web-0 is first in Resources, yet it POSTs nothing for the three-VM event; the single-VM event keeps today's
    path (approved through IMDS)."""
    imds.set_document(1, [_several("M1"), event("S1")])
    rows = _poll(settings, _policy(tmp_path, multi_vm="coordinator"))
    assert _outcomes(rows) == [
        ("M1", "ready", "coordinator", "coordinator", 0, None),
        ("S1", "approved", "first-in-resources", "web-0", 0, 200),
    ]
    assert [body["StartRequests"] for _, body in imds.posts] == [[{"EventId": "S1"}]]
    assert len((tmp_path / "runs").read_text().splitlines()) == 2  # both drained


def test_with_a_coordinator_a_failed_hook_is_recorded_and_nothing_is_sent(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    imds.set_document(1, [_several("M1")])
    rows = _poll(settings, _policy(tmp_path, "raise SystemExit(3)", multi_vm="coordinator"))
    assert _outcomes(rows) == [("M1", "hook_failed", "coordinator", "coordinator", 3, None)]
    assert imds.posts == []


def test_with_a_coordinator_a_dry_run_records_no_readiness_a_coordinator_would_act_on(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    imds.set_document(1, [_several("M1")])
    rows = _poll(settings, _policy(tmp_path, multi_vm="coordinator", dry_run=True))
    assert _outcomes(rows) == [("M1", "left_to_approver", "coordinator", "coordinator", None, None)]
    assert imds.posts == []


def test_unset_is_the_coordinator_none_approves_and_only_approve_without_waiting_lets_the_first_vm_go_alone(
    imds: FakeImds, settings: CollectorSettings, tmp_path: Path
) -> None:
    """Left unset, an event naming several VMs waits for the coordinator (it starts at NotBefore if none runs, never
    while a VM still drains); "approve-without-waiting" is the old path, said in so many words."""
    imds.set_document(1, [_several("M1")])
    rows = _poll(settings, _policy(tmp_path))
    assert _outcomes(rows) == [("M1", "ready", "coordinator", "coordinator", 0, None)]
    assert imds.posts == []
    imds.set_document(2, [_several("M2")])
    rows = _poll(settings, _policy(tmp_path, multi_vm="approve-without-waiting"))
    assert ("M2", "approved", "first-in-resources", "web-0", 0, 200) in _outcomes(rows)
