"""``[approval] multi_vm``: who approves an event naming several VMs (pure decision and the table)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.approval import ACT, DRAIN_ONLY, SKIP, ApprovalPolicy, decide, parse_policy
from collector.model import Event
from tests.tiers import examples

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
NAMES = ("vm0", "VM0", "vm1", "vm2")


def _event(resources: tuple[str, ...]) -> Event:
    return Event("E", "Reboot", "VirtualMachine", resources, "Scheduled", NOW, "", "Platform", 5)


@settings(max_examples=examples(500))
@given(
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map(tuple), st.sampled_from(("first-in-resources", "self"))
)
def test_with_a_coordinator_no_vm_acts_on_an_event_naming_several(resources: tuple[str, ...], approver: str) -> None:
    """Several distinct VMs: every covered VM drains only (the coordinator approves); one VM: today's path."""
    policy = ApprovalPolicy(enabled=True, event_types=("Reboot",), approver=approver, multi_vm="coordinator")
    several = len({r.lower() for r in resources}) > 1
    for vm in {r.lower() for r in resources}:
        decision = decide(policy, _event(resources), vm, NOW)
        if several:
            assert (decision.action, decision.rule, decision.approver) == (DRAIN_ONLY, "coordinator", "coordinator")
        else:
            assert decision.action == ACT
    assert decide(policy, _event(resources), "other", NOW).action == SKIP


def test_the_table_reads_multi_vm_and_refuses_anything_else(tmp_path: Path) -> None:
    policy, problems = parse_policy({"event_types": ["Reboot"], "multi_vm": "coordinator"}, "t")
    assert problems == [] and policy.multi_vm == "coordinator"
    policy, problems = parse_policy({"event_types": ["Reboot"]}, "t")
    assert problems == [] and policy.multi_vm == "coordinator"  # unset: wait for the coordinator, the safe way
    _, problems = parse_policy({"event_types": ["Reboot"], "multi_vm": "wait"}, "t")
    assert any("multi_vm must be one of coordinator, approve-without-waiting" in p for p in problems)


@pytest.mark.parametrize("value", ["coordinator", "approve-without-waiting"])
def test_both_values_are_accepted(value: str) -> None:
    assert parse_policy({"event_types": ["Reboot"], "multi_vm": value}, "t")[1] == []
