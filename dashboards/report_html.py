"""The incident report page (pure): summary, SVG timeline, approval and impact charts, the event table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape
from statistics import mean
from typing import Any

from dashboards import svg
from dashboards.approval import released
from dashboards.report_data import ReportData
from dashboards.timeline import OUTCOMES

OUTCOME_WORDS = {value: text for value, text, _ in OUTCOMES}

STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #666; font-size: 13px; } .cards { display: flex; gap: 12px; flex-wrap: wrap; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 110px; }
.card b { display: block; font-size: 22px; }
table { border-collapse: collapse; font-size: 12px; margin-top: 8px; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; }
svg.chart { display: block; max-width: 100%; height: auto; margin-top: 8px; }
.scope { font-size: 14px; margin: 8px 0; }
"""


def _time(value: Any) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S}" if isinstance(value, datetime) else ""


def _num(value: Any) -> str:
    return "" if value is None else f"{value:g}"


def _short(event_id: str) -> str:
    return event_id[:8]


def lanes_of(data: ReportData) -> list[svg.Lane]:
    """One lane per event and fault domain of each set, its VMs together (a fleet of thousands stays readable):
    Scheduled from the first VM that saw it until it started, Started until the last VM saw it gone, the
    announced NotBefore and the approval marked. The worst first: the longest measured downtime, then the most VMs.
    """
    groups: dict[tuple[str, str, Any], list[dict[str, Any]]] = {}
    for row in data.lanes:
        groups.setdefault((row["event_id"], row["fault_set_id"], row["fault_domain"]), []).append(row)
    events = {e["event_id"]: e for e in data.events}
    end = data.filters.until
    ranked = []
    for (event_id, _, _), rows in groups.items():
        first = min((r["first_seen_at"] for r in rows if r["first_seen_at"] is not None), default=None)
        started = min((r["started_at"] for r in rows if r["started_at"] is not None), default=None)
        ended = None if any(r["ended_at"] is None for r in rows) else max(r["ended_at"] for r in rows)
        segments = []
        scheduled_end = started or ended or end
        if first is not None and scheduled_end > first:
            segments.append(svg.Segment(first, scheduled_end, "Scheduled"))
        if started is not None:
            segments.append(svg.Segment(started, ended or end, "Started"))
        event = events.get(event_id, {})
        markers = tuple(
            svg.Marker(moment, kind)
            for moment, kind in ((event.get("not_before_first"), "NotBefore"), (event.get("approved_at"), "approved"))
            if moment is not None
        )
        names = sorted(r["vm_name"] for r in rows)
        down = max((r["observed_impact_s"] for r in rows if r.get("observed_impact_s") is not None), default=None)
        shown = ", ".join(names[:40]) + (f" and {len(names) - 40} more" if len(names) > 40 else "")
        detail = f"{len(names)} VMs: {shown}" + ("" if down is None else f"; longest downtime {down:g} s")
        label = f"{domain_label(rows[0])} / {rows[0]['event_type']} {_short(event_id)} ({len(names)} VMs)"
        lane = svg.Lane(label, tuple(segments), markers, detail)
        ranked.append(((-(down or 0.0), -len(names), first or end, label), lane))
    return [lane for _, lane in sorted(ranked, key=lambda r: r[0])]


def scope(data: ReportData) -> str:
    """One line: how many events, VMs, sets and fault domains the report covers, and its worst downtime."""
    vms = {r["vm_name"] for r in data.lanes}
    sets = {r["fault_set_id"] for r in data.lanes}
    domains = {(r["fault_set_id"], r["fault_domain"]) for r in data.lanes}
    downs = [r["observed_impact_s"] for r in data.lanes if r.get("observed_impact_s") is not None]
    worst = f"; longest downtime measured on a VM {max(downs):g} s" if downs else "; no downtime measured"
    return (
        f"{len(data.events)} events reaching {len(vms)} VMs in {len(sets)} sets and {len(domains)} fault domains"
        f"{worst}; {len(data.unannounced)} unannounced pauses or reboots."
    )


def _span(data: ReportData) -> tuple[datetime, datetime]:
    moments = [m for row in data.lanes for m in (row["first_seen_at"], row["ended_at"]) if m is not None]
    moments += [e["first_seen_at"] for e in data.events if e["first_seen_at"] is not None]
    if not moments:
        return data.filters.since, data.filters.until
    start, end = min(moments), max(moments)
    margin = max((end - start) * 0.05, timedelta(seconds=1))
    return start - margin, end + margin


def domain_label(row: dict[str, Any]) -> str:
    """A lane's fault domain inside its set: ``web / FD 1``."""
    fd = "?" if row["fault_domain"] is None else row["fault_domain"]
    return f"{row['fault_set']} / FD {fd}"


def impact_by_fault_domain(data: ReportData) -> list[tuple[str, Sequence[float | None]]]:
    """(label, [mean, max]) seconds of downtime the VMs hit in each fault domain of each set measured on themselves."""
    per_fd: dict[tuple[str, str, int | None], list[float]] = {}
    for row in data.lanes:
        if row.get("observed_impact_s") is not None:
            key = (row["fault_set"], row["fault_set_id"], row["fault_domain"])
            per_fd.setdefault(key, []).append(row["observed_impact_s"])
    ordered = sorted(per_fd.items(), key=lambda kv: (kv[0][0], kv[0][2] is None, kv[0][2] or 0, kv[0][1]))
    return [
        (domain_label({"fault_set": key[0], "fault_domain": key[2]}), [round(mean(values), 3), round(max(values), 3)])
        for key, values in ordered
    ]


def _downtime_table(data: ReportData) -> str:
    """One row per VM that measured downtime: for an event (from its lane) or with none announcing it."""
    rows = [
        (lane["vm_name"], _event_label(lane), None, lane["observed_impact_s"])
        for lane in data.lanes
        if lane.get("observed_impact_s") is not None
    ]
    rows += [(d["vm_name"], "none announced", d["detected_by"], d["duration_s"]) for d in data.unannounced]
    rows.sort(key=lambda r: (r[0], r[1]))
    body = "".join(
        f"<tr><td>{escape(vm)}</td><td>{escape(event)}</td><td>{escape(how or '')}</td>"
        f'<td class="num">{escape(_num(seconds))}</td></tr>'
        for vm, event, how, seconds in rows
    )
    body = body or '<tr><td colspan="4">no downtime measured</td></tr>'
    head = "<th>VM</th><th>Event</th><th>Detected by</th><th>Downtime s</th>"
    return f'<table id="downtime"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def released_by(event: dict[str, Any], approvals: list[dict[str, Any]]) -> str:
    """Who released an event, as the approval dashboard says it; an sevents approval names the approving VM."""
    ours = sorted(a["vm_name"] for a in approvals if a["event_id"] == event["event_id"])
    if event["released_by"] == "sevents" and ours:
        return f"sevents: {', '.join(ours)}"
    return released(event["released_by"], event["outcome"])


def outcome(value: str) -> str:
    """An outcome in words, as the timeline's tables show it."""
    return OUTCOME_WORDS.get(value, value)


def _approvals_table(data: ReportData) -> str:
    rows = []
    for a in data.approvals:
        cells = [
            (_short(a["event_id"]), ""),
            (a["event_type"], ""),
            (a["vm_name"], ""),
            (a["rule"], ""),
            ("" if a["hook_exit"] is None else str(a["hook_exit"]), ' class="num"'),
            ("" if a["hook_s"] is None else _num(a["hook_s"]), ' class="num"'),
            ("" if a["http_status"] is None else str(a["http_status"]), ' class="num"'),
            ("" if a["notice_saved_s"] is None else _num(a["notice_saved_s"]), ' class="num"'),
        ]
        rows.append("<tr>" + "".join(f"<td{cls}>{escape(text)}</td>" for text, cls in cells) + "</tr>")
    body = "".join(rows) or '<tr><td colspan="8">no event was approved by sevents</td></tr>'
    head = "".join(
        f"<th>{t}</th>"
        for t in ("Event", "Type", "Approved by", "Rule", "Hook exit", "Hook s", "HTTP", "Notice saved s")
    )
    return f'<table id="approvals"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _event_label(event: dict[str, Any]) -> str:
    return f"{event['event_type']} {_short(event['event_id'])}"


# A time no VM saw happen is a bound (migration 0013): the start, from a downtime a VM measured for the event; the
# end, from a VM's first polls after its own downtime. The table marks it "<=".
BOUNDS = {"started_at": ("started_at_source", "downtime"), "ended_at": ("ended_at_source", "after_downtime")}
BOUND_NOTE = (
    "<= marks a bound, not a sighting: the event started no later than a VM it paused or rebooted went down, or "
    "ended no later than that VM's first poll once back."
)


def _is_bound(event: dict[str, Any], key: str) -> bool:
    return key in BOUNDS and event.get(BOUNDS[key][0]) == BOUNDS[key][1]


def _table(events: list[dict[str, Any]]) -> str:
    columns = (
        ("EventId", "event_id", str),
        ("Type", "event_type", str),
        ("Source", "event_source", str),
        ("Outcome", "outcome", outcome),
        ("First seen", "first_seen_at", _time),
        ("NotBefore", "not_before_first", _time),
        ("Approved", "approved_at", _time),
        ("Released by", "released", str),
        ("Started", "started_at", _time),
        ("Ended", "ended_at", _time),
        ("Approval s", "approval_latency_s", _num),
        ("Notice s", "notice_s", _num),
        ("Announced s", "duration_s", _num),
        ("Observed impact s", "observed_impact_s", _num),
        ("Started to gone s", "started_to_gone_s", _num),
        ("VMs", "affected_vm_count", _num),
        ("VMs hit", "impacted_vms", _num),
        ("Fault domains", "fault_domain_labels", lambda v: ", ".join(map(str, v or []))),
    )
    head = "".join(f"<th>{escape(title)}</th>" for title, _, _ in columns)
    rows = []
    for event in events:
        cells = []
        for _, key, show in columns:
            value = event.get(key)
            text = "" if value is None else show(value)
            if text and _is_bound(event, key):
                text = f"<= {text}"
            cls = ' class="num"' if show is _num else ""
            cells.append(f"<td{cls}>{escape(text)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    body = "".join(rows) or f'<tr><td colspan="{len(columns)}">no events</td></tr>'
    note = f'<p class="scope">{escape(BOUND_NOTE)}</p>' if any(_is_bound(e, k) for e in events for k in BOUNDS) else ""
    return f'<table id="events"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}'


def render(data: ReportData, *, generated_at: datetime) -> str:
    """The whole page as one HTML string."""
    events = [{**e, "released": released_by(e, data.approvals)} for e in data.events]
    start, end = _span(data)
    approval = [(_event_label(e), [e["approval_latency_s"], e["notice_s"]]) for e in events if e["started_at"]]
    announced = [
        (_event_label(e), [e["duration_s"] if (e["duration_s"] or -1) >= 0 else None, e["observed_impact_s"]])
        for e in events
        if e["observed_impact_s"] is not None
    ]
    outcomes: dict[str, int] = {}
    for e in events:
        outcomes[e["outcome"]] = outcomes.get(e["outcome"], 0) + 1
    vms = len({r["vm_name"] for r in data.lanes})
    cards = [("events", len(events)), ("VMs affected", vms), *sorted((outcome(o), n) for o, n in outcomes.items())]
    card_html = "".join(f'<div class="card"><b>{n}</b>{escape(label)}</div>' for label, n in cards)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>sevents incident report</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>Azure Scheduled Events: incident report</h1>"
        f'<p class="meta">{escape(data.filters.describe())}. Generated {generated_at:%Y-%m-%d %H:%M:%S} UTC '
        "by sevents. Times are UTC; precision is one collector poll.</p>"
        f'<p class="scope">{escape(scope(data))}</p>'
        f'<div class="cards">{card_html}</div>'
        "<h2>Timeline (per event and fault domain of each set, the worst first)</h2>"
        '<p class="meta">Hover a lane for its VMs. Marks: NotBefore as announced (dashed), the approval '
        "(triangle).</p>"
        f"{svg.timeline(lanes_of(data), start, end)}"
        "<h2>Approval latency and notice per event</h2>"
        '<p class="meta">Approval: first seen to approved (started before NotBefore). Notice: first seen to '
        "Started.</p>"
        f"{svg.bars('Approval latency and notice', approval, ('approval', 'notice'))}"
        "<h2>Approvals sevents made</h2>"
        '<p class="meta">Each event a collector\'s approval policy approved: the approving VM, the rule that made '
        "it the approver, its pre-approval hook, the POST's HTTP status, and the notice saved (NotBefore minus the "
        "approval). An event that started early without one here was approved by someone outside sevents.</p>"
        f"{_approvals_table(data)}"
        "<h2>Observed impact per fault domain of each set</h2>"
        '<p class="meta">Downtime each VM measured on itself (a pause, a reboot), not the time an event stayed '
        "Started. A set is a scale set, or an availability set: the VMs that observe the same events, named by the "
        "common prefix of their names.</p>"
        f"{svg.bars('Observed impact per fault domain of each set', impact_by_fault_domain(data), ('mean', 'max'))}"
        "<h2>Announced DurationInSeconds versus observed impact</h2>"
        f"{svg.bars('Announced versus observed', announced, ('announced', 'observed'))}"
        f"<h2>Downtime per VM</h2>{_downtime_table(data)}"
        f"<h2>Events</h2>{_table(events)}"
        "</body></html>\n"
    )
