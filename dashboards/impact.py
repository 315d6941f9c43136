"""Impact: how long VMs were really down, per fault domain of each set and per event, announced versus observed.

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

TIME = ("$__timeInterval(began_at) AS time",)


def panels() -> list[g.Panel | g.Row]:
    # the downtime that began in the range, on the VMs the variables pick (impacts carry the VM's columns)
    hit = f"$__timeFilter(began_at) AND {f.event_vm_filter()}"
    return [
        g.Panel(
            "Impact per fault domain",
            "barchart",
            "SELECT domain_label AS fault_domain, count() AS events_hit, groupBitmapMerge(vms_) AS vms_hit, "
            "round(sum(impact_) / sum(kept_), 3) AS avg_impact_s, round(max(max_), 3) AS max_impact_s, "
            f"round(sum(impact_), 3) AS total_impact_s FROM {f.hit_domains(hit)} "
            "GROUP BY fault_set_id, fault_set, domain_, domain_label ORDER BY fault_set, domain_, fault_set_id",
            width=12,
            unit="s",
            description="Per VM hit: the downtime its collector measured (a pause, a reboot) that began in the "
            "range. Summed over the VMs of each fault domain of each set (scale set, or the availability set: "
            "the VMs that observe the same events), labelled 'set / FD n'. events_hit and vms_hit count the events "
            "and VMs with such downtime (audit fault-domains counts every event first seen in a window instead).",
            options={"xField": "fault_domain", "showValue": "auto"},
        ),
        g.Panel(
            "Impact over time by fault domain",
            "timeseries",
            "SELECT time, domain_label AS fault_domain, round(sum(impact_), 3) AS impact_s "
            f"FROM {f.hit_domains(hit, TIME)} "
            "GROUP BY time, fault_set_id, domain_label ORDER BY time, fault_domain",
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
            f"impacted_vms AS hit, {f.fmt_list('fault_domain_labels')} AS fault_domains "
            f"FROM {f.since(f.STARTED_IDS, 'events')} WHERE {f.started_in_range()} AND {f.event_filter()} "
            "ORDER BY started_at DESC, event_id LIMIT 1000",
            width=24,
            height=10,
            description="The events that started in the range (when their VMs go down). "
            "Announced: DurationInSeconds (-1 unknown, empty before API 2020-07-01). "
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
        description="Impact duration per fault domain of each set and per event; "
        "announced DurationInSeconds vs observed.",
        time_from="now-7d",
    )
