"""Whole-scenario checks: the problems that only show once every event, group, approval and fault is parsed."""

from __future__ import annotations

from collections.abc import Collection

from simulator.fleet import build_fleet
from simulator.scenario import FAULT_LIMITS, Scenario


def cross_check(s: Scenario, groups: Collection[str]) -> list[str]:
    """The problems only the whole scenario shows: references between events, groups and VMs, loops, limits."""
    problems: list[str] = []
    fleet = build_fleet(s.fleet)
    names = {vm.name for vm in fleet}
    labels = [e.label for e in s.events]
    if len(set(labels)) != len(labels):
        problems.append("events: labels must be unique")
    if s.speed <= 0:
        problems.append("speed: must be positive")
    for e in s.events:
        members = {vm.name: vm for vm in fleet if vm.group == e.group}
        if e.group and e.group not in groups:
            problems.append(f"event {e.label}: unknown group {e.group!r}")
        if e.after and e.after not in labels:
            problems.append(f"event {e.label}: 'after' names unknown event {e.after!r}")
        problems.extend(f"event {e.label}: {v!r} is not a VM of group {e.group!r}" for v in e.vms if v not in members)
        if e.fault_domain is not None and members and all(vm.fault_domain != e.fault_domain for vm in members.values()):
            problems.append(f"event {e.label}: group {e.group!r} has no VM in fault domain {e.fault_domain}")
        times = (
            e.at_s or 0.0,
            e.gap_s,
            e.notice_s,
            e.started_for_s,
            e.start_delay_s,
            e.cancel_after_s or 0.0,
            e.down_s,
        )
        if min(times) < 0:
            problems.append(f"event {e.label}: times must not be negative")
    problems.extend(_cycles(s))
    wave_labels = {e.wave for e in s.events if e.wave}
    for a in s.approvals:
        if a.event != "*" and a.event not in labels and a.event not in wave_labels:
            problems.append(f"approval: unknown event {a.event!r}")
        if a.by not in ("first", "all") and a.by not in names:
            problems.append(f"approval: 'by' must be first, all or a VM name, not {a.by!r}")
    for fault in s.faults:
        problems.extend(f"fault: unknown VM {v!r}" for v in fault.vms if v != "*" and v not in names)
        if fault.count < 1 or fault.retry_after_s < 0 or fault.seconds < 0 or fault.at_s < 0:
            problems.append("fault: count must be at least 1; at, retry_after and seconds must not be negative")
        numbers = {"count": fault.count, "retry_after": fault.retry_after_s, "seconds": fault.seconds}
        problems.extend(
            f"fault: {k} must be at most {FAULT_LIMITS[k]}" for k, v in numbers.items() if v > FAULT_LIMITS[k]
        )
    for pause in s.pauses:
        problems.extend(f"pause: unknown VM {v!r}" for v in pause.vms if v not in names)
        if not pause.vms or pause.at_s < 0 or not 0 < pause.down_s <= FAULT_LIMITS["seconds"]:
            problems.append(f"pause: needs vms, at >= 0 and 0 < down <= {FAULT_LIMITS['seconds']:g}")
    for cf in s.collector_faults:
        problems.extend(f"collector fault: unknown VM {v!r}" for v in cf.vms if v != "*" and v not in names)
        if not cf.vms or cf.at_s < 0:
            problems.append("collector fault: needs vms and at >= 0")
    if s.end_s is not None and s.end_s <= 0:
        problems.append("end: must be positive")
    ids = [e.event_id for e in s.events if e.event_id]
    if len(set(ids)) != len(ids):
        problems.append("events: explicit ids must be unique")
    for r in s.resets:
        if r.group and r.group not in groups:
            problems.append(f"reset: unknown group {r.group!r}")
    return problems


def _cycles(s: Scenario) -> list[str]:
    """Events whose ``after`` chain loops back on itself would never appear."""
    after = {e.label: e.after for e in s.events}
    problems = []
    for label in after:
        seen, current = set(), label
        while after.get(current):
            if current in seen:
                problems.append(f"event {label}: its 'after' chain loops")
                break
            seen.add(current)
            current = after[current]
    return problems
