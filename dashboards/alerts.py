"""Grafana alert rules (file provisioning format): maintenance that pages, and pipeline health that tickets.

Each rule's query returns a table; Grafana turns every row into one alert instance, its string columns
into labels and its one numeric column into the value the threshold compares. An instance is notified anew
whenever its label set is new, so the maintenance rules label an event with what identifies it only (EventId
and type): a status change, a NotBefore update or one more VM reporting never pages again. What changes
(status, NotBefore, how many VMs, fault domains and sets) reaches the notification through ``$values``: one more
query per figure, each reduced, matched to the instance by the same labels. Alert queries read the active
set only (the events some VM still shows), never the history, and run in the backend: no template variables and no
``$__conditionalAll`` (a frontend macro) here.

Each rule names its contact point (``notification_settings``, Grafana's simplified routing, 11.0 or newer): Grafana
routes it through a policy of its own made for that rule, under the organization's policy tree, so sevents
provisions no notification policy and leaves an existing Grafana's routing as it was (a provisioned ``policies``
file replaces the whole tree).
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
# The contact point every rule notifies (provisioning/alerting/sevents-notifications.yaml, contact-points/*.yaml).
CONTACT_POINT: Final = "sevents-pager"
# One notification per event (EventId in the group), at once; a page repeats hourly while it lasts, a ticket 4-hourly.
# Grafana requires grafana_folder and alertname in a rule's group_by.
GROUP_BY: Final = ("grafana_folder", "alertname", "event_id")
REPEAT: Final = {"page": "1h", "ticket": "4h"}
# urlquery (Go's url.QueryEscape; Grafana reads its + as a space): an EventId holding & = # stays one parameter.
DRILL_DOWN = "/d/sevents-timeline/maintenance-timeline?var-event_id={{ urlquery $labels.event_id }}"
# Figures of an active event that its notification shows (refId -> value), beside the condition's "active".
EVENT_FIGURES: Final = (
    ("status", "if(started_at IS NULL, 1, 2)"),  # 1 Scheduled, 2 Started
    ("not_before", "toFloat64(ifNull(toUnixTimestamp(not_before_last), 0))"),  # 0 when IMDS shows none
    ("vms", "toFloat64(affected_vm_count)"),
)
# Figures that need the set of each affected VM: a fault domain counts once per set it belongs to.
SET_FIGURES: Final = (
    ("fault_domains", "toFloat64(length(fault_domain_labels))"),
    ("sets", "toFloat64(length(fault_sets))"),
)


@dataclass(frozen=True)
class Rule:
    """One rule: a table query with exactly one numeric column, fired when that value is above ``above``.

    ``figures`` are more queries of the same labels whose reduced values the notification may show.
    """

    uid: str
    title: str
    sql: str
    summary: str
    severity: str
    above: float = 0.0
    window_s: int = 600
    pending: str = "0s"
    group: str = "maintenance"
    figures: tuple[tuple[str, str], ...] = ()
    description: str = ""


def _active_events(types: str, value: str) -> str:
    return (
        f"SELECT event_id, event_type, {value} AS value FROM {f.since(f.ACTIVE_IDS, 'events')} "
        f"WHERE {f.active()} AND event_type IN {types} ORDER BY event_id"
    )


def _event_rule(uid: str, title: str, types: str, summary: str) -> Rule:
    return Rule(
        uid,
        title,
        _active_events(types, "toUInt8(1)"),
        summary,
        "page",
        figures=tuple((ref, _active_events(types, value)) for ref, value in (*EVENT_FIGURES, *SET_FIGURES)),
        description="Status {{ if eq $values.status.Value 2.0 }}Started{{ else }}Scheduled{{ end }}; "
        "{{ $values.vms.Value }} VMs in {{ $values.fault_domains.Value }} fault domains "
        "of {{ $values.sets.Value }} set(s). "
        f"Who and where: {DRILL_DOWN}",
    )


RULES: Final = (
    _event_rule(
        "sevents-reboot-redeploy",
        "Reboot or Redeploy scheduled",
        "('Reboot', 'Redeploy')",
        "{{ $labels.event_type }} {{ $labels.event_id }} not before "
        "{{ if eq $values.not_before.Value 0.0 }}(none announced){{ else }}"
        "{{ humanizeTimestamp $values.not_before.Value }}{{ end }}",
    ),
    _event_rule(
        "sevents-preempt-terminate",
        "Preempt or Terminate scheduled",
        "('Preempt', 'Terminate')",
        "{{ $labels.event_type }} {{ $labels.event_id }}: {{ $values.vms.Value }} VMs will be removed, not before "
        "{{ if eq $values.not_before.Value 0.0 }}(none announced){{ else }}"
        "{{ humanizeTimestamp $values.not_before.Value }}{{ end }}",
    ),
    Rule(
        "sevents-unannounced-downtime",
        "VM down with no event announcing it",
        "SELECT vm_name, detected_by, toFloat64(max(duration_s)) AS downtime_s "
        f"FROM {DB}.impacts FINAL WHERE event_id = '' AND $__timeFilter(began_at) "
        "GROUP BY vm_name, detected_by ORDER BY vm_name, detected_by",
        "{{ $labels.vm_name }} was down {{ $values.B.Value }} s ({{ $labels.detected_by }}) with no scheduled event",
        "ticket",
        description="Measured by the VM's own collector: a pause (Freeze, live migration) or a reboot that "
        "Scheduled Events never announced.",
    ),
    Rule(
        "sevents-collector-silent",
        "Collector silent for five minutes",
        "SELECT vm_name, vm_id, location, ifNull(toString(fault_domain), '') AS fault_domain, "
        f"toFloat64(silent_for_s) AS silent_s FROM {DB}.vm_status WHERE state = 'silent' ORDER BY vm_name",
        "No heartbeat from {{ $labels.vm_name }} for {{ $values.B.Value }} s",
        "ticket",
        above=f.SILENT_AFTER_S,
        group="pipeline",
        description="Retired VMs (Terminate or Preempt started, a clean stop, or silent beyond the horizon "
        "custom_sevents_retire_after_s) are not paged.",
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


def _query(ref_id: str, sql: str, window_s: int) -> dict[str, Any]:
    return {
        "refId": ref_id,
        "relativeTimeRange": {"from": window_s, "to": 0},
        "datasourceUid": g.DATASOURCE_UID,
        "model": {
            **g.target(sql, g.FORMAT_TABLE, ref_id),
            "datasource": {"type": g.PLUGIN_ID, "uid": g.DATASOURCE_UID},
            "intervalMs": 1000,
            "maxDataPoints": 43200,
        },
    }


def _reduce(ref_id: str, expression: str) -> dict[str, Any]:
    return {
        "refId": ref_id,
        "datasourceUid": "__expr__",
        "model": {
            "refId": ref_id,
            "type": "reduce",
            "expression": expression,
            "reducer": "last",
            "settings": {"mode": "dropNN"},
        },
    }


def _rule_json(rule: Rule) -> dict[str, Any]:
    figures = []
    for ref, sql in rule.figures:
        figures += [_query(f"{ref}_query", sql, rule.window_s), _reduce(ref, f"{ref}_query")]
    annotations = {"summary": rule.summary}
    if rule.description:
        annotations["description"] = rule.description
    return {
        "uid": rule.uid,
        "title": rule.title,
        "condition": "C",
        "data": [
            _query("A", rule.sql, rule.window_s),
            _reduce("B", "A"),
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
            *figures,
        ],
        "noDataState": "OK",
        "execErrState": "Error",
        "for": rule.pending,
        "annotations": annotations,
        "labels": {"severity": rule.severity, "team": "sre", "source": "sevents"},
        "isPaused": False,
        "notification_settings": {
            "receiver": CONTACT_POINT,
            "group_by": list(GROUP_BY),
            "group_wait": "0s",
            "group_interval": "1m",
            "repeat_interval": REPEAT[rule.severity],
        },
    }


def build() -> dict[str, Any]:
    """The provisioning document: one group per concern, evaluated every 30 seconds."""
    groups = []
    for name in ("maintenance", "pipeline"):
        rules = [_rule_json(r) for r in RULES if r.group == name]
        groups.append({"orgId": 1, "name": f"sevents-{name}", "folder": FOLDER, "interval": "30s", "rules": rules})
    return {"apiVersion": 1, "groups": groups}
