"""Coverage and reconciliation panels of the fleet overview (issue 27): Azure's own account beside sevents'
(``sevents-ingest reconcile`` and the central feed): which inventory VMs have a collector, events announced to VMs
without one, downtime with no scheduled event seen."""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

import re

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.filters import DB
from ingest import queries

SUBSCRIPTION = "subscription"  # the one VM variable Azure's account shares with the collectors' (its GUID)


def _subscription(column: str = "subscription_id") -> str:
    return f"$__conditionalAll({column} IN ({f.selected(SUBSCRIPTION)}), ${SUBSCRIPTION})"


# One VM of the inventory per row with its collector's state, by the views' own rules (queries.COVERAGE's).
COVERAGE = (
    "SELECT subscription_id, resource_group, fault_set, count() AS inventory_vms, "
    "countIf(state_ = 'reporting') AS reporting, countIf(state_ = 'silent') AS silent, "
    "countIf(state_ = 'retired') AS retired, countIf(state_ = 'never_seen') AS never_seen, "
    "round(100 * reporting / inventory_vms, 1) AS covered_pct "
    "FROM (SELECT i.subscription_id AS subscription_id, i.resource_group AS resource_group, "
    "if(i.scale_set != '', i.scale_set, i.availability_set) AS fault_set, "
    "multiIf(ifNull(h.seen_, 0) = 0, 'never_seen', ifNull(s.quiet_, 0) = 0, 'reporting', "
    "ifNull(s.retired_, 0) = 1, 'retired', 'silent') AS state_ "
    f"FROM (SELECT vm_id, subscription_id, resource_group, scale_set, availability_set FROM {DB}.azure_vms FINAL "
    f"WHERE present AND {_subscription()}) AS i "
    f"LEFT JOIN (SELECT DISTINCT lower(vm_id) AS vm_id, toUInt8(1) AS seen_ FROM {DB}.heartbeats_latest) AS h "
    "ON h.vm_id = i.vm_id "
    "LEFT JOIN (SELECT lower(vm_id) AS vm_id, toUInt8(1) AS quiet_, toUInt8(max(retired)) AS retired_ "
    f"FROM {DB}.silent_or_retired_vms GROUP BY vm_id) AS s ON s.vm_id = i.vm_id) "
    "GROUP BY subscription_id, resource_group, fault_set "
    "ORDER BY covered_pct, subscription_id, resource_group, fault_set"
)

# Each VM an event of Azure's account (central feed or Resource Graph) first seen in the range named in its
# Resources, resolved through the inventory by subscription, resource group and name (a scale set's events name
# its instances), and kept when no collector ever reported from it.
STATUS_RANK = "multiIf(event_status IN ('Completed', 'Canceled'), 3, event_status = 'Started', 2, 1)"
UNWATCHED = (
    "SELECT e.first_seen_at AS first_seen_at, e.event_id AS event_id, e.event_type AS event_type, "
    "e.platform_status AS platform_status, e.vm_name AS vm_name, ifNull(v.vm_id, '') AS vm_id, "
    "e.subscription_id AS subscription_id, e.resource_group AS resource_group, "
    "ifNull(v.fault_set, '') AS fault_set "
    "FROM (SELECT event_id, first_seen_at, event_type, platform_status, subscription_id, resource_group, vm_name "
    "FROM (SELECT event_id, min(first_seen_at) AS first_seen_at, argMax(event_type, reconciled_at) AS event_type, "
    f"argMax(event_status, ({STATUS_RANK}, reconciled_at)) AS platform_status, "
    "argMax(resources, reconciled_at) AS resources_, argMax(subscription_id, reconciled_at) AS subscription_id, "
    "argMax(resource_group, reconciled_at) AS resource_group "
    f"FROM {DB}.azure_scheduled_events WHERE event_id IN (SELECT event_id FROM {DB}.azure_scheduled_events "
    "WHERE $__timeFilter(first_seen_at)) GROUP BY event_id) ARRAY JOIN resources_ AS vm_name) AS e "
    "LEFT JOIN (SELECT vm_id, subscription_id, lower(resource_group) AS group_, lower(name) AS name_, "
    f"if(scale_set != '', scale_set, availability_set) AS fault_set FROM {DB}.azure_vms FINAL) AS v "
    "ON v.subscription_id = e.subscription_id AND v.group_ = lower(e.resource_group) AND v.name_ = lower(e.vm_name) "
    f"WHERE {_subscription('e.subscription_id')} AND ifNull(v.vm_id, '') NOT IN "
    f"(SELECT lower(vm_id) FROM {DB}.heartbeats_latest) "
    "ORDER BY first_seen_at DESC, event_id, vm_name LIMIT 500"
)


def gaps_sql() -> str:
    """``queries.GAPS`` (the one gap rule) for Grafana: the range's macros for its window, the tables in ``DB``,
    no comments, only the gaps."""
    sql = "\n".join(line.split("--", 1)[0] for line in queries.GAPS.sql.splitlines())
    sql = sql.replace("{since:DateTime64(3, 'UTC')}", "$__fromTime").replace(
        "{until:DateTime64(3, 'UTC')}", "$__toTime"
    )
    sql = re.sub(r"(?<![\w.])(azure_annotations|azure_vms|transitions_by_time|heartbeat_hours)\b", rf"{DB}.\1", sql)
    sql = " ".join(sql.split())
    return (
        "SELECT changed_at, vm_name, vm_id, annotation, category, reason, collector_reporting "
        f"FROM ({sql}) WHERE gap ORDER BY changed_at DESC, vm_name LIMIT 500"
    )


def panels() -> list[g.Panel | g.Row]:
    return [
        g.Row("Coverage"),
        g.Panel(
            "Coverage per subscription, resource group and set",
            "table",
            COVERAGE,
            width=24,
            description="VMs of Azure's inventory (sevents-ingest reconcile) with a reporting, silent or retired "
            "collector, or none ever (never_seen), and the share covered (reporting). Least covered first.",
        ),
        g.Row("Azure's account beside sevents'"),
        g.Panel(
            "Events announced to VMs without a collector",
            "table",
            UNWATCHED,
            width=24,
            description="Scheduled events of the central feed or Resource Graph first seen in the range, per VM they "
            "name that no collector ever reported from: sevents could not see them (audit events: seen_by "
            "'platform'). vm_id empty: the inventory does not know the name.",
        ),
        g.Panel(
            "Downtime with no scheduled event seen (gaps)",
            "table",
            gaps_sql(),
            width=24,
            description="Resource Health downtime annotations in the range with no scheduled event naming the VM "
            "seen from 15 minutes before to 2 minutes after while its collector reported (audit gaps).",
        ),
    ]
