"""Compare the ``events`` view with a simulator's ground truth (pure): which numbers agree, within what.

Timestamps agree when they differ by at most ``tolerance_s`` (a collector sees a change up to one poll
interval late, so one poll interval plus a little scheduling slack). Durations derived from two observed
times (notice, approval latency, impact) get the same tolerance: both ends lag by less than one interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

TIMES = ("first_seen_at", "not_before_first", "approved_at", "started_at", "ended_at")
DURATIONS = ("notice_s", "approval_latency_s", "impact_s")
EXACT = ("event_type", "event_source", "description", "duration_s", "outcome", "affected_vms", "fault_domains")


@dataclass(frozen=True)
class Check:
    """One number or value of one event, ours against the truth."""

    event_id: str
    label: str
    field: str
    ours: Any
    truth: Any
    ok: bool
    delta_s: float | None = None


def truth_events(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The simulator's per-(event, VM) truth rows folded into one row per event, in the ``events`` shape."""
    events: dict[str, dict[str, Any]] = {}
    for row in rows:
        e = events.setdefault(
            row["event_id"],
            {
                "event_id": row["event_id"],
                "label": row.get("label", ""),
                "event_type": row["event_type"],
                "event_source": row["event_source"],
                "description": row["description"],
                "duration_s": row["duration_s"],
                "first_seen_at": row["first_visible_at"],
                "not_before_first": row["not_before"],
                "approved_at": row["approved_at"],
                "started_at": row["started_at"],
                "ended_at": row["ended_at"],
                "outcome": row["outcome"],
                "affected_vms": sorted(row["resources"]),
                "fault_domains": set(),
            },
        )
        if row["vm_name"] in row["resources"] and row["fault_domain"] is not None:
            e["fault_domains"].add(row["fault_domain"])
    for e in events.values():
        e["fault_domains"] = sorted(e["fault_domains"])
        e["notice_s"] = _span(e["first_seen_at"], e["started_at"])
        e["approval_latency_s"] = _span(e["first_seen_at"], e["approved_at"])
        e["impact_s"] = _span(e["started_at"], e["ended_at"]) if e["ended_at"] and e["started_at"] else None
    return events


def compare(
    ours: Sequence[Mapping[str, Any]], truth_rows: Iterable[Mapping[str, Any]], tolerance_s: float
) -> list[Check]:
    """Every compared value of every event in the truth (an event we never stored fails every check)."""
    truth = truth_events(truth_rows)
    by_id = {row["event_id"]: row for row in ours}
    checks: list[Check] = []
    for event_id, t in truth.items():
        mine = by_id.get(event_id, {})
        for name in EXACT:
            a, b = _norm(mine.get(name)), _norm(t[name])
            checks.append(Check(event_id, t["label"], name, a, b, a == b))
        for name in TIMES + DURATIONS:
            a, b = mine.get(name), t[name]
            if a is None or b is None:
                checks.append(Check(event_id, t["label"], name, a, b, a is None and b is None))
                continue
            delta = (a - b).total_seconds() if isinstance(a, datetime) else float(a) - float(b)
            checks.append(Check(event_id, t["label"], name, a, b, abs(delta) <= tolerance_s, delta))
    for event_id in by_id.keys() - truth.keys():
        checks.append(Check(event_id, "", "event_id", event_id, None, False))
    return checks


def fault_domain_truth(truth_rows: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per fault domain, over affected (event, VM) pairs: events, mean approval latency and impact."""
    acc: dict[int, dict[str, list[float] | set[str]]] = {}
    for row in truth_rows:
        if row["vm_name"] not in row["resources"] or row["fault_domain"] is None:
            continue
        fd = acc.setdefault(row["fault_domain"], {"events": set(), "latency": [], "impact": []})
        events = fd["events"]
        assert isinstance(events, set)
        events.add(row["event_id"])
        latency, impact = fd["latency"], fd["impact"]
        assert isinstance(latency, list) and isinstance(impact, list)
        if row["approved_at"] is not None:
            latency.append(_span(row["first_visible_at"], row["approved_at"]) or 0.0)
        if row["started_at"] is not None and row["ended_at"] is not None and row["outcome"] == "completed":
            impact.append(_span(row["started_at"], row["ended_at"]) or 0.0)
    return {
        fd: {
            "events": len(v["events"]),
            "avg_approval_latency_s": _mean(v["latency"]),
            "avg_impact_s": _mean(v["impact"]),
        }
        for fd, v in sorted(acc.items())
    }


def _span(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def _mean(values: Any) -> float | None:
    return sum(values) / len(values) if values else None


def _norm(value: Any) -> Any:
    if value == "":
        return None
    if isinstance(value, list | tuple | set):
        return sorted(value)
    return value
