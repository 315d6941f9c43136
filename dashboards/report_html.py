"""The incident report page (pure): summary, SVG timeline, approval and impact charts, the event table."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape
from statistics import mean, median
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
.plot svg { display: block; width: 100%; overflow: visible; }
.axis-top { position: sticky; top: 0; z-index: 1; background: #fff; border-bottom: 1px solid #ccc; margin-top: 0; }
details.fold > summary, td details > summary { cursor: pointer; color: #1f60c4; margin: 6px 0; }
table.detail { margin: 4px 0; } table.detail td:last-child { text-align: right; }
.scope { font-size: 14px; margin: 8px 0; }
"""
STYLE += f".plot {{ padding: 0 {svg.RIGHT_W}px 0 {svg.LABEL_W}px; margin-top: 8px; }}\n"


def _time(value: Any) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S}" if isinstance(value, datetime) else ""


def _num(value: Any) -> str:
    return "" if value is None else f"{value:g}"


def _short(event_id: str) -> str:
    return event_id[:8]


def lanes_of(data: ReportData) -> list[svg.Lane]:
    """One lane per event and fault domain of each set, its VMs together (a fleet of thousands stays readable):
    Scheduled from the first VM that saw it until it started, Started until the last VM saw it gone, the
    announced NotBefore and the approval marked. Grouped by set and fault domain (by set label, then domain
    number), each group's lanes in time order: first seen, then started.
    """
    groups: dict[tuple[str, str, Any], list[dict[str, Any]]] = {}
    for row in data.lanes:
        groups.setdefault((row["event_id"], row["fault_set_id"], row["fault_domain"]), []).append(row)
    events = {e["event_id"]: e for e in data.events}
    end = data.filters.until
    ordered = []
    for (event_id, set_id, fd), rows in groups.items():
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
        group = domain_label(rows[0])
        short = f"{rows[0]['event_type']} {_short(event_id)} ({len(names)} VMs)"
        lane = svg.Lane(f"{group} / {short}", tuple(segments), markers, detail, group, short)
        where = (rows[0]["fault_set"], set_id, fd is None, fd or 0)
        ordered.append((where, (first or started or end, started or end, event_id), lane))
    return [lane for _, _, lane in sorted(ordered, key=lambda r: (r[0], r[1]))]


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


def time_span(data: ReportData) -> tuple[datetime, datetime]:
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


DETAIL_ROWS = 100  # a table longer than this is summarised, its rows one click away (<details>)
PER_EVENT_BARS = 40  # a per-event chart of more events than this is folded likewise, under a one-line summary


def _fold(content: str, rows: int, summary: str, *, limit: int = DETAIL_ROWS) -> str:
    """``content`` as it is, or folded under ``summary`` when it has more than ``limit`` rows."""
    if rows <= limit:
        return content
    return f'<details class="fold"><summary>{escape(summary)}</summary>{content}</details>'


def _counts(values: Sequence[str]) -> str:
    """``pause 120, reboot 3``: how often each value occurs, the most frequent first."""
    tally: dict[str, int] = {}
    for value in values:
        tally[value] = tally.get(value, 0) + 1
    return ", ".join(f"{v} {n}" for v, n in sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))


def _unannounced_domain(row: dict[str, Any]) -> str:
    """A downtime no event announced has no event's set: its scale set's domain, else its domain alone."""
    if row.get("fault_domain") is None:
        return row.get("scale_set") or ""
    return f"{row['scale_set']} / FD {row['fault_domain']}" if row.get("scale_set") else f"FD {row['fault_domain']}"


def _downtime_rows(data: ReportData) -> list[tuple[str, str, str, str, float]]:
    """(VM, event, fault domain, detected by, seconds) per VM that measured downtime, for an event (from its lane)
    or with none announcing it."""
    rows = [
        (
            lane["vm_name"],
            _event_label(lane),
            domain_label(lane),
            lane.get("detected_by") or "",
            lane["observed_impact_s"],
        )
        for lane in data.lanes
        if lane.get("observed_impact_s") is not None
    ]
    rows += [
        (
            d["vm_name"],
            "none announced",
            _unannounced_domain(d),
            d["detected_by"] or "",
            d["duration_s"],
        )
        for d in data.unannounced
    ]
    return rows


def _natural(name: str) -> tuple[Any, ...]:
    """web-2 before web-10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _downtime_table(data: ReportData) -> str:
    """One row per VM that measured downtime. Beyond DETAIL_ROWS: one row per fault domain of each set (events,
    VMs hit, how the downtime was detected, mean and max), then one per event with its VMs' rows folded in it (the
    events' rows themselves folded beyond DETAIL_ROWS events)."""
    rows = _downtime_rows(data)
    head = "<th>VM</th><th>Event</th><th>Detected by</th><th>Downtime s</th>"
    if len(rows) <= DETAIL_ROWS:
        rows.sort(key=lambda r: (_natural(r[0]), r[1]))
        body = "".join(
            f"<tr><td>{escape(vm)}</td><td>{escape(event)}</td><td>{escape(how)}</td>"
            f'<td class="num">{escape(_num(seconds))}</td></tr>'
            for vm, event, _, how, seconds in rows
        )
        body = body or '<tr><td colspan="4">no downtime measured</td></tr>'
        return f'<table id="downtime"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    per_domain: dict[str, list[tuple[str, str, str, str, float]]] = {}
    per_event: dict[str, list[tuple[str, str, str, str, float]]] = {}
    for row in rows:
        per_domain.setdefault(row[2] or "no fault domain", []).append(row)
        per_event.setdefault(row[1], []).append(row)

    def figures(hit: list[tuple[str, str, str, str, float]]) -> str:
        seconds = [r[4] for r in hit]
        return (
            f'<td class="num">{len({r[0] for r in hit})}</td><td>{escape(_counts([r[3] or "not said" for r in hit]))}'
            f'</td><td class="num">{mean(seconds):.3g}</td><td class="num">{max(seconds):g}</td>'
        )

    domains = "".join(
        f'<tr><td>{escape(label)}</td><td class="num">{len({r[1] for r in hit})}</td>{figures(hit)}</tr>'
        for label, hit in sorted(per_domain.items(), key=lambda kv: _natural(kv[0]))
    )
    first_seen = {_event_label(e): e["first_seen_at"] for e in data.events if e.get("first_seen_at") is not None}
    late = data.filters.until
    order = sorted(per_event, key=lambda label: (label == "none announced", first_seen.get(label, late), label))
    summary = []
    for label in order:
        hit = sorted(per_event[label], key=lambda r: (_natural(r[2]), _natural(r[0])))
        detail = "".join(
            f"<tr><td>{escape(vm)}<td>{escape(fd)}<td>{escape(how)}<td>{escape(_num(s))}"  # end tags implied: smaller
            for vm, _, fd, how, s in hit
        )
        summary.append(
            f"<tr><td>{escape(label)}</td><td>{escape(', '.join(sorted({r[2] for r in hit if r[2]}, key=_natural)))}"
            f'</td>{figures(hit)}<td><details><summary>{len(hit)} VMs</summary><table class="detail"><thead><tr>'
            "<th>VM</th><th>Fault domain</th><th>Detected by</th><th>Downtime s</th></tr></thead>"
            f"<tbody>{detail}</tbody></table></details></td></tr>"
        )
    figures_head = "<th>VMs hit</th><th>Detected by</th><th>Mean s</th><th>Max s</th>"
    events_table = (
        f'<table id="downtime-events"><thead><tr><th>Event</th><th>Fault domains</th>{figures_head}'
        f"<th>Per VM (click)</th></tr></thead><tbody>{''.join(summary)}</tbody></table>"
    )
    return (
        f'<p class="meta">{len(rows):,} downtimes measured on VMs: per fault domain of each set, then per event with '
        "its VMs one click away.</p>"
        f'<table id="downtime-summary"><thead><tr><th>Fault domain</th><th>Events</th>{figures_head}</tr></thead>'
        f"<tbody>{domains}</tbody></table>"
        + _fold(events_table, len(summary), f"Per event: {len(summary)} events, each with its VMs (click)")
    )


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
    table = f'<table id="approvals"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if len(rows) <= DETAIL_ROWS:
        return table
    events = len({a["event_id"] for a in data.approvals})
    rules = _counts([a["rule"] or "no rule" for a in data.approvals])
    return f'<p class="meta">{len(rows)} approvals on {events} events; rules: {escape(rules)}.</p>' + _fold(
        table, len(rows), f"All {len(rows)} approvals, one row each (click)"
    )


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


NOT_ANNOUNCED = "—"


def _not_announced(value: Any) -> bool:
    return isinstance(value, int | float) and value < 0


def _announced(value: Any) -> str:
    """DurationInSeconds as announced; -1 is IMDS's "not given" (Reboot, Redeploy), never a duration."""
    return NOT_ANNOUNCED if _not_announced(value) else _num(value)


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
        ("Announced s", "duration_s", _announced),
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
            cls = ' class="num"' if show in (_num, _announced) else ""
            cells.append(f"<td{cls}>{escape(text)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    body = "".join(rows) or f'<tr><td colspan="{len(columns)}">no events</td></tr>'
    notes = [BOUND_NOTE] if any(_is_bound(e, k) for e in events for k in BOUNDS) else []
    if any(_not_announced(e.get("duration_s")) for e in events):
        notes.append(f"{NOT_ANNOUNCED} under Announced s: the event gave no DurationInSeconds (IMDS sends -1).")
    table = f'<table id="events"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if len(events) > DETAIL_ROWS:
        kinds = _counts([f"{e['event_type']} {outcome(e['outcome'])}" for e in events])
        table = f'<p class="meta">{len(events)} events: {escape(kinds)}.</p>' + _fold(
            table, len(events), f"All {len(events)} events, one row each (click)"
        )
    return table + "".join(f'<p class="scope">{escape(n)}</p>' for n in notes)


def _per_event_chart(title: str, items: Sequence[tuple[str, Sequence[float | None]]], series: tuple[str, str]) -> str:
    """A chart of one bar group per event, folded under its series' medians and maxima beyond PER_EVENT_BARS."""
    chart = svg.bars(title, items, series)
    if len(items) <= PER_EVENT_BARS:
        return chart
    parts = []
    for index, name in enumerate(series):
        values = [value for _, v in items if (value := v[index]) is not None]
        if values:
            parts.append(f"{name} median {median(values):g} s, max {max(values):g} s")
    said = "; ".join(parts) or "no values"
    return _fold(chart, len(items), f"{len(items)} events: {said}. The chart, one bar group per event (click)", limit=0)


def render(data: ReportData, *, generated_at: datetime) -> str:
    """The whole page as one HTML string."""
    events = [{**e, "released": released_by(e, data.approvals)} for e in data.events]
    start, end = time_span(data)
    approval = [(_event_label(e), [e["approval_latency_s"], e["notice_s"]]) for e in events if e["started_at"]]
    announced = [
        (_event_label(e), [None if _not_announced(e["duration_s"]) else e["duration_s"], e["observed_impact_s"]])
        for e in events
        if e["observed_impact_s"] is not None
    ]
    outcomes: dict[str, int] = {}
    for e in events:
        outcomes[e["outcome"]] = outcomes.get(e["outcome"], 0) + 1
    vms = len({r["vm_name"] for r in data.lanes})
    cards = [("events", len(events)), ("VMs affected", vms), *sorted((outcome(o), n) for o, n in outcomes.items())]
    card_html = "".join(f'<div class="card"><b>{n}</b>{escape(label)}</div>' for label, n in cards)
    lanes = lanes_of(data)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>sevents incident report</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>Azure Scheduled Events: incident report</h1>"
        f'<p class="meta">{escape(data.filters.describe())}. Generated {generated_at:%Y-%m-%d %H:%M:%S} UTC '
        "by sevents. Times are UTC; precision is one collector poll.</p>"
        f'<p class="scope">{escape(scope(data))}</p>'
        f'<div class="cards">{card_html}</div>'
        "<h2>Timeline (per event and fault domain of each set, grouped by set and fault domain, in time order)</h2>"
        f'<p class="meta">{len(lanes)} lanes. Hover a lane for its VMs. The time axis stays at the top while the '
        "lanes scroll by. Marks: NotBefore as announced (dashed), the approval (triangle).</p>"
        f"{svg.timeline(lanes, start, end)}"
        "<h2>Approval latency and notice per event</h2>"
        '<p class="meta">Approval: first seen to approved (started before NotBefore). Notice: first seen to '
        "Started.</p>"
        f"{_per_event_chart('Approval latency and notice', approval, ('approval', 'notice'))}"
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
        '<p class="meta">An event that announced no duration (DurationInSeconds -1: Reboot, Redeploy) has no '
        "announced bar.</p>"
        f"{_per_event_chart('Announced versus observed', announced, ('announced', 'observed'))}"
        f"<h2>Downtime per VM</h2>{_downtime_table(data)}"
        f"<h2>Events</h2>{_table(events)}"
        "</body></html>\n"
    )
