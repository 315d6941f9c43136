"""Approval latency: how long approval took by event type and source, the notice given, and who released it."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.fleet import event_link_override

# IMDS never says who approved. What an observer can tell: the event started before NotBefore (someone
# POSTed StartRequests), at or after it (the platform's own deadline), or not at all.
RELEASED_BY = (
    "multiIf(approved_at IS NOT NULL, 'approval (StartRequests)', started_at IS NOT NULL, "
    "'platform (NotBefore reached)', outcome = 'cancelled', 'cancelled', 'pending')"
)
EVENTS = f.since(f.OVERLAPPING_IDS)
TYPE_SOURCE = "concat(event_type, ' / ', ifNull(event_source, 'unknown'))"


def panels() -> list[g.Panel | g.Row]:
    where = f"{f.overlapping_range()} AND {f.event_filter()}"
    return [
        g.Panel(
            "Approval latency by type and source",
            "barchart",
            f"SELECT {TYPE_SOURCE} AS type_source, countIf(approved_at IS NOT NULL) AS approved, "
            "round(quantileExactIf(0.5)(approval_latency_s, approved_at IS NOT NULL), 3) AS p50_s, "
            "round(quantileExactIf(0.9)(approval_latency_s, approved_at IS NOT NULL), 3) AS p90_s, "
            "round(maxIf(approval_latency_s, approved_at IS NOT NULL), 3) AS max_s "
            f"FROM {EVENTS} WHERE {where} AND approved_at IS NOT NULL "
            "GROUP BY type_source ORDER BY type_source",
            width=14,
            unit="s",
            description="First seen to approval (the event started before its NotBefore), approved events only.",
            options={"xField": "type_source", "orientation": "horizontal", "showValue": "auto"},
            field_config={
                "overrides": [
                    {
                        "matcher": {"id": "byName", "options": "approved"},
                        "properties": [{"id": "unit", "value": "none"}],
                    }
                ]
            },
        ),
        g.Panel(
            "Who released the event",
            "piechart",
            f"SELECT {RELEASED_BY} AS released_by, count() AS events FROM {EVENTS} WHERE {where} "
            "GROUP BY released_by ORDER BY released_by",
            width=10,
            options={"reduceOptions": {"calcs": ["lastNotNull"], "values": True}, "pieType": "donut"},
        ),
        g.Panel(
            "Notice given per event",
            "table",
            f"SELECT event_id, event_type, ifNull(event_source, '') AS source, {RELEASED_BY} AS released_by, "
            "first_seen_at, not_before_first AS not_before, "
            "if(not_before_first IS NULL, NULL, dateDiff('millisecond', first_seen_at, not_before_first) / 1000) "
            "AS announced_notice_s, notice_s, approval_latency_s "
            f"FROM {EVENTS} WHERE {where} ORDER BY first_seen_at DESC, event_id LIMIT 1000",
            width=24,
            height=10,
            description="Announced notice: NotBefore minus first seen. Notice: Started minus first seen.",
            field_config={"overrides": [event_link_override()]},
        ),
        g.Panel(
            "Approval latency over time",
            "timeseries",
            "SELECT $__timeInterval(assumeNotNull(approved_at)) AS time, event_type, "
            "avg(approval_latency_s) AS latency_s "
            f"FROM {EVENTS} WHERE {where} AND approved_at IS NOT NULL AND $__timeFilter(approved_at) "
            "GROUP BY time, event_type ORDER BY time",
            format=g.FORMAT_TIME_SERIES,
            width=24,
            unit="s",
            field_config={"defaults": {"custom": {"drawStyle": "points", "pointSize": 8}}},
        ),
    ]


def build() -> dict[str, Any]:
    return g.dashboard(
        "sevents-approval",
        "Approval latency",
        panels(),
        f.variables(),
        description="How fast maintenance was approved, how much notice it gave, and what released it.",
        time_from="now-7d",
    )
