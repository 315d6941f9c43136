"""Impact: how long VMs were really down, per fault domain and per event, announced versus observed.

Observed impact is the downtime each collector measured on its own VM (``impacts``, ``event_vms.observed_impact_s``):
a Freeze's pause of seconds, a reboot's minutes, not the ten minutes an event stays Started.
"""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.fleet import event_link_override

PAIRS = f.since(f.OVERLAPPING_IDS, "event_vms")
VM_IMPACT = "observed_impact_s"


def panels() -> list[g.Panel | g.Row]:
    done_on_vm = (
        f"observed_impact_s IS NOT NULL AND started_at IS NOT NULL AND "
        f"{f.overlapping_range('started_at')} AND {f.event_vm_filter()}"
    )
    return [
        g.Panel(
            "Impact per fault domain",
            "barchart",
            "SELECT concat('FD ', ifNull(toString(fault_domain), '?')) AS fault_domain, "
            "uniqExact(event_id) AS events, uniqExact(vm_id) AS vms, "
            f"round(avg({VM_IMPACT}), 3) AS avg_impact_s, round(max({VM_IMPACT}), 3) AS max_impact_s, "
            f"round(sum({VM_IMPACT}), 3) AS total_impact_s FROM {PAIRS} WHERE {done_on_vm} "
            "GROUP BY fault_domain ORDER BY fault_domain",
            width=12,
            unit="s",
            description="Per VM hit: the downtime its collector measured (a pause, a reboot). Summed over the VMs "
            "of each fault domain.",
            options={"xField": "fault_domain", "showValue": "auto"},
        ),
        g.Panel(
            "Impact over time by fault domain",
            "timeseries",
            "SELECT $__timeInterval(assumeNotNull(started_at)) AS time, "
            "concat('FD ', ifNull(toString(fault_domain), '?')) AS fault_domain, "
            f"round(sum({VM_IMPACT}), 3) AS impact_s FROM {PAIRS} "
            f"WHERE {done_on_vm} AND $__timeFilter(started_at) GROUP BY time, fault_domain ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=12,
            unit="s",
            field_config={"defaults": {"custom": {"drawStyle": "bars", "stacking": {"mode": "normal"}}}},
        ),
        g.Panel(
            "Announced DurationInSeconds versus observed impact",
            "table",
            "SELECT event_id, event_type, ifNull(event_source, '') AS source, started_at, ended_at, "
            "duration_s AS announced_s, observed_impact_s AS observed_s, "
            "if(duration_s IS NULL OR duration_s < 0 OR observed_impact_s IS NULL, NULL, "
            "observed_impact_s - duration_s) AS overrun_s, started_to_gone_s, affected_vm_count AS affected, "
            "impacted_vms AS hit, "
            f"{f.fmt_list('fault_domains')} AS fault_domains "
            f"FROM {f.since(f.OVERLAPPING_IDS)} WHERE started_at IS NOT NULL AND {f.overlapping_range('started_at')} "
            f"AND {f.event_filter()} ORDER BY started_at DESC, event_id LIMIT 1000",
            width=24,
            height=10,
            description="Announced: DurationInSeconds (-1 unknown, empty before API 2020-07-01). "
            "Observed: the longest downtime a VM of the event measured on itself; hit: how many VMs measured one. "
            "started_to_gone_s: first Started to gone on the last VM (an event stays Started long after its pause).",
            field_config={"overrides": [event_link_override()]},
        ),
        g.Panel(
            "Unannounced pauses and reboots",
            "table",
            "SELECT began_at, vm_name, ifNull(toString(fault_domain), '') AS fault_domain, scale_set, detected_by, "
            f"duration_s FROM {f.DB}.impacts FINAL WHERE event_id = '' AND $__timeFilter(began_at) "
            "ORDER BY began_at DESC, vm_name LIMIT 1000",
            width=24,
            height=8,
            unit="s",
            description="Downtime a VM measured on itself while no event of it was Started: a pause or a reboot "
            "that Scheduled Events never announced.",
        ),
    ]


def build() -> dict[str, Any]:
    return g.dashboard(
        "sevents-impact",
        "Impact",
        panels(),
        f.variables(),
        description="Impact duration per fault domain and per event; announced DurationInSeconds vs observed.",
        time_from="now-7d",
    )
