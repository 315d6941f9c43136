"""Every audit and summary query, in one place: parameterised SQL over the views of the migrations.

Tables are named without a database: run them on a client whose database is the sevents database
(``run`` does that). Values are always bound server-side (``{name:Type}``), never spliced into the text.
The dashboards' tests import these to check that their panels and this module agree.

Each query reads only what it shows: one event or one VM through a primary key, a window through the parts
of the event rollup and the time-ordered transitions that cover it (migration 0006), never the whole history.
"""

# Statements are assembled from constants of this module only; every value is bound server-side, so S608 does
# not apply.
# ruff: noqa: S608

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Query:
    """A named statement and the parameters it binds (name -> ClickHouse type)."""

    name: str
    title: str
    sql: str
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """Column names and rows (timestamps as aware UTC datetimes)."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


# The events first seen in [since, until): found through the parts of event_rollup that cover the window.
WINDOW_IDS = (
    "SELECT event_id FROM event_rollup "
    "WHERE last_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')}"
)
ONE_ID = "SELECT {event_id:String}"


def since(ids: str, view: str = "events", db: str = "") -> str:
    """``events`` or ``event_vms`` restricted to the events ``ids`` selects, read from their first day on.

    A derived table: the selection is evaluated once, as one scalar (the EventIds and the first day), which
    both bounds the rollup parts read and filters the rows, so callers need not repeat ``event_id IN (ids)``.
    ``db`` qualifies the names (``sevents.``) where the client's database is not the sevents one (Grafana).
    """
    picked = (
        f"SELECT (groupUniqArray(event_id), toDate(min(first_seen_at))) FROM {db}event_rollup WHERE event_id IN ({ids})"
    )
    return (
        f"(WITH ({picked}) AS picked SELECT * FROM {db}{view}_since(since_day = picked.2) WHERE event_id IN picked.1)"
    )


EVENTS_FIRST_SEEN_IN_WINDOW = (
    f"FROM {since(WINDOW_IDS)} "
    "WHERE first_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')}"
)


VM_HISTORY = Query(
    "vm_history",
    "What happened to a VM between two times",
    """
SELECT observed_at, vm_name, fault_domain, update_domain, event_id, event_type, kind, prev_status, status,
       not_before, incarnation, affects_this_vm, anomaly, description
FROM transitions FINAL
WHERE vm_id IN (SELECT vm_id FROM transitions_by_time
                WHERE (vm_id = {vm:String} OR vm_name = {vm:String})
                  AND observed_at >= {since:DateTime64(3, 'UTC')} AND observed_at < {until:DateTime64(3, 'UTC')})
  AND observed_at >= {since:DateTime64(3, 'UTC')} AND observed_at < {until:DateTime64(3, 'UTC')}
ORDER BY observed_at, incarnation, kind
-- a transition's copies share its observed_at, hence its month: FINAL may work partition by partition, and the
-- window's months are the only ones read
SETTINGS do_not_merge_across_partitions_select_final = 1
""",
    {"vm": "String", "since": "DateTime64", "until": "DateTime64"},
)

EVENT_SUMMARY = Query(
    "event_summary",
    "One maintenance event across the fleet",
    """
SELECT event_id, event_type, event_source, description, duration_s, outcome, first_seen_at, not_before_first,
       not_before_last, approved_at, started_at, ended_at, notice_s, approval_latency_s, started_to_gone_s,
       observed_impact_s, impacted_vms, affected_vm_count, observing_vms, fault_domains, update_domains, anomalies
FROM """
    + since(ONE_ID)
    + """
WHERE event_id = {event_id:String}
""",
    {"event_id": "String"},
)

EVENT_BY_FAULT_DOMAIN = Query(
    "event_by_fault_domain",
    "Everything an event touched, per fault domain",
    """
SELECT fault_domain,
       countIf(affects_this_vm) AS affected_vms,
       count() AS observing_vms,
       arrayStringConcat(arraySort(groupArrayIf(vm_name, affects_this_vm)), ' ') AS affected,
       min(first_seen_at) AS first_seen,
       min(approved_at) AS first_approved,
       min(started_at) AS first_started,
       max(ended_at) AS last_ended,
       if(first_started IS NULL OR last_ended IS NULL, NULL,
          dateDiff('millisecond', first_started, last_ended) / 1000) AS started_to_gone_s,
       countIf(observed_impact_s IS NOT NULL) AS impacted_vms,
       maxOrNull(observed_impact_s) AS max_observed_impact_s,
       arrayStringConcat(arraySort(groupUniqArray(outcome)), ',') AS outcomes
FROM """
    + since(ONE_ID, "event_vms")
    + """
WHERE event_id = {event_id:String}
GROUP BY fault_domain
ORDER BY fault_domain
""",
    {"event_id": "String"},
)

EVENT_VMS = Query(
    "event_vms",
    "Everything an event touched, per VM",
    """
SELECT fault_domain, update_domain, vm_name, vm_id, affects_this_vm, outcome, first_seen_at, approved_at,
       started_at, ended_at,
       if(started_at IS NULL OR ended_at IS NULL, NULL, dateDiff('millisecond', started_at, ended_at) / 1000)
           AS started_to_gone_s,
       observed_impact_s
FROM """
    + since(ONE_ID, "event_vms")
    + """
WHERE event_id = {event_id:String}
ORDER BY fault_domain, update_domain, vm_name
""",
    {"event_id": "String"},
)

DISRUPTIVE_EVENTS = Query(
    "disruptive_events",
    "Reboot and Redeploy events in a window, with approval latency and impact",
    """
SELECT event_id, event_type, outcome, first_seen_at, not_before_first, approved_at, started_at, ended_at,
       approval_latency_s, notice_s, started_to_gone_s, observed_impact_s, impacted_vms, affected_vm_count,
       fault_domains
"""
    + EVENTS_FIRST_SEEN_IN_WINDOW
    + """
  AND has({types:Array(String)}, event_type)
ORDER BY first_seen_at, event_id
""",
    {"types": "Array(String)", "since": "DateTime64", "until": "DateTime64"},
)

SILENT_VMS = Query(
    "silent_vms",
    "VMs whose collector went quiet, or whose last poll failed (retired VMs last, marked)",
    """
SELECT vm_name, vm_id, fault_domain, update_domain, last_heartbeat_at AS last_heartbeat,
       dateDiff('millisecond', last_heartbeat_at, {now:DateTime64(3, 'UTC')}) / 1000 AS silent_for_s,
       last_poll_ok, last_poll_error, outbox_depth, state = 'retired' AS retired, retired_reason
FROM vm_status
WHERE last_heartbeat_at < {now:DateTime64(3, 'UTC')} - toIntervalSecond({threshold_s:UInt32}) OR NOT last_poll_ok
ORDER BY retired, last_heartbeat_at, vm_name
""",
    {"now": "DateTime64", "threshold_s": "UInt32"},
)

EVENTS_IN_WINDOW = Query(
    "events_in_window",
    "Every event first seen in a window",
    """
SELECT event_id, event_type, event_source, outcome, first_seen_at, not_before_first, not_before_last,
       approved_at, started_at, ended_at, notice_s, approval_latency_s, started_to_gone_s, observed_impact_s,
       impacted_vms, affected_vm_count,
       affected_vms, fault_domains, update_domains, duration_s, description
"""
    + EVENTS_FIRST_SEEN_IN_WINDOW
    + """
ORDER BY first_seen_at, event_id
""",
    {"since": "DateTime64", "until": "DateTime64"},
)

FAULT_DOMAIN_SUMMARY = Query(
    "fault_domain_summary",
    "Approval latency and impact per fault domain (affected VMs of events first seen in a window)",
    """
SELECT v.fault_domain AS fault_domain,
       uniqExact(v.event_id) AS events,
       uniqExact(v.vm_id) AS vms,
       countIf(v.outcome = 'completed') AS completed,
       countIf(v.outcome = 'cancelled') AS cancelled,
       countIf(v.outcome = 'active') AS active,
       avgOrNull(dateDiff('millisecond', e.first_seen_at, v.approved_at) / 1000) AS avg_approval_latency_s,
       maxOrNull(dateDiff('millisecond', e.first_seen_at, v.approved_at) / 1000) AS max_approval_latency_s,
       avgOrNull(dateDiff('millisecond', v.started_at, v.ended_at) / 1000) AS avg_started_to_gone_s,
       maxOrNull(dateDiff('millisecond', v.started_at, v.ended_at) / 1000) AS max_started_to_gone_s,
       countIf(v.observed_impact_s IS NOT NULL) AS impacted_vms,
       avgOrNull(v.observed_impact_s) AS avg_observed_impact_s,
       maxOrNull(v.observed_impact_s) AS max_observed_impact_s
FROM """
    + since(WINDOW_IDS, "event_vms")
    + """ AS v
INNER JOIN
(
    SELECT event_id, first_seen_at FROM """
    + since(WINDOW_IDS)
    + """
    WHERE first_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')}
) AS e ON e.event_id = v.event_id
WHERE v.affects_this_vm
GROUP BY fault_domain
ORDER BY fault_domain
""",
    {"since": "DateTime64", "until": "DateTime64"},
)

DOWNTIME = Query(
    "downtime",
    "Downtime the VMs measured on themselves in a window (event_id empty: no event announced it)",
    """
SELECT began_at, vm_name, fault_domain, scale_set, detected_by, duration_s, event_id, event_type
FROM impacts FINAL
WHERE began_at >= {since:DateTime64(3, 'UTC')} AND began_at < {until:DateTime64(3, 'UTC')}
ORDER BY began_at, vm_name
""",
    {"since": "DateTime64", "until": "DateTime64"},
)

COUNTS = Query(
    "counts",
    "Rows per table after deduplication",
    """
SELECT
    (SELECT count() FROM transitions FINAL) AS transitions,
    (SELECT uniqExact(event_id) FROM event_rollup) AS events,
    (SELECT count() FROM heartbeats FINAL) AS heartbeats,
    (SELECT count() FROM heartbeats_latest FINAL) AS vms_with_heartbeat,
    (SELECT count() FROM dead_letters FINAL) AS dead_letters,
    (SELECT count() FROM impacts FINAL) AS impacts
""",
)

ALL: tuple[Query, ...] = (
    VM_HISTORY,
    EVENT_SUMMARY,
    EVENT_BY_FAULT_DOMAIN,
    EVENT_VMS,
    DISRUPTIVE_EVENTS,
    SILENT_VMS,
    EVENTS_IN_WINDOW,
    FAULT_DOMAIN_SUMMARY,
    DOWNTIME,
    COUNTS,
)


def run(client: Any, query: Query, database: str = "sevents", **params: Any) -> Result:
    """Run ``query`` in ``database`` with server-side bound ``params`` (exactly the declared ones)."""
    missing = set(query.params) - set(params)
    extra = set(params) - set(query.params)
    if missing or extra:
        raise TypeError(f"query {query.name}: missing {sorted(missing)}, unexpected {sorted(extra)}")
    bound = {k: _bindable(v) for k, v in params.items()}
    client.database = database
    result = client.query(query.sql, parameters=bound)
    rows = [tuple(_aware(v) for v in row) for row in result.result_rows]
    return Result(tuple(result.column_names), rows)


def _bindable(value: Any) -> Any:
    if isinstance(value, datetime):
        # ClickHouse binds a naive text timestamp in the column's zone (UTC): send UTC, without the zone.
        utc = value.astimezone(UTC) if value.tzinfo else value
        return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d}"
    if isinstance(value, tuple):
        return list(value)
    return value


def _aware(value: Any) -> Any:
    # The embedded engine hands DateTime64('UTC') back naive; every timestamp here is UTC.
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value
