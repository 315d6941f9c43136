"""Approval latency: how long approval took by event type and source, the notice given, and who released it,
with the approvals sevents' own policy made (the ``approvals`` table): by which VM, rule and hook."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from typing import Any, Final

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.fleet import event_link_override
from ingest import queries

# Who released each event, from the event's moments over all the evidence (the views' ``released_by``, migration
# 0013): sevents' own approval record, an earlier start than NotBefore without one (approved outside sevents),
# a start at or after a NotBefore that was seen, or a start with no NotBefore ever seen (a host failure, an event
# first seen already Started). An event that never started says why: cancelled, its end not seen, or pending.
RELEASED: Final = (
    ("sevents", "sevents policy (StartRequests)"),
    ("outside", "approved outside sevents"),
    ("not_before", "platform (NotBefore reached)"),
    ("no_notice", "started without notice"),
)
NOT_STARTED: Final = (("cancelled", "cancelled"), ("end_not_seen", "end not seen"))
PENDING: Final = "pending"


def released(released_by: str | None, outcome: str) -> str:
    """The label of who released an event, as ``RELEASED_BY`` computes it in SQL (for the report)."""
    if released_by is not None:
        return dict(RELEASED).get(released_by, released_by)
    return dict(NOT_STARTED).get(outcome, PENDING)


# a value this module does not know yet shows as it is
RELEASED_BY: Final = (
    "multiIf("
    + "".join(f"released_by = '{value}', '{label}', " for value, label in RELEASED)
    + "released_by IS NOT NULL, assumeNotNull(released_by), "
    + "".join(f"outcome = '{value}', '{label}', " for value, label in NOT_STARTED)
    + f"'{PENDING}')"
)
DECISIONS_WHERE = f"$__timeFilter(decided_at) AND {f.event_type_filter()} AND {f.vm_filter()}"
# the lifecycle of each event is all these panels show: no sets, Resources or observed impact to pay for
EVENTS = f.since(f.OVERLAPPING_IDS, "events")
TYPE_SOURCE = "concat(event_type, ' / ', ifNull(event_source, 'unknown'))"
# per (event, observing VM): the user-initiated events' waits are per affected VM (ingest.queries.USER_WAITS)
USER_EVENTS = f.since(f.USER_IDS, "event_vm_lifecycles")


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
            description="First seen to approval, approved events only: the approval sevents' policy recorded, or "
            "the start of an event that started before its NotBefore without one (approved outside sevents).",
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
            f"SELECT {RELEASED_BY} AS released, count() AS events FROM {EVENTS} WHERE {where} "
            "GROUP BY released ORDER BY released",
            width=10,
            description="sevents policy: sevents approved it (StartRequests); approved outside sevents: it started "
            "before its NotBefore without an sevents approval; platform: a NotBefore was seen and it started at or "
            "after it; started without notice: no NotBefore was ever seen (a host failure, first seen Started). "
            "Not started: cancelled (a VM saw it gone), end not seen (its collectors stopped or went silent while "
            "it was Scheduled), or pending.",
            options={"reduceOptions": {"calcs": ["lastNotNull"], "values": True}, "pieType": "donut"},
        ),
        g.Panel(
            "Notice given per event",
            "table",
            f"SELECT event_id, event_type, ifNull(event_source, '') AS source, {RELEASED_BY} AS released, "
            "first_seen_at, not_before_first AS not_before, "
            "if(not_before_first IS NULL, NULL, dateDiff('millisecond', first_seen_at, not_before_first) / 1000) "
            "AS announced_notice_s, notice_s, approval_latency_s "
            f"FROM {EVENTS} WHERE {where} ORDER BY first_seen_at DESC, event_id LIMIT 1000",
            width=24,
            height=10,
            description="Announced notice: NotBefore minus first seen. Notice: Started minus first seen. "
            "Released: who released the event (see 'Who released the event').",
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
            "User-initiated events that waited",
            "table",
            "SELECT first_seen_at, vm_name, event_id, event_type, not_before_first AS not_before, released_by, "
            f"{queries.USER_WAIT_COLUMNS} FROM {USER_EVENTS} "
            f"WHERE {f.overlapping_range()} AND {queries.USER_WAIT_ROWS} AND {f.event_vm_filter()} "
            "ORDER BY waited_s DESC, first_seen_at DESC, vm_name LIMIT 1000",
            width=24,
            height=8,
            description="Reboots and Redeploys a user started (EventSource User), per affected VM: how long each "
            "waited from appearing to its approval or start. Polling switches Scheduled Events on, so such an event "
            "waits for its NotBefore (about 15 minutes) unless approved: [approval] approve_user_initiated = true "
            "(or Azure's scheduledEventsPolicy automaticallyApprove) makes the wait about nothing. Waiting: still "
            "Scheduled, waited until now.",
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
