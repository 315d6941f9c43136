"""Transitions and collector state -> wire records (``sevents.records``), as a chain of small enrichers.

Each enricher takes the record built so far and returns it with its own fields added; ``sevents.contract``
then builds the record: exactly the fields of its type in contract order except ``seq`` (the outbox assigns
it), optional ones defaulted, every value within the limits the ingest applies (made safe and noted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from collector.model import ApprovalOutcome, Downtime, Event, Transition, VmIdentity
from sevents import contract, records

log = logging.getLogger(__name__)

Record = dict[str, Any]
Enricher = Callable[[Record], Record]


def transition_record(t: Transition, vm: VmIdentity, *, api_version: str, collector_version: str) -> Record:
    """The wire record of one transition seen by ``vm``; ``record_id`` is its ``transition_id``."""
    record_id = transition_key(t, vm.vm_id)
    return _chain(
        {"transition_id": record_id},
        _common(records.RECORD_TRANSITION, record_id, t.observed_at, api_version, collector_version),
        with_vm(vm),
        _with_transition(t),
        _with_event(t.event, vm.vm_name),
        fields=contract.TRANSITION,
    )


def heartbeat_record(
    vm: VmIdentity,
    *,
    observed_at: datetime,
    api_version: str,
    collector_version: str,
    last_incarnation: int | None,
    last_poll_ok: bool,
    last_poll_error: str,
    polls: int,
    poll_errors: Mapping[str, int],
    active_events: int,
    outbox_depth: int,
    drops: Mapping[str, int],
    started_at: datetime,
    final: bool = False,
) -> Record:
    """The wire record of one heartbeat: the collector's health as of ``observed_at``."""
    record_id = records.heartbeat_id(vm.vm_id, records.format_time(observed_at))
    state = {
        "heartbeat_id": record_id,
        "last_incarnation": last_incarnation,
        "last_poll_ok": last_poll_ok,
        "last_poll_error": last_poll_error,
        "polls": polls,
        "poll_errors": dict(poll_errors),
        "active_events": active_events,
        "outbox_depth": outbox_depth,
        "drops": dict(drops),
        "started_at": records.format_time(started_at),
        "final": final,
    }
    return _chain(
        state,
        _common(records.RECORD_HEARTBEAT, record_id, observed_at, api_version, collector_version),
        with_vm(vm),
        fields=contract.HEARTBEAT,
    )


def impact_record(
    downtime: Downtime,
    event: Event | None,
    vm: VmIdentity,
    *,
    read_at: datetime | None,
    api_version: str,
    collector_version: str,
) -> Record:
    """The wire record of one downtime ``vm`` measured on itself, with the event it belongs to (None: unannounced),
    stored by the poll that read IMDS at ``read_at``: the collector's first read after the downtime (None: stored
    at a stop that could not read IMDS)."""
    began_at = records.format_time(downtime.began_at)
    record_id = records.impact_id(vm.vm_id, downtime.detected_by, began_at)
    observation = {
        "impact_id": record_id,
        "detected_by": downtime.detected_by,
        "began_at": began_at,
        "duration_ms": downtime.duration_ms,
        "event_id": "" if event is None else event.event_id,
        "event_type": "" if event is None else event.event_type,
        "read_at": None if read_at is None else records.format_time(read_at),
    }
    return _chain(
        observation,
        _common(records.RECORD_IMPACT, record_id, downtime.ended_at, api_version, collector_version),
        with_vm(vm),
        fields=contract.IMPACT,
    )


def approval_record(
    outcome: ApprovalOutcome, event: Event, vm: VmIdentity, *, api_version: str, collector_version: str
) -> Record:
    """The wire record of one decision of the approval policy about ``event`` on ``vm``."""
    record_id = records.approval_id(vm.vm_id, event.event_id, outcome.decision)
    decision = {
        "approval_id": record_id,
        "event_id": event.event_id,
        "decision": outcome.decision,
        "rule": outcome.rule,
        "approver": outcome.approver,
        "event_type": event.event_type,
        "not_before": None if event.not_before is None else records.format_time(event.not_before),
        "hook_exit": outcome.hook_exit,
        "hook_ms": outcome.hook_ms,
        "http_status": outcome.http_status,
        "decided_at": records.format_time(outcome.decided_at),
    }
    return _chain(
        decision,
        _common(records.RECORD_APPROVAL, record_id, outcome.decided_at, api_version, collector_version),
        with_vm(vm),
        fields=contract.APPROVAL,
    )


def transition_key(t: Transition, vm_id: str) -> str:
    """The transition's dedupe key: ``records.transition_id`` of (VM, EventId, incarnation, kind).

    A document-level anomaly has no EventId; its reason (which names both incarnations) stands in for it,
    so that two incarnation resets to the same number days apart stay two records.
    """
    subject = t.event_id or f"document: {t.anomaly}"
    return records.transition_id(vm_id, subject, t.incarnation, t.kind)


def affects(event: Event | None, vm_name: str) -> bool:
    """Whether the VM named ``vm_name`` is among the event's resources (names compare case-insensitively)."""
    if event is None or not vm_name:
        return False
    name = vm_name.casefold()
    return any(r.casefold() == name for r in event.resources)


def with_vm(vm: VmIdentity) -> Enricher:
    """Adds the observing VM's identity and topology."""

    def enrich(record: Record) -> Record:
        record.update(
            vm_id=vm.vm_id,
            vm_name=vm.vm_name,
            location=vm.location,
            subscription_id=vm.subscription_id,
            resource_group=vm.resource_group,
            resource_id=vm.resource_id,
            zone=vm.zone,
            fault_domain=vm.fault_domain,
            update_domain=vm.update_domain,
            scale_set=vm.scale_set,
        )
        return record

    return enrich


def _common(record_type: str, record_id: str, observed_at: datetime, api: str, version: str) -> Enricher:
    def enrich(record: Record) -> Record:
        record.update(
            schema_version=records.SCHEMA_VERSION,
            record_type=record_type,
            record_id=record_id,
            observed_at=records.format_time(observed_at),
            api_version=api,
            collector_version=version,
        )
        return record

    return enrich


def _with_transition(t: Transition) -> Enricher:
    def enrich(record: Record) -> Record:
        record.update(
            event_id=t.event_id,
            incarnation=t.incarnation,
            kind=t.kind,
            status=t.status,
            prev_status=t.prev_status,
            prev_observed_at=None if t.prev_observed_at is None else records.format_time(t.prev_observed_at),
            changed_fields=list(t.changed_fields),
            anomaly=t.anomaly,
        )
        return record

    return enrich


def _with_event(event: Event | None, vm_name: str) -> Enricher:
    # Document-level anomalies have no event: its columns are empty (null where the contract allows), not invented.
    def enrich(record: Record) -> Record:
        record.update(
            event_type="" if event is None else event.event_type,
            resource_type="" if event is None else event.resource_type,
            resources=[] if event is None else list(event.resources),
            affects_this_vm=affects(event, vm_name),
            not_before=None if event is None or event.not_before is None else records.format_time(event.not_before),
            description=None if event is None else event.description,
            event_source=None if event is None else event.event_source,
            duration_s=None if event is None else event.duration_s,
        )
        return record

    return enrich


def _chain(start: Record, *steps: Enricher, fields: tuple[contract.Field, ...]) -> Record:
    record = dict(start)
    for step in steps:
        record = step(record)
    # The contract orders the fields, defaults the optional ones and brings every value within its limits,
    # so the ingest takes what the collector sends; a missing or unknown field is our bug (ValueError).
    built, notes = contract.build(fields, record, skip=("seq",))
    if notes:
        log.warning("record fields made safe", extra={"record_type": built["record_type"], "fields": notes})
        originals = {name: value for name, value in record.items() if name in built and built[name] != value}
        # Where the event has its own row, the anomaly column says what was repaired; a document-level anomaly
        # keys on its anomaly text, so its notes go to the log only.
        if built.get("event_id") and "anomaly" in built:
            note = "made safe: " + "; ".join(notes)
            built["anomaly"] = (f"{built['anomaly']}; {note}" if built["anomaly"] else note)[
                : contract.DEFAULT_LIMITS.max_text_chars
            ]
        # what the fields held goes beside the record, so nothing the collector was handed is lost (the outbox)
        return records.MadeSafe(built, notes, originals)
    return built
