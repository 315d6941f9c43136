"""Compare the ``events`` view with a simulator's ground truth (pure): which numbers agree, within what.

A collector sees a change at its first poll after the change, however late a loaded machine makes that
poll. Given when the simulator answered each VM (``served``), an observed time is checked against exactly
that: it must fall after the answer before the first one that showed the change, and before the answer after
it (a collector stamps a poll between sending it and reading the reply, and polls one at a time). An event's
time is the earliest (first seen, started, approved) or latest (ended) over its VMs, so its window is too;
a duration's window runs from the earliest end minus the latest start to the latest end minus the earliest.

NotBefore is blank once an event started, so it (and the approval, told by a start before it) can be known
only if some VM was answered while the event was visible and not yet started there; when none was, the
pipeline is right to show nothing for them.

Without ``served``, times agree when they differ by at most ``tolerance_s``.

Fault domains are compared inside their set: given ``groups`` (each VM's availability set or scale set, as the
simulator's fleet defines it, never as the pipeline infers it), every event's ``fault_domain_labels`` must be
the true ``set / FD n`` of its affected VMs, and ``fault_domain_truth`` keys its figures by (set, FD).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# event field -> (the truth rows' per-VM field, whether the event takes the earliest VM or the latest)
OBSERVED = {
    "first_seen_at": ("first_visible_at", min),
    "started_at": ("started_at", min),
    "approved_at": ("approved_at", min),
    "ended_at": ("ended_at", max),
}
SPANS = {"notice_s": ("first_seen_at", "started_at"), "approval_latency_s": ("first_seen_at", "approved_at")}
SPANS["started_to_gone_s"] = ("started_at", "ended_at")
Window = tuple[float, float]  # open interval, in POSIX seconds (or seconds for a duration)
NEEDS_NOT_BEFORE = ("not_before_first", "approved_at", "approval_latency_s")

TIMES = ("first_seen_at", "not_before_first", "approved_at", "started_at", "ended_at")
DURATIONS = ("notice_s", "approval_latency_s", "started_to_gone_s")
EXACT = ("event_type", "event_source", "description", "duration_s", "outcome", "affected_vms", "fault_domains")
SCOPED = "fault_domain_labels"  # compared exactly too, when the VMs' groups are known


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


def domain_label(group: str, fault_domain: int) -> str:
    """A fault domain inside its set, as the pipeline labels it: ``web / FD 1``."""
    return f"{group} / FD {fault_domain}"


def truth_events(
    rows: Iterable[Mapping[str, Any]], groups: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """The simulator's per-(event, VM) truth rows folded into one row per event, in the ``events`` shape.

    With ``groups`` (VM name -> its set), each event also gets ``fault_domain_labels``.
    """
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
                SCOPED: set(),
            },
        )
        if row["vm_name"] in row["resources"] and row["fault_domain"] is not None:
            e["fault_domains"].add(row["fault_domain"])
            if groups is not None:
                e[SCOPED].add((groups[row["vm_name"]], row["fault_domain"]))
    for e in events.values():
        e["fault_domains"] = sorted(e["fault_domains"])
        e[SCOPED] = [domain_label(group, fd) for group, fd in sorted(e[SCOPED])]
        e["notice_s"] = _span(e["first_seen_at"], e["started_at"])
        e["approval_latency_s"] = _span(e["first_seen_at"], e["approved_at"])
        e["started_to_gone_s"] = _span(e["started_at"], e["ended_at"]) if e["ended_at"] and e["started_at"] else None
    return events


def compare(
    ours: Sequence[Mapping[str, Any]],
    truth_rows: Iterable[Mapping[str, Any]],
    tolerance_s: float,
    served: Mapping[str, Sequence[datetime]] | None = None,
    groups: Mapping[str, str] | None = None,
) -> list[Check]:
    """Every compared value of every event in the truth (an event we never stored fails every check).

    ``groups`` (VM name -> its set) adds the check of the set-scoped fault domains.
    """
    rows = list(truth_rows)
    truth = truth_events(rows, groups)
    exact = EXACT if groups is None else (*EXACT, SCOPED)
    windows = observation_windows(rows, served) if served is not None else {}
    unknowable = _not_before_unseen(rows, served) if served is not None else set()
    by_id = {row["event_id"]: row for row in ours}
    checks: list[Check] = []
    for event_id, t in truth.items():
        mine = by_id.get(event_id, {})
        if event_id in unknowable:
            t = {**t, **dict.fromkeys(NEEDS_NOT_BEFORE)}
        for name in exact:
            a, b = _norm(mine.get(name)), _norm(t[name])
            checks.append(Check(event_id, t["label"], name, a, b, a == b))
        for name in TIMES + DURATIONS:
            a, b = mine.get(name), t[name]
            if a is None or b is None:
                checks.append(Check(event_id, t["label"], name, a, b, a is None and b is None))
                continue
            delta = (a - b).total_seconds() if isinstance(a, datetime) else float(a) - float(b)
            window = windows.get((event_id, name))
            if window is None:
                ok = abs(delta) <= tolerance_s
            else:
                value = a.timestamp() if isinstance(a, datetime) else float(a)
                ok = window[0] < value < window[1]
            checks.append(Check(event_id, t["label"], name, a, b, ok, delta))
    for event_id in by_id.keys() - truth.keys():
        checks.append(Check(event_id, "", "event_id", event_id, None, False))
    return checks


def compare_downtime(
    ours: Sequence[Mapping[str, Any]],
    truth_rows: Iterable[Mapping[str, Any]],
    unannounced_ours: Sequence[Mapping[str, Any]],
    unannounced_truth: Sequence[Any],
    tolerance_s: float,
    done: Mapping[Any, float] | None = None,
) -> list[Check]:
    """Observed impact against what the simulated VMs really went through (``down_s``, wall seconds).

    Per event: the longest downtime over its VMs within ``tolerance_s`` and how many VMs were hit, exactly. Per
    pause no event announced (``DownSpan``s with no event): one measured on that VM, event-less, within tolerance.
    ``done`` (``DownSpan`` -> seconds) is how long each collector was really stopped where that is known (the
    demo's processes): it replaces the simulator's figure, so a stop resumed late on a loaded machine is not
    counted against the measurement.
    """
    really = {(span.event_id, span.vm_name): seconds for span, seconds in (done or {}).items()}
    hit: dict[str, list[float]] = {}
    labels: dict[str, str] = {}
    for row in truth_rows:
        labels[row["event_id"]] = row.get("label", "")
        downs = hit.setdefault(row["event_id"], [])
        if row.get("down_s") is not None:
            downs.append(really.get((row["event_id"], row["vm_name"]), float(row["down_s"])))
    by_id = {row["event_id"]: row for row in ours}
    checks: list[Check] = []
    for event_id, downs in hit.items():
        mine = by_id.get(event_id, {})
        truth_max = max(downs, default=None)
        observed = mine.get("observed_impact_s")
        if observed is None or truth_max is None:
            ok, delta = observed is None and truth_max is None, None
        else:
            delta = float(observed) - truth_max
            ok = abs(delta) <= tolerance_s
        checks.append(Check(event_id, labels[event_id], "observed_impact_s", observed, truth_max, ok, delta))
        count = mine.get("impacted_vms", 0)
        checks.append(Check(event_id, labels[event_id], "impacted_vms", count, len(downs), count == len(downs)))
    for span in unannounced_truth:
        real = (done or {}).get(span, span.down_s)
        found = [r for r in unannounced_ours if r["vm_name"] == span.vm_name]
        closest = min(found, key=lambda r: abs(r["duration_s"] - real), default=None)
        seconds = None if closest is None else closest["duration_s"]
        delta = None if seconds is None else seconds - real
        ok = delta is not None and abs(delta) <= tolerance_s
        checks.append(Check("", f"{span.label} {span.vm_name}", "unannounced_s", seconds, real, ok, delta))
    return checks


def observation_windows(
    truth_rows: Sequence[Mapping[str, Any]], served: Mapping[str, Sequence[datetime]]
) -> dict[tuple[str, str], Window]:
    """(event_id, field) -> the open interval its observed value must fall in, from when VMs were answered."""
    per_vm: dict[tuple[str, str], list[Window]] = {}
    for row in truth_rows:
        answers = [moment.timestamp() for moment in served.get(row["vm_name"], ())]
        if not answers:
            continue  # no collector polled this VM: it observed nothing
        for name, (field, _) in OBSERVED.items():
            if row.get(field) is not None:
                per_vm.setdefault((row["event_id"], name), []).append(_around(answers, row[field].timestamp()))
    windows: dict[tuple[str, str], Window] = {}
    for (event_id, name), found in per_vm.items():
        pick = OBSERVED[name][1]
        windows[(event_id, name)] = (pick(w[0] for w in found), pick(w[1] for w in found))
    for event_id in {key[0] for key in windows}:
        for name, (start, end) in SPANS.items():
            first, last = windows.get((event_id, start)), windows.get((event_id, end))
            if first is not None and last is not None:
                windows[(event_id, name)] = (last[0] - first[1], last[1] - first[0])
    return windows


def _not_before_unseen(truth_rows: Sequence[Mapping[str, Any]], served: Mapping[str, Sequence[datetime]]) -> set[str]:
    """Events no VM was answered about while they were visible and not yet started (NotBefore never shown)."""
    seen: dict[str, bool] = {}
    for row in truth_rows:
        visible, started = row["first_visible_at"], row["started_at"]
        answered = any(
            visible <= moment and (started is None or moment < started) for moment in served.get(row["vm_name"], ())
        )
        seen[row["event_id"]] = seen.get(row["event_id"], False) or answered
    return {event_id for event_id, any_seen in seen.items() if not any_seen}


def _around(answers: Sequence[float], moment: float) -> Window:
    """Between the answer before the first one at or after ``moment``, and the answer after that one."""
    first = bisect.bisect_left(answers, moment)
    before = answers[first - 1] if first > 0 else float("-inf")
    after = answers[first + 1] if first + 1 < len(answers) else float("inf")
    return before, after


def fault_domain_truth(
    truth_rows: Iterable[Mapping[str, Any]], groups: Mapping[str, str]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (set, fault domain), over affected (event, VM) pairs: events, mean approval latency and real downtime.

    ``groups`` maps each VM name to its availability set or scale set: FD 0 of two sets is two entries.
    """
    acc: dict[tuple[str, int], dict[str, list[float] | set[str]]] = {}
    for row in truth_rows:
        if row["vm_name"] not in row["resources"] or row["fault_domain"] is None:
            continue
        key = (groups[row["vm_name"]], row["fault_domain"])
        fd = acc.setdefault(key, {"events": set(), "latency": [], "impact": []})
        events = fd["events"]
        assert isinstance(events, set)
        events.add(row["event_id"])
        latency, impact = fd["latency"], fd["impact"]
        assert isinstance(latency, list) and isinstance(impact, list)
        if row["approved_at"] is not None:
            latency.append(_span(row["first_visible_at"], row["approved_at"]) or 0.0)
        if row.get("down_s") is not None:
            impact.append(float(row["down_s"]))
    return {
        fd: {
            "events": len(v["events"]),
            "avg_approval_latency_s": _mean(v["latency"]),
            "avg_observed_impact_s": _mean(v["impact"]),
        }
        for fd, v in sorted(acc.items())
    }


def fault_domain_checks(
    ours: Iterable[Mapping[str, Any]], truth_rows: Iterable[Mapping[str, Any]], groups: Mapping[str, str]
) -> list[Check]:
    """Per (set, FD) of ``fault_domain_summary``: exactly the true domains, each with its true number of events.

    Adding up FD 0 of two sets shows as one row too many events and one true domain missing.
    """
    truth = fault_domain_truth(truth_rows, groups)
    mine = {(row["fault_set"], row["fault_domain"]): row["events"] for row in ours}
    checks = []
    for key in sorted(truth.keys() | mine.keys(), key=lambda k: (k[0], k[1] is None, k[1] or 0)):
        want = truth.get(key, {}).get("events")
        got = mine.get(key)
        checks.append(Check("", domain_label(*key), "fault_domain_events", got, want, got == want))
    return checks


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
