"""Fleet overview: what is active now, what is coming (with NotBefore), who is reporting, dead letters."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

from dashboards import coverage
from dashboards import filters as f
from dashboards import grafana as g
from dashboards.filters import DB

DESTRUCTIVE = "('Reboot', 'Redeploy', 'Terminate', 'Preempt')"
ACTIVE = f.since(f.ACTIVE_IDS, "events")
# The EventId percent-encoded (Grafana's data links default to `uriencode`, which keeps & = # + as they are): an
# EventId that holds them reaches the drill-down whole, not as more URL parameters.
TIMELINE_LINK = "/d/sevents-timeline/maintenance-timeline?var-event_id=${__value.raw:percentencode}&${__url_time_range}"


def event_link_override(column: str = "event_id") -> dict[str, Any]:
    """Clicking an EventId opens its drill-down on the timeline dashboard."""
    return {
        "matcher": {"id": "byName", "options": column},
        "properties": [{"id": "links", "value": [{"title": "Drill down", "url": TIMELINE_LINK}]}],
    }


def _stat(title: str, sql: str, description: str, width: int = 6, unit: str = "none") -> g.Panel:
    return g.Panel(
        title,
        "stat",
        sql,
        width=width,
        height=5,
        description=description,
        unit=unit,
        options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "textMode": "auto"},
    )


def panels() -> list[g.Panel | g.Row]:
    active = f"{f.active()} AND {f.active_event_filter()}"
    return [
        _stat(
            "Events active now",
            f"SELECT count() AS active FROM {ACTIVE} WHERE {active}",
            "EventIds some collector still sees in IMDS (Scheduled or Started).",
        ),
        _stat(
            "Collectors",
            "SELECT countIf(state = 'reporting') AS reporting, countIf(state = 'silent') AS silent, "
            f"countIf(state = 'retired') AS retired FROM {DB}.vm_status WHERE {f.vm_filter()}",
            "Reporting: a heartbeat in the last five minutes. Silent: none since. Retired: the VM is gone (its "
            "Terminate or Preempt started, its collector stopped cleanly, or it has been silent beyond the horizon).",
            width=9,
        ),
        _stat(
            "Dead letters",
            f"SELECT count() AS dead_letters FROM {DB}.dead_letters FINAL WHERE $__timeFilter(received_at)",
            "Records the ingest could not load, in the time range (not filtered by VM).",
            width=9,
        ),
        g.Panel(
            "Upcoming Reboot, Redeploy, Terminate and Preempt",
            "table",
            "SELECT not_before_last AS not_before, dateDiff('second', now(), not_before_last) AS starts_in_s, "
            "event_id, event_type, ifNull(event_source, '') AS source, affected_vm_count AS affected, "
            f"{f.fmt_list('affected_vms')} AS vms, {f.fmt_list('fault_domain_labels')} AS fault_domains, "
            f"first_seen_at FROM {f.since(f.ACTIVE_IDS, 'events')} WHERE {active} AND started_at IS NULL "
            f"AND event_type IN {DESTRUCTIVE} ORDER BY not_before_last, event_id",
            width=24,
            description="Scheduled, not started yet; NotBefore is the latest one IMDS announced.",
            field_config={"overrides": [event_link_override()]},
        ),
        g.Panel(
            "Active events by type",
            "bargauge",
            f"SELECT event_type, count() AS events FROM {ACTIVE} WHERE {active} "
            "GROUP BY event_type ORDER BY event_type",
            width=8,
            options={
                "displayMode": "basic",
                "orientation": "horizontal",
                "reduceOptions": {"calcs": ["lastNotNull"], "values": True},
            },
        ),
        g.Panel(
            "Events first seen, by type",
            "timeseries",
            f"SELECT $__timeInterval(first_seen_at) AS time, event_type, count() AS events "
            f"FROM {f.stored(f.FIRST_SEEN_IDS)} WHERE {f.first_seen_in_range()} AND {f.event_filter()} "
            "GROUP BY time, event_type ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=16,
            field_config={"defaults": {"custom": {"drawStyle": "bars", "stacking": {"mode": "normal"}}}},
        ),
        g.Panel(
            "Silent and retired collectors",
            "table",
            "SELECT state, vm_name, scale_set, ifNull(toString(fault_domain), '') AS fault_domain, location, "
            "last_heartbeat_at AS last_heartbeat, toInt64(silent_for_s) AS silent_s, retired_reason, "
            f"collector_version FROM {DB}.vm_status WHERE state != 'reporting' AND {f.vm_filter()} "
            "ORDER BY state DESC, silent_s DESC, vm_name LIMIT 1000",
            width=24,
            description="Silent: no heartbeat for five minutes (the VM is down, the collector stopped, or shipping "
            "is stuck). Retired: gone for good, shown apart and never paged as silent. At most 1,000: "
            "silent before retired, the longest silent first.",
        ),
        *coverage.panels(),  # Azure's inventory and account beside the collectors' (issue 27)
    ]


def build() -> dict[str, Any]:
    return g.dashboard(
        "sevents-fleet",
        "Fleet overview",
        panels(),
        f.variables(),
        description="Azure Scheduled Events across the fleet: active, upcoming, collectors, dead letters.",
        links=[{"title": "sevents", "type": "dashboards", "tags": ["sevents"], "asDropdown": True}],
    )
