"""The approval audit trail: the collector's approval records stored in ``approvals``, read back per event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from collector.enrich import approval_record
from collector.model import ApprovalOutcome, Event, VmIdentity
from demo import synthetic
from ingest import queries
from ingest.handler import Handler
from sevents import contract, records

from .conftest import deliveries, scalar

NOW = datetime(2026, 11, 21, 23, 0, tzinfo=UTC)


def _vm(index: int) -> VmIdentity:
    base = synthetic.vm(index)
    return VmIdentity(**{name: base[name] for name in contract.names(contract.VM)})


def _record(vm: VmIdentity, outcome: ApprovalOutcome, seq: int) -> dict[str, Any]:
    event = Event(
        "E-1",
        "Reboot",
        "VirtualMachine",
        ("web-0", "web-1"),
        "Scheduled",
        NOW + timedelta(minutes=15),
        "",
        "Platform",
        5,
    )
    built = approval_record(outcome, event, vm, api_version="2020-07-01", collector_version="test")
    return {**built, "seq": seq}


def test_every_decision_is_stored_once_with_its_rule_hook_and_http_outcome(ch: Any, db: str, handler: Handler) -> None:
    """Approved by web-0 after a 2.5 s hook (14 min 57.5 s of notice saved); web-1 drained and left it to web-0."""
    decided = NOW + timedelta(seconds=2.5)
    approved = _record(_vm(0), ApprovalOutcome("approved", "first-in-resources", "web-0", decided, 0, 2500, 200), 1)
    left = _record(_vm(1), ApprovalOutcome("left_to_approver", "first-in-resources", "web-0", decided, 0, 2400), 1)
    handler(deliveries([approved, left, approved]))  # delivered twice: stored once
    assert scalar(ch, f"SELECT count() FROM {db}.dead_letters") == 0
    rows = queries.run(
        ch, queries.APPROVALS, db, since=NOW - timedelta(hours=1), until=NOW + timedelta(hours=1)
    ).dicts()
    assert [(r["vm_name"], r["decision"], r["rule"], r["approver"]) for r in rows] == [
        (approved["vm_name"], "approved", "first-in-resources", "web-0"),
        (left["vm_name"], "left_to_approver", "first-in-resources", "web-0"),
    ]
    assert rows[0]["hook_s"] == 2.5 and rows[0]["http_status"] == 200 and rows[0]["hook_exit"] == 0
    assert rows[0]["notice_saved_s"] == 15 * 60 - 2.5
    assert rows[1]["http_status"] is None and rows[1]["notice_saved_s"] is None
    outside = queries.run(ch, queries.APPROVALS, db, since=NOW + timedelta(hours=1), until=NOW + timedelta(hours=2))
    assert outside.rows == []


def test_a_record_whose_key_does_not_match_is_dead_lettered(ch: Any, db: str, handler: Handler) -> None:
    """A decision outside the contract's list, or an approval_id not derived from (VM, event, decision)."""
    good = _record(_vm(0), ApprovalOutcome("approved", "self", "web-0", NOW, None, None, 200), 1)
    unknown = {**good, "decision": "maybe"}
    forged = {**good, "approval_id": "0" * 32, "record_id": "0" * 32, "seq": 2}
    handler(deliveries([unknown, forged]))
    assert scalar(ch, f"SELECT count() FROM {db}.approvals") == 0
    assert scalar(ch, f"SELECT count() FROM {db}.dead_letters") == 2
    assert records.approval_id(good["vm_id"], "E-1", "approved") == good["approval_id"]
