"""Impact: how long VMs were impacted, per fault domain of each set and per event, announced versus observed."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.fleet import event_link_override

VM_IMPACT = "dateDiff('millisecond', started_at, ended_at) / 1000"
TIME = ("$__timeInterval(assumeNotNull(started_at)) AS time",)


def _per_domain(done: str, keys: tuple[str, ...] = ()) -> str:
    # one row per (event, set, FD): figures then group by (set, domain), never by the bare number
    partials = (
        f"uniqExactStateIf(vm_id, {done}) AS vms_, sumIf({VM_IMPACT}, {done}) AS impact_, "
        f"maxIf({VM_IMPACT}, {done}) AS max_"
    )
    return f.domain_groups(f.OVERLAPPING_IDS, done, partials, keys)


def panels() -> list[g.Panel | g.Row]:
    done_on_vm = (
        f"affects_this_vm AND started_at IS NOT NULL AND ended_at IS NOT NULL AND "
        f"{f.overlapping_range('started_at')} AND {f.event_vm_filter()}"
    )
    return [
        g.Panel(
            "Impact per fault domain",
            "barchart",
            "SELECT domain_label AS fault_domain, count() AS events, uniqExactMerge(vms_) AS vms, "
            "round(sum(impact_) / sum(kept_), 3) AS avg_impact_s, round(max(max_), 3) AS max_impact_s, "
            f"round(sum(impact_), 3) AS total_impact_s FROM {_per_domain(done_on_vm)} "
            "GROUP BY fault_set_id, fault_set, domain_, domain_label ORDER BY fault_set, domain_, fault_set_id",
            width=12,
            unit="s",
            description="Per affected VM: Started to gone. Summed over the VMs of each fault domain of each set "
            "(scale set, or the availability set: the VMs that observe the same events), labelled 'set / FD n'.",
            options={"xField": "fault_domain", "showValue": "auto"},
        ),
        g.Panel(
            "Impact over time by fault domain",
            "timeseries",
            "SELECT time, domain_label AS fault_domain, round(sum(impact_), 3) AS impact_s "
            f"FROM {_per_domain(done_on_vm + ' AND $__timeFilter(started_at)', TIME)} "
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
            "duration_s AS announced_s, impact_s AS observed_s, "
            "if(duration_s IS NULL OR duration_s < 0 OR impact_s IS NULL, NULL, impact_s - duration_s) "
            f"AS overrun_s, affected_vm_count AS affected, {f.fmt_list('fault_domain_labels')} AS fault_domains "
            f"FROM {f.scoped_events(f.OVERLAPPING_IDS)} WHERE started_at IS NOT NULL "
            f"AND {f.overlapping_range('started_at')} AND {f.event_filter()} "
            "ORDER BY started_at DESC, event_id LIMIT 1000",
            width=24,
            height=10,
            description="Announced: DurationInSeconds (-1 unknown, empty before API 2020-07-01). "
            "Observed: first Started to gone on the last VM.",
            field_config={"overrides": [event_link_override()]},
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
