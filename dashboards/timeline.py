"""Maintenance timeline: per-VM state over time by set and fault domain, one row per event, drill-down by EventId."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any, Final

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.filters import DB
from dashboards.fleet import event_link_override
from ingest import event_sql

# State codes for the state timeline (numbers, so the plugin makes them values, not labels).
GONE, SCHEDULED, STARTED = 0, 1, 2
STATE_MAPPINGS = [
    {
        "type": "value",
        "options": {
            str(GONE): {"text": "gone", "color": "transparent", "index": 0},
            str(SCHEDULED): {"text": "Scheduled", "color": "yellow", "index": 1},
            str(STARTED): {"text": "Started", "color": "red", "index": 2},
        },
    }
]
# An event's outcome as the tables show it (the views' values, migration 0013): still shown by a VM, started
# (seen, or measured as a VM's downtime), seen gone without a start, or neither (its collectors stopped or went
# silent while it was Scheduled: nothing says it was cancelled).
OUTCOMES: Final = (
    ("active", "active", "blue"),
    ("completed", "completed", "green"),
    ("cancelled", "cancelled", "text"),
    ("end_not_seen", "end not seen", "orange"),
    ("announced", "announced (platform)", "purple"),
)
OUTCOME_HELP: Final = (
    "Outcome: active (a VM still shows it), completed (it started: seen, or measured as a VM's downtime), "
    "cancelled (a VM saw it gone without a start), end not seen (its collectors stopped or went silent while it "
    "was Scheduled). Azure's own account settles it: Completed or Canceled from the central feed or Resource Graph; "
    "announced: only the platform told of it (VMs without a collector: seen by platform), not settled yet."
)


def outcome_override(column: str = "outcome") -> dict[str, Any]:
    """The outcome column's values as words, coloured."""
    options = {value: {"text": text, "color": color, "index": i} for i, (value, text, color) in enumerate(OUTCOMES)}
    return {
        "matcher": {"id": "byName", "options": column},
        "properties": [
            {"id": "mappings", "value": [{"type": "value", "options": options}]},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
        ],
    }


# The free-text EventId reaches SQL percent-encoded (only [A-Za-z0-9-_.~] and %XX remain, so no quote or
# backslash can end the literal) and ClickHouse decodes it: no crafted value changes the query.
THE_EVENT = "decodeURLComponent('${event_id:percentencode}')"
ONE_EVENT = f"event_id = {THE_EVENT}"
# the drill-down's event, read from its own first day on, each VM with its set
ITS_VMS = f.scoped(f"SELECT {THE_EVENT}")
# a lane is named by the VM's fault domain inside its set: "web / FD 1 / web-4 / 1a2b3c4d"
LANE = (
    "concat(if(scale_set != '', scale_set, availability_set), ' / FD ', ifNull(toString(fault_domain), '?'), "
    "' / ', vm_name, ' / ', substring(event_id, 1, 8))"
)
LANE_COLUMNS = "event_id, scale_set, fault_domain, vm_name"
# the VMs of the events under way when the range starts, as stored: their lanes need no outcome, so not
# event_vm_lifecycles' look-up of the silent holders
UNDER_WAY_VMS = event_sql.stored(f.UNDER_WAY_IDS, "event_vm_history", f"{DB}.")
STATE = (
    f"multiIf(kind = 'disappeared', {GONE}, status = 'Started', {STARTED}, status = 'Scheduled', {SCHEDULED}, {GONE})"
)


def panels() -> list[g.Panel | g.Row]:
    drill = f"$__conditionalAll({ONE_EVENT}, ${{event_id}})"
    lanes = f"event_id != '' AND affects_this_vm AND {f.vm_filter()} AND {drill}"
    # the state at the range's start, from the lifecycles of the events that overlap the range
    at_start = f"if(started_at < $__fromTime, {STARTED}, {SCHEDULED})"
    return [
        g.Panel(
            "VM state by fault domain",
            "state-timeline",
            f"SELECT time, {LANE} AS vm, state FROM (SELECT observed_at AS time, {LANE_COLUMNS}, {STATE} AS state "
            f"FROM {DB}.transitions_by_time FINAL WHERE $__timeFilter(observed_at) AND kind != 'anomaly' "
            f"AND {lanes} UNION ALL SELECT toDateTime64($__fromTime, 3, 'UTC') AS time, {LANE_COLUMNS}, "
            f"{at_start} AS state FROM {UNDER_WAY_VMS} WHERE {f.overlapping_range()} "
            f"AND first_seen_at < $__fromTime AND {lanes}) AS l INNER JOIN {f.event_sets(f.OVERLAPPING_IDS)} AS s "
            "USING (event_id) ORDER BY time, vm",
            format=g.FORMAT_TIME_SERIES,
            width=24,
            height=12,
            description="One lane per affected VM and event (first 8 characters of the EventId), "
            "sorted by set and fault domain ('set / FD n': the scale set, or the availability set, named after "
            "the VMs that observe the same events). Events already under way when the range starts begin at its "
            "left edge.",
            field_config={"defaults": {"mappings": STATE_MAPPINGS, "color": {"mode": "fixed"}}},
            options={"mergeValues": True, "showValue": "never", "rowHeight": 0.8},
        ),
        g.Panel(
            "Events",
            "table",
            "SELECT event_id, event_type, ifNull(event_source, '') AS source, outcome, first_seen_at, "
            "not_before_first AS not_before, started_at, ended_at, affected_vm_count AS affected, "
            f"{f.fmt_list('affected_vms')} AS vms, {f.fmt_list('fault_domain_labels')} AS fault_domains, seen_by "
            f"FROM {f.since(f.OVERLAPPING_IDS, 'events', platform=f.PLATFORM_OVERLAPPING)} "
            f"WHERE {f.overlapping_range()} AND {f.event_filter()} ORDER BY first_seen_at DESC, event_id LIMIT 1000",
            width=24,
            height=10,
            description="One row per EventId across every VM that saw it. Click an EventId to drill down. "
            + OUTCOME_HELP,
            field_config={"overrides": [event_link_override(), outcome_override()]},
        ),
        g.Row("Drill-down: one EventId (set the EventId variable or click one above)"),
        g.Panel(
            "EventId across VMs",
            "table",
            "SELECT vm_name, fault_set, fault_domain, update_domain, affects_this_vm, first_seen_at, "
            "not_before_first AS not_before, started_at, ended_at, outcome, "
            "if(started_at IS NULL OR ended_at IS NULL, NULL, "
            "dateDiff('millisecond', started_at, ended_at) / 1000) AS started_to_gone_s, observed_impact_s "
            f"FROM {ITS_VMS} WHERE {ONE_EVENT} ORDER BY fault_set, fault_domain, vm_name",
            width=14,
            height=10,
            description="Each VM that saw the event: its own sightings and downtime, the event's Started and "
            "outcome. " + OUTCOME_HELP,
            field_config={"overrides": [outcome_override()]},
        ),
        g.Panel(
            "EventId by fault domain",
            "table",
            "SELECT fault_set, fault_domain, countIf(affects_this_vm) AS affected_vms, count() AS observing_vms, "
            "min(started_at) AS first_started, max(ended_at) AS last_ended, "
            "if(first_started IS NULL OR last_ended IS NULL, NULL, "
            "dateDiff('millisecond', first_started, last_ended) / 1000) AS started_to_gone_s, "
            "countIf(observed_impact_s IS NOT NULL) AS impacted_vms, "
            "maxOrNull(observed_impact_s) AS max_observed_impact_s "
            f"FROM {ITS_VMS} WHERE {ONE_EVENT} GROUP BY fault_set_id, fault_set, fault_domain "
            "ORDER BY fault_set, fault_domain",
            width=10,
            height=10,
            description="The event's Started to the last VM of the domain seeing it gone, VMs hit and the longest "
            "downtime: the same figures as `sevents-ingest audit event`.",
        ),
    ]


def build() -> dict[str, Any]:
    variables = [*f.variables(), g.textbox_variable("event_id", "EventId")]
    return g.dashboard(
        "sevents-timeline",
        "Maintenance timeline",
        panels(),
        variables,
        description="When each VM was Scheduled, Started and released, by set and fault domain; "
        "drill into one EventId.",
        time_from="now-6h",
    )
