"""The transition engine: previous snapshot + new document + time observed -> new snapshot + transitions (pure).

Theory of operation. IMDS keeps no history: an event is announced (``Scheduled``), may start (``Started``,
NotBefore blanked), and simply vanishes when done or cancelled. ``diff`` compares the document with the
snapshot of the previous one, event by event (keyed by EventId), and says what happened to each event as
at most one transition per event per document, plus at most one document-level anomaly (``event_id`` "").
Because a transition is keyed by (observing VM, EventId, DocumentIncarnation, kind), that is also the
dedupe key downstream.

Dedupe. The same document polled again yields nothing, and the snapshot comes back unchanged (the very
same object), so a caller may skip saving it. The edges save the snapshot in the same transaction as the
records it produced, so a restarted collector diffs against what it last emitted and re-emits nothing.
The incarnation is never trusted on its own: every document is diffed by content. When the incarnation
goes backwards (Scheduled Events switched off after 24 h without polls and back on starts over) or the
content changes under an unchanged incarnation, a document-level anomaly is recorded and the content diff
still runs, so events that did not change emit nothing.

Odd input (a lifecycle step the table below does not allow, an unknown status, a field that should never
change, an EventId coming back after it disappeared) becomes an ``anomaly`` transition carrying the event's
new state; it is never raised. Fields decode had to make safe (``Event.repairs``) are noted in the
``anomaly`` of the event's transition without changing its kind. Errors this module raises are bugs in the
caller (naive ``observed_at``: ValueError).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Final

from collector.model import (
    GONE_MEMORY,
    STATUS_SCHEDULED,
    STATUS_STARTED,
    Document,
    Event,
    Snapshot,
    Tracked,
    Transition,
)
from sevents.records import KIND_ANOMALY, KIND_APPEARED, KIND_DISAPPEARED, KIND_STATUS_CHANGED, KIND_UPDATED

# The documented lifecycle: (status before, status now) -> kind; None means "not in the document".
# Must stay true: every pair not listed is an anomaly; a disappearance from any status is `disappeared`
# (no status says "completed": after Started it means completed, after Scheduled cancelled; an unknown
# status was already recorded as an anomaly when it was first seen).
LIFECYCLE: Final[Mapping[tuple[str | None, str | None], str]] = {
    (None, STATUS_SCHEDULED): KIND_APPEARED,  # announced ahead of NotBefore
    (None, STATUS_STARTED): KIND_APPEARED,  # host failure: no notice, straight to Started
    (STATUS_SCHEDULED, STATUS_STARTED): KIND_STATUS_CHANGED,  # approved or NotBefore reached
    (STATUS_SCHEDULED, STATUS_SCHEDULED): KIND_UPDATED,  # NotBefore moved, resources or description changed
    (STATUS_STARTED, STATUS_STARTED): KIND_UPDATED,  # e.g. a second, shorter impact while Started
    (STATUS_SCHEDULED, None): KIND_DISAPPEARED,  # cancelled
    (STATUS_STARTED, None): KIND_DISAPPEARED,  # completed
}

# Fields an event may change while it lives (each change is reported in changed_fields).
MUTABLE_FIELDS: Final = ("not_before", "resources", "duration_s", "description")
# Fields that identify what the event is; a change is an anomaly.
FIXED_FIELDS: Final = ("event_type", "resource_type", "event_source")
# Fields IMDS changes together with a status: Started blanks NotBefore, so that is part of the status change.
CHANGED_WITH_STATUS: Final[Mapping[str, tuple[str, ...]]] = {STATUS_STARTED: ("not_before",)}


def diff(prev: Snapshot, doc: Document, observed_at: datetime) -> tuple[Snapshot, tuple[Transition, ...]]:
    """What changed between the previous snapshot and this document, observed at ``observed_at``, oldest first.

    Order within one call (all share ``observed_at``): the document-level anomaly, then the document's events
    in document order, then the events that disappeared in the previous document's order.
    """
    if observed_at.tzinfo is None:
        raise ValueError("observed_at must be timezone-aware")
    now = observed_at.astimezone(timezone.utc)
    before = prev.by_id()
    same_content = _same_content(prev, doc, before)
    if same_content and prev.incarnation == doc.incarnation:
        return prev, ()

    out: list[Transition] = []
    reason = _document_anomaly(prev, doc, same_content)
    if reason:
        out.append(_document_transition(doc.incarnation, now, reason))

    tracked: list[Tracked] = []
    returned = set(prev.gone)
    for event in doc.events:
        old = before.get(event.event_id)
        transition = _event_transition(old, event, doc.incarnation, now, event.event_id in returned)
        if transition is not None:
            out.append(transition)
        if old is not None and old.event.status == event.status:
            tracked.append(Tracked(event=event, since=old.since))
        else:
            tracked.append(Tracked(event=event, since=now))

    present = {e.event_id for e in doc.events}
    vanished = [old for old in prev.events if old.event.event_id not in present]
    out += [_gone(old, doc.incarnation, now) for old in vanished]

    changed = not same_content or bool(out)
    gone = (*(g for g in prev.gone if g not in present), *(old.event.event_id for old in vanished))
    snapshot = Snapshot(
        incarnation=doc.incarnation,
        events=tuple(tracked) if changed else prev.events,
        observed_at=now if changed else prev.observed_at,
        gone=gone[-GONE_MEMORY:] if changed else prev.gone,
        api_version=prev.api_version,
        vm_id=prev.vm_id,
    )
    return snapshot, tuple(out)


def replay(transitions: Iterable[Transition], start: Mapping[str, Event] | None = None) -> dict[str, Event]:
    """The events present after applying ``transitions`` in order to ``start`` (default: no events)."""
    events = dict(start or {})
    for t in transitions:
        if not t.event_id:
            continue  # document-level: says something about the document, not about an event
        if t.kind == KIND_DISAPPEARED:
            events.pop(t.event_id, None)
        elif t.event is not None:
            events[t.event_id] = t.event
    return events


def changed_fields(old: Event, new: Event) -> tuple[str, ...]:
    """Names of the event fields (other than the status) whose values differ, in a fixed order."""
    names = (*FIXED_FIELDS, *MUTABLE_FIELDS)
    return tuple(n for n in names if getattr(old, n) != getattr(new, n))


def _same_content(prev: Snapshot, doc: Document, before: Mapping[str, Tracked]) -> bool:
    # Document order is not part of the content: IMDS promises nothing about it.
    if prev.incarnation is None or len(before) != len(doc.events):
        return False
    return all(before.get(e.event_id) is not None and before[e.event_id].event == e for e in doc.events)


def _document_anomaly(prev: Snapshot, doc: Document, same_content: bool) -> str:
    if prev.incarnation is None:
        return ""
    if doc.incarnation < prev.incarnation:
        return f"incarnation went backwards from {prev.incarnation} to {doc.incarnation}"
    if doc.incarnation == prev.incarnation and not same_content:
        return f"content changed under unchanged incarnation {doc.incarnation}"
    return ""


def _document_transition(incarnation: int, now: datetime, reason: str) -> Transition:
    return Transition(
        kind=KIND_ANOMALY,
        event_id="",
        incarnation=incarnation,
        status="",
        prev_status="",
        observed_at=now,
        prev_observed_at=None,
        event=None,
        changed_fields=(),
        anomaly=reason,
    )


def _event_transition(
    old: Tracked | None, new: Event, incarnation: int, now: datetime, returned: bool
) -> Transition | None:
    if old is not None and old.event == new:
        return None
    prev_status = None if old is None else old.event.status
    kind = LIFECYCLE.get((prev_status, new.status), KIND_ANOMALY)
    fields: tuple[str, ...] = ()
    problems: list[str] = []
    if kind == KIND_ANOMALY:
        problems.append(_status_problem(prev_status, new.status))
    if returned:
        # The docs: once removed, an event brings no further impact; a new one would have a new EventId.
        problems.append("reappeared after it had disappeared")
    if old is not None:
        fields = changed_fields(old.event, new)
        if prev_status != new.status:
            fields = tuple(f for f in fields if f not in CHANGED_WITH_STATUS.get(new.status, ()))
        fixed = [f for f in fields if f in FIXED_FIELDS]
        if fixed:
            problems.append("fixed field changed: " + ", ".join(fixed))
    if problems:
        kind = KIND_ANOMALY
    if new.repairs:  # fields decode made safe: noted, the kind stays what the lifecycle says
        problems.append("made safe: " + "; ".join(new.repairs))
    return Transition(
        kind=kind,
        event_id=new.event_id,
        incarnation=incarnation,
        status=new.status,
        prev_status=prev_status or "",
        observed_at=now,
        prev_observed_at=None if old is None else old.since,
        event=new,
        changed_fields=fields,
        anomaly="; ".join(problems),
    )


def _status_problem(prev_status: str | None, status: str) -> str:
    known = (STATUS_SCHEDULED, STATUS_STARTED)
    if status not in known:
        return f"unknown status {status!r}"
    if prev_status not in known:
        return f"status changed from unknown {prev_status!r} to {status}"
    return f"status went back from {prev_status} to {status}"


def _gone(old: Tracked, incarnation: int, now: datetime) -> Transition:
    # The event carries its last known state so the record still says what it was.
    return Transition(
        kind=KIND_DISAPPEARED,
        event_id=old.event.event_id,
        incarnation=incarnation,
        status="",
        prev_status=old.event.status,
        observed_at=now,
        prev_observed_at=old.since,
        event=old.event,
    )


__all__ = ["CHANGED_WITH_STATUS", "FIXED_FIELDS", "LIFECYCLE", "MUTABLE_FIELDS", "changed_fields", "diff", "replay"]
