"""Approval latency: how long approval took by event type and source, the notice given, and who released it,
with the approvals sevents' own policy made (the ``approvals`` table): by which VM, rule and hook."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.fleet import event_link_override

# IMDS never says who approved. What an observer can tell: the event started before NotBefore (someone
# POSTed StartRequests), at or after it (the platform's own deadline), or not at all. Approvals sevents made
# are in ``approvals``; an early start without one there was approved by someone outside sevents. The search
# reaches back as far as the events the range can show (their approval came after their first observation).
SEVENTS_APPROVED = (
    f"(SELECT event_id FROM {f.DB}.approvals WHERE decision = 'approved' "
    f"AND decided_at >= $__fromTime - INTERVAL {f.LOOKBACK_DAYS} DAY)"
)
BY_SEVENTS = "sevents policy (StartRequests)"
BY_OUTSIDE = "approved outside sevents"
RELEASED_BY = (
    f"multiIf(approved_at IS NOT NULL AND event_id IN {SEVENTS_APPROVED}, '{BY_SEVENTS}', "
    f"approved_at IS NOT NULL, '{BY_OUTSIDE}', started_at IS NOT NULL, "
    "'platform (NotBefore reached)', outcome = 'cancelled', 'cancelled', 'pending')"
)
DECISIONS_WHERE = f"$__timeFilter(decided_at) AND {f.event_type_filter()} AND {f.vm_filter()}"
# the lifecycle of each event is all these panels show: no sets, Resources or observed impact to pay for
EVENTS = f.since(f.OVERLAPPING_IDS, "event_lifecycles")
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
            "Approved by sevents",
            "table",
            "SELECT decided_at, event_id, event_type, vm_name AS approved_by, rule, hook_exit, hook_s, http_status, "
            "if(not_before IS NOT NULL AND not_before > decided_at, "
            "dateDiff('millisecond', decided_at, not_before) / 1000, NULL) AS notice_saved_s "
            f"FROM {f.DB}.approvals FINAL WHERE decision = 'approved' AND {DECISIONS_WHERE} "
            "ORDER BY decided_at DESC, event_id LIMIT 1000",
            width=14,
            height=8,
            description="Each approval a collector's policy sent: the VM, the rule that made it the approver, its "
            "pre-approval hook (exit code, seconds), the POST's HTTP status, and the notice saved (NotBefore minus "
            "the approval).",
            field_config={"overrides": [event_link_override()]},
        ),
        g.Panel(
            "Approval policy decisions",
            "table",
            "SELECT decision, rule, count() AS decisions, uniqExact(event_id) AS events, "
            "round(avg(hook_s), 3) AS avg_hook_s, round(max(hook_s), 3) AS max_hook_s "
            f"FROM {f.DB}.approvals FINAL WHERE {DECISIONS_WHERE} GROUP BY decision, rule ORDER BY decision, rule",
            width=10,
            height=8,
            description="Every decision of the collectors' approval policies: approved, left to the approving VM, "
            "refused by a failing or hanging hook, or not covered (rule: the first rule the event failed).",
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
