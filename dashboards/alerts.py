"""Grafana alert rules (file provisioning format): maintenance that pages, and pipeline health that tickets.

Each rule's query returns a table; Grafana turns every row into one alert instance, its string columns
into labels and its one numeric column into the value the threshold compares. So "one alert per EventId"
is one row per EventId, labelled with its type, fault domains, VMs and NotBefore. Alert queries run in
the backend only: no template variables and no ``$__conditionalAll`` (a frontend macro) here.
"""

# Grafana panel templates built from constants (no input reaches them), so S608 does not apply.
# ruff: noqa: S608

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from dashboards import filters as f
from dashboards import grafana as g
from dashboards.filters import DB

FOLDER: Final = "sevents"
NOT_BEFORE = "ifNull(formatDateTime(not_before_last, '%Y-%m-%dT%H:%i:%SZ', 'UTC'), '')"


@dataclass(frozen=True)
class Rule:
    """One rule: a table query with exactly one numeric column, fired when that value is above ``above``."""

    uid: str
    title: str
    sql: str
    summary: str
    severity: str
    above: float = 0.0
    window_s: int = 600
    pending: str = "0s"
    group: str = "maintenance"


def _events(types: str) -> str:
    return (
        f"SELECT event_id, event_type, ifNull(event_source, '') AS event_source, "
        f"{f.fmt_list('fault_domains')} AS fault_domains, {f.fmt_list('affected_vms')} AS vms, "
        f"{NOT_BEFORE} AS not_before, "
        "multiIf(started_at IS NOT NULL, 'Started', 'Scheduled') AS status, toUInt8(1) AS active "
        f"FROM {DB}.events WHERE outcome = 'active' AND event_type IN {types} ORDER BY event_id"
    )


RULES: Final = (
    Rule(
        "sevents-reboot-redeploy",
        "Reboot or Redeploy scheduled",
        _events("('Reboot', 'Redeploy')"),
        "{{ $labels.event_type }} {{ $labels.event_id }} not before {{ $labels.not_before }} "
        "on {{ $labels.vms }} (fault domains {{ $labels.fault_domains }})",
        "page",
    ),
    Rule(
        "sevents-preempt-terminate",
        "Preempt or Terminate scheduled",
        _events("('Preempt', 'Terminate')"),
        "{{ $labels.event_type }} {{ $labels.event_id }} not before {{ $labels.not_before }}: "
        "{{ $labels.vms }} will be removed",
        "page",
    ),
    Rule(
        "sevents-collector-silent",
        "Collector silent for five minutes",
        "SELECT vm_name, vm_id, location, ifNull(toString(fault_domain), '') AS fault_domain, "
        "toFloat64(dateDiff('second', observed_at, now())) AS silent_s "
        f"FROM {DB}.heartbeats_latest FINAL ORDER BY vm_name",
        "No heartbeat from {{ $labels.vm_name }} for {{ $values.B.Value }} s",
        "ticket",
        above=f.SILENT_AFTER_S,
        group="pipeline",
    ),
    Rule(
        "sevents-dead-letters",
        "Dead letters growing",
        "SELECT source, toFloat64(count()) AS new_dead_letters FROM "
        f"{DB}.dead_letters FINAL WHERE $__timeFilter(received_at) GROUP BY source ORDER BY source",
        "{{ $values.B.Value }} records from {{ $labels.source }} could not be loaded in the last 10 minutes",
        "ticket",
        group="pipeline",
    ),
)


def _rule_json(rule: Rule) -> dict[str, Any]:
    query = {
        **g.target(rule.sql, g.FORMAT_TABLE),
        "datasource": {"type": g.PLUGIN_ID, "uid": g.DATASOURCE_UID},
        "intervalMs": 1000,
        "maxDataPoints": 43200,
    }
    return {
        "uid": rule.uid,
        "title": rule.title,
        "condition": "C",
        "data": [
            {
                "refId": "A",
                "relativeTimeRange": {"from": rule.window_s, "to": 0},
                "datasourceUid": g.DATASOURCE_UID,
                "model": query,
            },
            {
                "refId": "B",
                "datasourceUid": "__expr__",
                "model": {
                    "refId": "B",
                    "type": "reduce",
                    "expression": "A",
                    "reducer": "last",
                    "settings": {"mode": "dropNN"},
                },
            },
            {
                "refId": "C",
                "datasourceUid": "__expr__",
                "model": {
                    "refId": "C",
                    "type": "threshold",
                    "expression": "B",
                    "conditions": [{"evaluator": {"type": "gt", "params": [rule.above]}}],
                },
            },
        ],
        "noDataState": "OK",
        "execErrState": "Error",
        "for": rule.pending,
        "annotations": {"summary": rule.summary},
        "labels": {"severity": rule.severity, "team": "sre", "source": "sevents"},
        "isPaused": False,
    }


def build() -> dict[str, Any]:
    """The provisioning document: one group per concern, evaluated every 30 seconds."""
    groups = []
    for name in ("maintenance", "pipeline"):
        rules = [_rule_json(r) for r in RULES if r.group == name]
        groups.append({"orgId": 1, "name": f"sevents-{name}", "folder": FOLDER, "interval": "30s", "rules": rules})
    return {"apiVersion": 1, "groups": groups}
