"""Compare what the pipeline recorded with a simulator's ground truth (pure): which values agree, within what.

Every time is held to the simulator's own moments (the truth rows' ``first_visible_at``, ``not_before``,
``approved_at``, ``started_at``, ``ended_at``), never to when the simulator answered a VM: a down VM's requests
are held until it runs again, so an answer (and a window built from answers) can be as late as the downtime.

Tolerance (``tolerance_s``; the demo passes one poll interval + 0.5 s): a collector sees a change at its first
poll after it, so a recorded moment is late by up to one poll plus the round trip and scheduling. A duration
(notice = started - first seen, approval latency = approved - first seen, started to gone = ended - started)
has two ends each late by up to that, so it is off by at most as much either way. Both are checked as
``|recorded - truth| <= tolerance_s``. Downtime (``compare_downtime``, per-FD mean downtime) has its own,
``downtime_tolerance_s``: a collector measures a pause with a tick that counts through it.

What nobody could know is not expected:

- NotBefore, and an approval told by a start before it, only if some VM's collector read an answer while the
  event was visible and not yet started (``served``, the answers each collector read);
- nothing after the event's last observer stopped for good (``stopped``: VM -> when its collector stopped; the
  demo gives the scenario's collector faults their moment and every other VM the run's end). A moment later than
  that, less ``tolerance_s``, may be blank; an event still Scheduled then (neither Started nor gone) may be
  ``end_not_seen``, whatever the simulator did with it later;
- the end of an event an observer still showed when its collector ended (``not_silent``: VM -> when, for the
  collectors ended early that the pipeline does not yet count as silent): until that VM is silent, sevents
  cannot tell a dead collector from a slow one, so the event may stay ``active`` with no end.

A value accepted by one of these rules (other than its truth) carries the rule in ``Check.note``.

Bounds: an end taken from the first poll after a VM's own downtime (``ended_at_source`` 'after_downtime') says
"gone by then" only: it (and started to gone) must not be earlier than the truth less the tolerance. A start
taken from the downtime a VM measured (``started_at_source`` 'downtime') is held to the tolerance like a
sighting: the VM goes down as its event starts, and the bound (its last tick before going down) is early by at
most one collector tick (0.5 s), so a duration from a late sighting to it is off by up to a poll plus a tick.

Fault domains are compared inside their set: given ``groups`` (VM name -> the set its fault domain belongs to, as
the simulator built the fleet, never as the pipeline infers it: the truth rows' ``fault_set``), every event's
``fault_domain_labels`` must be the true ``set / FD n`` of its affected VMs, and ``fault_domain_truth`` keys its
figures by (set, FD).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

Window = tuple[float, float]  # open interval, in POSIX seconds (or seconds for a duration)
# event field -> (the truth rows' per-VM field, whether the event takes the earliest VM or the latest)
OBSERVED = {
    "first_seen_at": ("first_visible_at", min),
    "started_at": ("started_at", min),
    "approved_at": ("approved_at", min),
    "ended_at": ("ended_at", max),
}
SPANS = {
    "notice_s": ("first_seen_at", "started_at"),
    "approval_latency_s": ("first_seen_at", "approved_at"),
    "started_to_gone_s": ("started_at", "ended_at"),
}
NEEDS_NOT_BEFORE = ("not_before_first", "approved_at", "approval_latency_s")

TIMES = ("first_seen_at", "not_before_first", "approved_at", "started_at", "ended_at")
DURATIONS = tuple(SPANS)
EXACT = (
    "event_type",
    "event_source",
    "description",
    "duration_s",
    "affected_vms",
    "affected_vm_count",
    "fault_domains",
)
COORDINATOR_RULE = "coordinator"  # the rule of the coordinator's approvals (ingest.coordinator.Verdict)
SCOPED = "fault_domain_labels"  # compared exactly too, when the VMs' groups are known
ENDS = ("ended_at", "started_to_gone_s")  # what an event's end tells


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
    note: str = ""  # the rule that makes a value right though it is not the truth's own


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
                "affected_vm_count": len(set(row["resources"])),
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
        for name, (start, end) in SPANS.items():
            e[name] = _span(e[start], e[end])
    return events


def compare(
    ours: Sequence[Mapping[str, Any]],
    truth_rows: Iterable[Mapping[str, Any]],
    tolerance_s: float,
    served: Mapping[str, Sequence[datetime]] | None = None,
    groups: Mapping[str, str] | None = None,
    stopped: Mapping[str, datetime] | None = None,
    not_silent: Mapping[str, datetime] | None = None,
    down: Mapping[str, Sequence[tuple[datetime, datetime]]] | None = None,
    slack_s: float = 0.5,
) -> list[Check]:
    """Every compared value of every event in the truth (an event we never stored fails every check), and a
    failed ``event_id`` check for each event we stored that the truth does not have.

    ``served``, ``stopped`` and ``not_silent`` tell what could be known (see the module's docstring); ``groups``
    (VM name -> its set) adds the check of the set-scoped fault domains.
    """
    rows = list(truth_rows)
    truth = truth_events(rows, groups)
    exact = EXACT if groups is None else (*EXACT, SCOPED)
    unknowable = not_before_unseen(rows, served) if served is not None else set()
    last_stop = last_stops(rows, stopped) if stopped is not None else {}
    holders = held_active(rows, not_silent, tolerance_s) if not_silent is not None else {}
    lags = first_answer_lags(rows, served, down or {}) if served is not None else {}
    by_id = {row["event_id"]: row for row in ours}
    checks: list[Check] = []
    for event_id, t in truth.items():
        mine = by_id.get(event_id, {})
        if event_id in unknowable:
            t = {**t, **dict.fromkeys(NEEDS_NOT_BEFORE)}
        stop, held = last_stop.get(event_id), holders.get(event_id, [])
        blank_ok = _unseen_after(t, stop, tolerance_s) | (set(ENDS) if held else set())
        gone_by = mine.get("ended_at_source") == "after_downtime"
        for name in exact:
            a, b = _norm(mine.get(name)), _norm(t[name])
            checks.append(Check(event_id, t["label"], name, a, b, a == b))
        outcome = mine.get("outcome")
        ok, note = _outcome(outcome, t, stop, held, tolerance_s)
        checks.append(Check(event_id, t["label"], "outcome", outcome, t["outcome"], ok, note=note))
        for name in TIMES + DURATIONS:
            a, b = mine.get(name), t[name]
            # a loaded machine polls late: as late as the first answer a running collector read, plus the slack
            allowed = max(tolerance_s, lags.get((event_id, name), 0.0) + slack_s)
            ok, delta = near(a, b, allowed, blank_ok=name in blank_ok, at_least=gone_by and name in ENDS)
            checks.append(Check(event_id, t["label"], name, a, b, ok, delta))
    for event_id in by_id.keys() - truth.keys():
        checks.append(Check(event_id, "", "event_id", event_id, None, False))
    return checks


def near(
    ours: Any, truth: Any, tolerance_s: float, *, blank_ok: bool = False, at_least: bool = False
) -> tuple[bool, float | None]:
    """Whether a time or a number of seconds is within ``tolerance_s`` of the truth, and by how much it differs.

    Both blank agree; ``blank_ok``: ours may be blank though the truth is not (nobody could see it);
    ``at_least``: ours is a bound ("by then"), so only earlier than the truth by more than the tolerance fails.
    """
    if ours is None or truth is None:
        return ours is None and (truth is None or blank_ok), None
    delta = (ours - truth).total_seconds() if isinstance(ours, datetime) else float(ours) - float(truth)
    return (delta >= -tolerance_s if at_least else abs(delta) <= tolerance_s), delta


def _outcome(
    ours: str | None, truth: Mapping[str, Any], last_stop: datetime | None, held: list[str], tolerance_s: float
) -> tuple[bool, str]:
    """Whether the outcome is right, and the rule that made it right when it is not the truth's own."""
    if ours == truth["outcome"]:
        return True, ""
    moved = truth["started_at"] or truth["ended_at"]
    if ours == "end_not_seen" and last_stop is not None and (moved is None or moved > last_stop - _s(tolerance_s)):
        return True, "its collectors all stopped while it was Scheduled: its end was not seen"
    if ours == "active" and held:
        return True, f"held active by {', '.join(held)}: its collector ended while showing it, not yet silent"
    return False, ""


def held_active(
    truth_rows: Iterable[Mapping[str, Any]], not_silent: Mapping[str, datetime], tolerance_s: float
) -> dict[str, list[str]]:
    """Event -> its observers whose collector ended (``not_silent``: VM -> when) before seeing it gone, and that
    the pipeline cannot yet tell from a slow one: each still shows the event, so it may stay active."""
    held: dict[str, list[str]] = {}
    for row in truth_rows:
        ended, at = row["ended_at"], not_silent.get(row["vm_name"])
        if ended is not None and at is not None and at < ended + _s(tolerance_s):
            held.setdefault(row["event_id"], []).append(row["vm_name"])
    return held


def _unseen_after(truth: Mapping[str, Any], last_stop: datetime | None, tolerance_s: float) -> set[str]:
    """The fields whose truth came after the event's last observer stopped (less the tolerance): blank is right."""
    if last_stop is None:
        return set()
    cutoff = last_stop - _s(tolerance_s)
    late = {name for name in OBSERVED if truth[name] is not None and truth[name] > cutoff}
    return late | {name for name, ends in SPANS.items() if late & set(ends)}


def last_stops(truth_rows: Iterable[Mapping[str, Any]], stopped: Mapping[str, datetime]) -> dict[str, datetime]:
    """Event -> when the last collector that saw it stopped for good; events with an observer never stopped are
    left out (someone kept looking)."""
    stops: dict[str, list[datetime | None]] = {}
    for row in truth_rows:
        stops.setdefault(row["event_id"], []).append(stopped.get(row["vm_name"]))
    return {event_id: max(s for s in found if s) for event_id, found in stops.items() if all(found)}


def not_before_unseen(truth_rows: Sequence[Mapping[str, Any]], served: Mapping[str, Sequence[datetime]]) -> set[str]:
    """Events no VM was answered about while they were visible and not yet started (NotBefore never shown)."""
    seen: dict[str, bool] = {}
    for row in truth_rows:
        visible, started = row["first_visible_at"], row["started_at"]
        answered = any(
            visible <= moment and (started is None or moment < started) for moment in served.get(row["vm_name"], ())
        )
        seen[row["event_id"]] = seen.get(row["event_id"], False) or answered
    return {event_id for event_id, any_seen in seen.items() if not any_seen}


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
    pause no event announced (``DownSpan``s with no event): one measured on that VM, event-less, within tolerance
    (the closest one; its check's ``ours``). ``done`` (``DownSpan`` -> seconds) is how long each collector was
    really stopped where that is known (the demo's processes): it replaces the simulator's figure, so a stop
    resumed late on a loaded machine is not counted against the measurement.
    """
    really = _really(done)
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
        ok, delta = near(observed, truth_max, tolerance_s)
        checks.append(Check(event_id, labels[event_id], "observed_impact_s", observed, truth_max, ok, delta))
        count = mine.get("impacted_vms", 0)
        checks.append(Check(event_id, labels[event_id], "impacted_vms", count, len(downs), count == len(downs)))
    for span in unannounced_truth:
        real = (done or {}).get(span, span.down_s)
        found = [r for r in unannounced_ours if r["vm_name"] == span.vm_name]
        closest = min(found, key=lambda r: abs(r["duration_s"] - real), default=None)
        seconds = None if closest is None else closest["duration_s"]
        ok, delta = near(seconds, real, tolerance_s)
        checks.append(Check("", f"{span.label} {span.vm_name}", "unannounced_s", seconds, real, ok, delta))
    return checks


def fault_domain_truth(
    truth_rows: Iterable[Mapping[str, Any]],
    groups: Mapping[str, str],
    *,
    done: Mapping[Any, float] | None = None,
    unknowable: Iterable[str] = (),
) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (set, fault domain), over affected (event, VM) pairs: events, mean approval latency and real downtime.

    ``groups`` maps each VM name to the set its fault domain belongs to: FD 0 of two sets is two entries. The
    approval latency of a pair is its event's (approved - first visible); events in ``unknowable`` (whose
    approval nobody could see) are left out of it. ``done`` replaces the simulator's downtime by the real one
    where known, as in ``compare_downtime``.
    """
    really, skip = _really(done), set(unknowable)
    acc: dict[tuple[str, int], tuple[set[str], list[float], list[float]]] = {}
    for row in truth_rows:
        if row["vm_name"] not in row["resources"] or row["fault_domain"] is None:
            continue
        events, latency, impact = acc.setdefault((groups[row["vm_name"]], row["fault_domain"]), (set(), [], []))
        events.add(row["event_id"])
        if row["approved_at"] is not None and row["event_id"] not in skip:
            latency.append(_span(row["first_visible_at"], row["approved_at"]) or 0.0)
        if row.get("down_s") is not None:
            impact.append(really.get((row["event_id"], row["vm_name"]), float(row["down_s"])))
    return {
        fd: {"events": len(events), "avg_approval_latency_s": _mean(latency), "avg_observed_impact_s": _mean(impact)}
        for fd, (events, latency, impact) in sorted(acc.items())
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
    for key in _domains(truth.keys() | mine.keys()):
        want = truth.get(key, {}).get("events")
        got = mine.get(key)
        checks.append(Check("", domain_label(*key), "fault_domain_events", got, want, got == want))
    return checks


def fault_domain_means(
    ours: Iterable[Mapping[str, Any]],
    truth: Mapping[tuple[str, int], Mapping[str, Any]],
    tolerance_s: float,
    downtime_tolerance_s: float,
    late_s: Mapping[tuple[str, int], float] | None = None,
) -> list[Check]:
    """Per (set, FD): the mean approval latency within ``tolerance_s`` (or the domain's ``late_s``, what a loaded
    machine's polls allowed: ``domain_lags``) and the mean downtime within ``downtime_tolerance_s`` of ``truth``
    (``fault_domain_truth``); a domain only one side has fails both."""
    mine = {(row["fault_set"], row["fault_domain"]): row for row in ours}
    checks = []
    for key in _domains(truth.keys() | mine.keys()):
        got, want = mine.get(key, {}), truth.get(key, {})
        for name, tolerance in (
            ("avg_approval_latency_s", max(tolerance_s, (late_s or {}).get(key, 0.0))),
            ("avg_observed_impact_s", downtime_tolerance_s),
        ):
            ok, delta = near(got.get(name), want.get(name), tolerance)
            ok = ok and bool(got) and bool(want)
            checks.append(Check("", domain_label(*key), name, got.get(name), want.get(name), ok, delta))
    return checks


def approval_checks(
    ours: Iterable[Mapping[str, Any]],
    received: Iterable[tuple[datetime, str, str, str]],
    truth_rows: Iterable[Mapping[str, Any]],
    tolerance_s: float,
) -> list[Check]:
    """The ``approved`` decisions against the approvals the simulator received (``received``:
    ``SimServer.approvals()``): a collector's against its VM's POST to IMDS, one per (event, VM) on each side; the
    coordinator's (rule "coordinator") against the event's acknowledge through the Maintenance API, one per event
    on each side; and each one's notice saved (NotBefore - the approval) within ``tolerance_s``. Other decisions
    (ready, left to the approver, not covered, hooks) have no truth to compare with."""
    sent: dict[tuple[str, str], datetime] = {}
    acked: dict[str, datetime] = {}
    for at, vm, event_id, how in sorted(received):
        if how == "http":
            sent.setdefault((event_id, vm), at)
        elif how == "maintenance":
            acked.setdefault(event_id, at)
    rows = list(truth_rows)
    not_before = {row["event_id"]: row["not_before"] for row in rows}
    labels = {row["event_id"]: row.get("label", "") for row in rows}
    ours = [a for a in ours if a["decision"] == "approved"]
    approved = {(a["event_id"], a["vm_name"]): a for a in ours if a.get("rule") != COORDINATOR_RULE}
    coordinated = {a["event_id"]: a for a in ours if a.get("rule") == COORDINATOR_RULE}
    pairs = [(e, vm, approved.get((e, vm)), sent.get((e, vm))) for e, vm in sorted(sent.keys() | approved.keys())]
    for event_id in sorted(acked.keys() | coordinated.keys()):
        row = coordinated.get(event_id)
        pairs.append((event_id, row["vm_name"] if row else "maintenance-api", row, acked.get(event_id)))
    checks = []
    for event_id, vm, row, received_at in pairs:
        label = f"{labels.get(event_id, '?')} {vm}"
        if row is None or received_at is None:  # an approval recorded that Azure never received, or never recorded
            recorded, truth = (vm if row else None), (vm if received_at else None)
            checks.append(Check(event_id, label, "approved_by", recorded, truth, False))
            continue
        nb = not_before.get(event_id)
        saved = _span(received_at, nb) if nb is not None and nb > received_at else None
        ok, delta = near(row["notice_saved_s"], saved, tolerance_s)
        checks.append(Check(event_id, label, "notice_saved_s", row["notice_saved_s"], saved, ok, delta))
    return checks


def first_answer_lags(
    truth_rows: Sequence[Mapping[str, Any]],
    served: Mapping[str, Sequence[datetime]],
    down: Mapping[str, Sequence[tuple[datetime, datetime]]],
) -> dict[tuple[str, str], float]:
    """(event_id, field) -> seconds from the truth to the first answer about it a running collector read.

    What this run let the collectors know, however loaded the machine: an event's moment can be seen no earlier
    than the first answer after it (the earliest such answer over its VMs; for its end, the latest over the VMs
    that saw it). An answer counts only if its VM ran from the truth until the answer (``down``: VM -> its
    downtime spans): a request held while a VM was down never stretches the allowance by the downtime. A
    duration may be off by both of its ends' lags.
    """
    found: dict[tuple[str, str], list[float]] = {}
    moments: dict[tuple[str, str], list[datetime]] = {}
    for row in truth_rows:
        answers = served.get(row["vm_name"], ())
        for name, (field, _) in OBSERVED.items():
            moment = row.get(field)
            if moment is None:
                continue
            moments.setdefault((row["event_id"], name), []).append(moment)
            first = bisect.bisect_left(answers, moment)
            if first < len(answers) and _ran(down.get(row["vm_name"], ()), moment, answers[first]):
                found.setdefault((row["event_id"], name), []).append(answers[first].timestamp())
    lags = {
        key: max(0.0, OBSERVED[key[1]][1](at) - OBSERVED[key[1]][1](moments[key]).timestamp())
        for key, at in found.items()
    }
    for event_id in {key[0] for key in lags}:
        for name, (start, end) in SPANS.items():
            lags[(event_id, name)] = lags.get((event_id, start), 0.0) + lags.get((event_id, end), 0.0)
    return lags


def domain_lags(
    truth_rows: Iterable[Mapping[str, Any]],
    groups: Mapping[str, str],
    lags: Mapping[tuple[str, str], float],
    slack_s: float,
) -> dict[tuple[str, int], float]:
    """(set, FD) -> the most a mean approval latency there may be off on this run: the largest lag of the
    approval latency of its events (``first_answer_lags``), plus the slack."""
    late: dict[tuple[str, int], float] = {}
    for row in truth_rows:
        if row["vm_name"] in row["resources"] and row["fault_domain"] is not None:
            key = (groups[row["vm_name"]], row["fault_domain"])
            lag = lags.get((row["event_id"], "approval_latency_s"), 0.0) + slack_s
            late[key] = max(late.get(key, 0.0), lag)
    return late


def _ran(spans: Sequence[tuple[datetime, datetime]], since: datetime, until: datetime) -> bool:
    """Whether a VM ran all the time from ``since`` to ``until`` (no downtime span overlaps it)."""
    return not any(began < until and back > since for began, back in spans)


def observation_windows(
    truth_rows: Sequence[Mapping[str, Any]], served: Mapping[str, Sequence[datetime]]
) -> dict[tuple[str, str], Window]:
    """(event_id, field) -> the open interval an observed value falls in, given when the VMs were answered.

    For tests that judge what one collector could have seen from its own polls (the dashboards' tests). The
    verifier does not use them: a down VM's held requests stretch them by the downtime.
    """
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


def _around(answers: Sequence[float], moment: float) -> Window:
    """Between the answer before the first one at or after ``moment``, and the answer after that one."""
    first = bisect.bisect_left(answers, moment)
    before = answers[first - 1] if first > 0 else float("-inf")
    after = answers[first + 1] if first + 1 < len(answers) else float("inf")
    return before, after


def _really(done: Mapping[Any, float] | None) -> dict[tuple[str, str], float]:
    """(event_id, VM) -> seconds its collector was really stopped, from ``DownSpan`` -> seconds."""
    return {(span.event_id, span.vm_name): seconds for span, seconds in (done or {}).items()}


def _domains(keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    return sorted(keys, key=lambda k: (k[0], k[1] is None, k[1] or 0))


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def _span(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _norm(value: Any) -> Any:
    if value == "":
        return None
    if isinstance(value, list | tuple | set):
        return sorted(value)
    return value
