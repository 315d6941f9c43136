"""Every audit and summary query, in one place: parameterised SQL over the views of the migrations (the SQL it
shares with the dashboards is in ``ingest.event_sql``).

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

from ingest.event_sql import ONE_ID, WINDOW_IDS, WINDOW_ROWS_AFTER, rollup_rows, scoped, since, user_initiated


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


EVENTS_FIRST_SEEN_IN_WINDOW = (
    f"FROM {since(WINDOW_IDS, rows_after=WINDOW_ROWS_AFTER)} "
    "WHERE first_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')}"
)
# The same, with the events only Azure's account has (the central feed, Resource Graph): seen_by 'platform'.
PLATFORM_IN_WINDOW = "first_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')}"
EVENTS_AND_PLATFORM_IN_WINDOW = (
    f"FROM {since(WINDOW_IDS, platform=PLATFORM_IN_WINDOW, rows_after=WINDOW_ROWS_AFTER)} "
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
       observed_impact_s, impacted_vms, affected_vm_count, observing_vms, fault_domains, update_domains, fault_sets,
       fault_domain_labels, update_domain_labels, anomalies, released_by, started_at_source, ended_at_source
FROM """
    + since(ONE_ID)
    + """
WHERE event_id = {event_id:String}
""",
    {"event_id": "String"},
)

EVENT_BY_FAULT_DOMAIN = Query(
    "event_by_fault_domain",
    "Everything an event touched, per fault domain of its set",
    """
SELECT fault_set, fault_domain, fault_domain_label,
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
    + scoped(ONE_ID)
    + """
WHERE event_id = {event_id:String}
GROUP BY fault_set_id, fault_set, fault_domain, fault_domain_label
ORDER BY fault_set, fault_domain
""",
    {"event_id": "String"},
)

EVENT_VMS = Query(
    "event_vms",
    "Everything an event touched, per VM",
    """
SELECT fault_set, fault_domain, update_domain, fault_domain_label, update_domain_label, vm_name, vm_id,
       affects_this_vm, outcome, first_seen_at, approved_at, started_at, ended_at,
       if(started_at IS NULL OR ended_at IS NULL, NULL, dateDiff('millisecond', started_at, ended_at) / 1000)
           AS started_to_gone_s,
       observed_impact_s, vm_started_at, started_at_source, ended_at_source
FROM """
    + scoped(ONE_ID)
    + """
WHERE event_id = {event_id:String}
ORDER BY fault_set, fault_domain, update_domain, vm_name
""",
    {"event_id": "String"},
)

DISRUPTIVE_EVENTS = Query(
    "disruptive_events",
    "Reboot and Redeploy events in a window, with approval latency and impact",
    """
SELECT event_id, event_type, outcome, first_seen_at, not_before_first, approved_at, started_at, ended_at,
       approval_latency_s, notice_s, started_to_gone_s, observed_impact_s, impacted_vms, affected_vm_count,
       fault_domains, fault_sets, fault_domain_labels, released_by, started_at_source, ended_at_source
"""
    + EVENTS_FIRST_SEEN_IN_WINDOW
    + """
  AND has({types:Array(String)}, event_type)
ORDER BY first_seen_at, event_id
""",
    {"types": "Array(String)", "since": "DateTime64", "until": "DateTime64"},
)

# User-initiated events (EventSource User) per affected VM (issue 28): polling switches Scheduled Events on, and a
# user's own Reboot or Redeploy then waits for its NotBefore unless something approves it. The wait runs from the
# VM first seeing the event to the first of its approval and its start; one still Scheduled has waited until now,
# one that never started until it was last seen. approve_user_initiated (or Azure's automaticallyApprove, which
# shows the event Started at once) makes it about nothing. Shared by the audit question and the approval panel.
USER_WAIT_COLUMNS = (
    "least(ifNull(approved_at, started_at), ifNull(started_at, approved_at)) AS released_at, "
    "multiIf(released_at IS NOT NULL, 'released', outcome = 'active', 'waiting', outcome) AS wait_state, "
    "greatest(0, dateDiff('millisecond', first_seen_at, "
    "multiIf(released_at IS NOT NULL, released_at, outcome = 'active', now64(3), last_seen_at))) / 1000 AS waited_s"
)
USER_WAIT_ROWS = "event_source = 'User' AND affects_this_vm"

USER_WAITS = Query(
    "user_waits",
    "User-initiated events (EventSource User) first seen in a window, per affected VM: how long each waited from "
    "appearing to its approval or start",
    f"""
SELECT first_seen_at, vm_name, vm_id, event_id, event_type, not_before_first AS not_before, approved_at,
       started_at, released_by, {USER_WAIT_COLUMNS}
FROM {since(user_initiated(WINDOW_IDS), "event_vm_lifecycles")}
WHERE {USER_WAIT_ROWS}
  AND first_seen_at >= {{since:DateTime64(3, 'UTC')}} AND first_seen_at < {{until:DateTime64(3, 'UTC')}}
ORDER BY waited_s DESC, first_seen_at, vm_name
""",
    {"since": "DateTime64", "until": "DateTime64"},
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
       impacted_vms, affected_vm_count, affected_vms, fault_domains, update_domains, fault_sets, fault_domain_labels,
       update_domain_labels, duration_s, description, released_by, started_at_source, ended_at_source,
       seen_by, platform_status, outcome_source
"""
    + EVENTS_AND_PLATFORM_IN_WINDOW
    + """
ORDER BY first_seen_at, event_id
""",
    {"since": "DateTime64", "until": "DateTime64"},
)

FAULT_DOMAIN_SUMMARY = Query(
    "fault_domain_summary",
    "Approval latency and impact per fault domain of each set (affected VMs of events first seen in a window)",
    """
SELECT v.fault_set AS fault_set,
       v.fault_domain AS fault_domain,
       v.fault_domain_label AS fault_domain_label,
       uniqExact(v.event_id) AS events,
       uniqExact(v.vm_id) AS vms,
       -- events, by outcome (each (event, VM) row carries its event's outcome; a VM still showing an event keeps
       -- it active here as in events)
       uniqExactIf(v.event_id, v.outcome = 'completed') AS completed_events,
       uniqExactIf(v.event_id, v.outcome = 'cancelled') AS cancelled_events,
       uniqExactIf(v.event_id, v.outcome = 'active') AS active_events,
       uniqExactIf(v.event_id, v.outcome = 'end_not_seen') AS end_not_seen_events,
       -- the event's approval (v.approved_at is the event's, whichever VM saw it), per affected VM
       avgOrNull(dateDiff('millisecond', e.first_seen_at, v.approved_at) / 1000) AS avg_approval_latency_s,
       maxOrNull(dateDiff('millisecond', e.first_seen_at, v.approved_at) / 1000) AS max_approval_latency_s,
       avgOrNull(dateDiff('millisecond', v.started_at, v.ended_at) / 1000) AS avg_started_to_gone_s,
       maxOrNull(dateDiff('millisecond', v.started_at, v.ended_at) / 1000) AS max_started_to_gone_s,
       countIf(v.observed_impact_s IS NOT NULL) AS impacted_vms,
       avgOrNull(v.observed_impact_s) AS avg_observed_impact_s,
       maxOrNull(v.observed_impact_s) AS max_observed_impact_s
FROM """
    + scoped(WINDOW_IDS)
    + """ AS v
INNER JOIN
(
    -- each event's first observation from its rollup rows (what events.first_seen_at is), not through events
    SELECT event_id, min(first_seen_at) AS first_seen_at
    FROM event_rollup
    WHERE """
    + rollup_rows(WINDOW_IDS, WINDOW_ROWS_AFTER)
    + """
    GROUP BY event_id
    HAVING first_seen_at >= {since:DateTime64(3, 'UTC')} AND first_seen_at < {until:DateTime64(3, 'UTC')}
) AS e ON e.event_id = v.event_id
WHERE v.affects_this_vm
GROUP BY v.fault_set_id, fault_set, fault_domain, fault_domain_label
ORDER BY fault_set, fault_domain
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

APPROVALS = Query(
    "approvals",
    "Decisions of the collectors' approval policies in a window: who approved each event, through which rule, "
    "how long the hook took and how much notice the approval saved",
    """
SELECT decided_at, event_id, event_type, vm_name, decision, rule, approver, hook_exit, hook_s, http_status,
       if(decision = 'approved' AND not_before IS NOT NULL AND not_before > decided_at,
          dateDiff('millisecond', decided_at, not_before) / 1000, NULL) AS notice_saved_s
FROM approvals FINAL
WHERE decided_at >= {since:DateTime64(3, 'UTC')} AND decided_at < {until:DateTime64(3, 'UTC')}
ORDER BY decided_at, vm_name
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
    (SELECT count() FROM impacts FINAL) AS impacts,
    (SELECT count() FROM approvals FINAL) AS approvals
""",
)

# Coverage (issue 27): the VMs of Azure's inventory (azure_vms, kept by `sevents-ingest reconcile`) joined to the
# collectors by vmId (IMDS compute.vmId, which ARG gives as properties.vmId). A VM is reporting, silent or retired
# by the views' own rule (silent_or_retired_vms: no heartbeat for custom_sevents_silent_after_s, SILENT_AFTER_S by
# default; retired as retired_vms), never_seen when no heartbeat of it ever arrived. The set is the inventory's
# scale set or availability set ('' for a standalone VM).
COVERAGE = Query(
    "coverage",
    "Inventory VMs with a reporting, silent or retired collector, or none ever, per subscription, resource group "
    "and set",
    """
SELECT subscription_id, resource_group, fault_set,
       count() AS inventory_vms,
       countIf(state_ = 'reporting') AS reporting,
       countIf(state_ = 'silent') AS silent,
       countIf(state_ = 'retired') AS retired,
       countIf(state_ = 'never_seen') AS never_seen,
       round(100 * reporting / inventory_vms, 1) AS covered_pct
FROM
(
    SELECT i.subscription_id AS subscription_id, i.resource_group AS resource_group,
           if(i.scale_set != '', i.scale_set, i.availability_set) AS fault_set,
           -- a LEFT JOIN without a match gives 0, or NULL under join_use_nulls: ifNull reads both alike
           multiIf(ifNull(h.seen_, 0) = 0, 'never_seen', ifNull(s.quiet_, 0) = 0, 'reporting',
                   ifNull(s.retired_, 0) = 1, 'retired', 'silent') AS state_
    FROM (SELECT vm_id, subscription_id, resource_group, scale_set, availability_set
          FROM azure_vms FINAL WHERE present) AS i
    LEFT JOIN (SELECT DISTINCT lower(vm_id) AS vm_id, toUInt8(1) AS seen_ FROM heartbeats_latest) AS h
        ON h.vm_id = i.vm_id
    LEFT JOIN (SELECT lower(vm_id) AS vm_id, toUInt8(1) AS quiet_, toUInt8(max(retired)) AS retired_
               FROM silent_or_retired_vms GROUP BY vm_id) AS s
        ON s.vm_id = i.vm_id
)
GROUP BY subscription_id, resource_group, fault_set
ORDER BY subscription_id, resource_group, fault_set
""",
)

# The gap signal (issue 27): Resource Health annotations (azure_annotations, kept by `sevents-ingest reconcile`) beside
# the scheduled events sevents' collectors saw. The annotations that mean the platform took a VM down: it rebooted,
# redeployed, froze or migrated it (ImpactType "Downtime Reboot" or "Downtime Freeze", Platform Initiated, in
# Microsoft's "Resource Health virtual machine Health Annotations"), and the redeploy a user started for planned
# maintenance. One of these with no scheduled event seen for the VM shortly before is a gap. Left out: guest crashes
# and the user's own control-plane actions (restart, stop, resize, deallocate), for which no scheduled event is owed.
# The one list of them: the query and its tests read it from here.
DOWNTIME_ANNOTATIONS: tuple[str, ...] = (
    "VirtualMachineRebootInitiatedForPlannedMaintenance",
    "VirtualMachineMigrationInitiatedForPlannedMaintenance",
    "VirtualMachineRedeployInitiatedByControlPlaneDueToPlannedMaintenance",
    "VirtualMachinePlannedFreezeSucceeded",
    "VirtualMachinePlannedFreezeFailed",
    "LiveMigrationSucceeded",
    "LiveMigrationFailure",
    "VirtualMachineHostRebootedForRepair",
    "VirtualMachineMigrationInitiatedForRepair",
    "VirtualMachineHostCrashed",
    "VirtualMachineStorageOffline",
)
GAP_LEAD_S = 900  # an event the VM saw at most this long before the annotation came before it (a Reboot's notice)
GAP_SLACK_S = 120  # ... or this little after it: the collector's poll interval and the clocks' skew
_DOWNTIME_SQL = "[" + ", ".join(f"'{name}'" for name in DOWNTIME_ANNOTATIONS) + "]"
_CHANGED_IN_WINDOW = "changed_at >= {since:DateTime64(3, 'UTC')} AND changed_at < {until:DateTime64(3, 'UTC')}"
# The vmIds of those annotations (the reconciler's, or the inventory's for the resource ids it gave none), read
# without the CTE below: ClickHouse evaluates a CTE again at each use, and each use here would join the inventory.
_ANNOTATED_VMS = (
    f"SELECT lower(vm_id) AS vm FROM azure_annotations WHERE {_CHANGED_IN_WINDOW} UNION ALL SELECT lower(vm_id) AS vm "
    f"FROM azure_vms WHERE resource_id IN (SELECT resource_id FROM azure_annotations WHERE {_CHANGED_IN_WINDOW} "
    "AND vm_id = '')"
)
# ... as heartbeat_hours numbers them (vm_key, migration 0027): a number compared per VM-hour, not a string lowered
_ANNOTATED_VM_KEYS = f"SELECT cityHash64(vm) FROM ({_ANNOTATED_VMS})"

# Each annotation changed in [since, until) (the window's months of azure_annotations only), its VM's vmId (the
# reconciler's, else the inventory's for its resource id), and the last transition of an event naming that VM
# (affects_this_vm) seen from GAP_LEAD_S before the annotation to GAP_SLACK_S after it (ASOF: the nearest one;
# transitions_by_time is in time order, so only the window's rows plus the lead are read). gap: a downtime
# annotation with no such event while the VM's collector was reporting (heartbeats in the annotation's hour or the
# hour before: heartbeat_hours); without a reporting collector sevents could not have seen an event
# (collector_reporting false; audit coverage lists those VMs). Rows: every downtime annotation, and any other
# annotation that follows an event sevents saw, beside it.
GAPS = Query(
    "gaps",
    "Downtime annotations of Resource Health with no scheduled event seen before them (gap), and annotations "
    "that follow an event sevents saw, beside it",
    f"""
WITH annotated AS
(
    SELECT a.changed_at AS changed_at, a.annotation_name AS annotation, a.category AS category, a.reason AS reason,
           a.resource_id AS resource_id,
           lower(if(a.vm_id != '', a.vm_id, ifNull(v.vm_id, ''))) AS vm_id, ifNull(v.name, '') AS inventory_name,
           has({_DOWNTIME_SQL}, a.annotation_name) AS downtime_,
           a.changed_at + INTERVAL {GAP_SLACK_S} SECOND AS latest_
    FROM (SELECT changed_at, annotation_name, category, reason, resource_id, vm_id
          FROM azure_annotations FINAL WHERE {_CHANGED_IN_WINDOW}) AS a
    LEFT JOIN (SELECT resource_id, argMax(vm_id, reconciled_at) AS vm_id, argMax(name, reconciled_at) AS name
               FROM azure_vms
               WHERE resource_id IN (SELECT resource_id FROM azure_annotations WHERE {_CHANGED_IN_WINDOW})
               GROUP BY resource_id) AS v
        ON v.resource_id = a.resource_id
)
SELECT changed_at, vm_name, vm_id, annotation, category, reason, event_id,
       downtime_ AND event_id = '' AND collector_reporting AS gap, collector_reporting
FROM
(
    SELECT a.changed_at AS changed_at,
           multiIf(a.inventory_name != '', a.inventory_name, ifNull(t.vm_name, '') != '', t.vm_name,
                   splitByChar('/', a.resource_id)[-1]) AS vm_name,
           a.vm_id AS vm_id, a.annotation AS annotation, a.category AS category, a.reason AS reason,
           a.downtime_ AS downtime_,
           -- no match: the defaults, or NULLs under join_use_nulls; ifNull reads both alike
           if(ifNull(t.observed_at >= a.changed_at - INTERVAL {GAP_LEAD_S} SECOND, 0), t.event_id, '') AS event_id,
           has(h.hours_, toStartOfHour(toDateTime(a.changed_at, 'UTC')))
               OR has(h.hours_, toStartOfHour(toDateTime(a.changed_at, 'UTC')) - INTERVAL 1 HOUR)
               AS collector_reporting
    FROM annotated AS a
    ASOF LEFT JOIN
    (
        SELECT lower(vm_id) AS vm_id, observed_at, event_id, vm_name
        FROM transitions_by_time
        WHERE observed_at >= {{since:DateTime64(3, 'UTC')}} - INTERVAL {GAP_LEAD_S} SECOND
          AND observed_at < {{until:DateTime64(3, 'UTC')}} + INTERVAL {GAP_SLACK_S} SECOND
          AND affects_this_vm AND event_id != ''
          AND lower(vm_id) IN ({_ANNOTATED_VMS})
    ) AS t ON t.vm_id = a.vm_id AND t.observed_at <= a.latest_
    LEFT JOIN
    (
        SELECT vm_key, groupArray(hour) AS hours_
        FROM heartbeat_hours
        WHERE hour >= toStartOfHour(toDateTime({{since:DateTime64(3, 'UTC')}}, 'UTC')) - INTERVAL 1 HOUR
          AND hour < {{until:DateTime64(3, 'UTC')}}
          AND vm_key IN ({_ANNOTATED_VM_KEYS})
        GROUP BY vm_key
    ) AS h ON h.vm_key = cityHash64(a.vm_id)
)
WHERE downtime_ OR event_id != ''
ORDER BY changed_at, vm_name, annotation
-- an annotation change's copies share its changed_at, hence its month: FINAL may work partition by partition
SETTINGS do_not_merge_across_partitions_select_final = 1
""",
    {"since": "DateTime64", "until": "DateTime64"},
)

ALL: tuple[Query, ...] = (
    VM_HISTORY,
    EVENT_SUMMARY,
    EVENT_BY_FAULT_DOMAIN,
    EVENT_VMS,
    DISRUPTIVE_EVENTS,
    USER_WAITS,
    SILENT_VMS,
    EVENTS_IN_WINDOW,
    FAULT_DOMAIN_SUMMARY,
    DOWNTIME,
    APPROVALS,
    COUNTS,
    COVERAGE,
    GAPS,
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
