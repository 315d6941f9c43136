"""Records on the wire, beyond their fields: the values some fields take, how each record is keyed, how it is
written, and the originals kept beside a record the collector made safe.

Every stage (outbox, Event Hubs message, ClickHouse row) carries the same JSON object, one per record.
A record is a flat JSON object; ``record_type`` says which field set applies. Timestamps are strings in
UTC with millisecond precision (``2026-11-21T23:23:24.123Z``). Absent optional values are ``null``.

The fields and record types are declared once, in ``sevents.contract`` (the wire contract); changing a field's
meaning or removing one bumps ``SCHEMA_VERSION``, adding an optional field does not.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Final

from sevents import contract, isotime

SCHEMA_VERSION: Final = contract.SCHEMA_VERSION
CONTENT_TYPE: Final = "application/json"

RECORD_TRANSITION: Final = contract.RECORD_TRANSITION
RECORD_HEARTBEAT: Final = contract.RECORD_HEARTBEAT
RECORD_IMPACT: Final = contract.RECORD_IMPACT
RECORD_APPROVAL: Final = contract.RECORD_APPROVAL
RECORD_TYPES: Final = tuple(t.name for t in contract.RECORD_TYPES)

# What the approval policy decided about one event (collector/approver.py).
DECISION_APPROVED: Final = "approved"
DECISION_APPROVE_FAILED: Final = "approve_failed"
DECISION_LEFT_TO_APPROVER: Final = "left_to_approver"
DECISION_HOOK_FAILED: Final = "hook_failed"
DECISION_HOOK_TIMEOUT: Final = "hook_timeout"
DECISION_HOOK_INTERRUPTED: Final = "hook_interrupted"  # the collector stopped while the hook ran; the event went on
DECISION_NOT_COVERED: Final = "not_covered"
DECISION_POST_HOOK: Final = "post_hook"
DECISION_DRY_RUN_APPROVED: Final = "dry_run_approved"  # [approval] dry_run: would have been approved, nothing sent
# [approval] multi_vm = "coordinator": this VM's pre-hook succeeded (or it has none) and the central coordinator
# (sevents-ingest coordinate) approves the event once enough of its VMs are ready; this VM never POSTs it.
DECISION_READY: Final = "ready"
DECISIONS: Final = (
    DECISION_APPROVED,
    DECISION_APPROVE_FAILED,
    DECISION_LEFT_TO_APPROVER,
    DECISION_HOOK_FAILED,
    DECISION_HOOK_TIMEOUT,
    DECISION_HOOK_INTERRUPTED,
    DECISION_NOT_COVERED,
    DECISION_POST_HOOK,
    DECISION_DRY_RUN_APPROVED,
    DECISION_READY,
)

# How the collector noticed its VM was down (collector/downtime.py).
DETECTED_PAUSE: Final = "pause"
DETECTED_REBOOT: Final = "reboot"
DETECTED_BY: Final = (DETECTED_PAUSE, DETECTED_REBOOT)

# The event types Scheduled Events documents (EventType), every API version.
EVENT_TYPES: Final = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")

# Transition kinds (see collector/transitions.py for the lifecycle table that produces them).
KIND_APPEARED: Final = "appeared"
KIND_STATUS_CHANGED: Final = "status_changed"
KIND_UPDATED: Final = "updated"
KIND_DISAPPEARED: Final = "disappeared"
KIND_ANOMALY: Final = "anomaly"
KINDS: Final = (KIND_APPEARED, KIND_STATUS_CHANGED, KIND_UPDATED, KIND_DISAPPEARED, KIND_ANOMALY)

# Field lists, in column order, derived from the one declaration in ``sevents.contract`` (types, limits, columns).
VM_FIELDS: Final = contract.names(contract.VM)
COMMON_FIELDS: Final = contract.names(contract.COMMON)
TRANSITION_FIELDS: Final = contract.names(contract.TRANSITION)
HEARTBEAT_FIELDS: Final = contract.names(contract.HEARTBEAT)
IMPACT_FIELDS: Final = contract.names(contract.IMPACT)
APPROVAL_FIELDS: Final = contract.names(contract.APPROVAL)


def transition_id(vm_id: str, event_id: str, incarnation: int, kind: str) -> str:
    """The deterministic dedupe key of a transition, the same in the collector, on the wire and in ClickHouse.

    Document-level anomalies (event_id "") pass ``"document: " + anomaly`` as ``event_id`` (the reason names the
    incarnations), so two incarnation resets to the same number stay two records (collector/enrich.py).
    """
    return _digest("t", vm_id, event_id, str(incarnation), kind)


def heartbeat_id(vm_id: str, observed_at: str) -> str:
    """The deterministic dedupe key of a heartbeat."""
    return _digest("h", vm_id, observed_at)


def impact_id(vm_id: str, detected_by: str, began_at: str) -> str:
    """The deterministic dedupe key of an observed downtime: its VM, how it was noticed and when it began."""
    return _digest("i", vm_id, detected_by, began_at)


Columns = Mapping[str, Sequence[Any]]  # field name -> one value per record


def _transition_keys(c: Columns) -> list[str]:
    # A document-level anomaly has no EventId; the collector keys it by its reason instead (transition_id).
    subjects = [e or f"document: {a}" for e, a in zip(c["event_id"], c["anomaly"])]  # no strict=: Python 3.9
    return digests("t", c["vm_id"], subjects, [str(n) for n in c["incarnation"]], c["kind"])


# Each record type's dedupe keys from its identity fields, many records at once (the same as transition_id,
# heartbeat_id, impact_id and approval_id one at a time), and its fields that hold one of a fixed set of values.
# The ingest checks every record against them (ingest.decode one at a time, ingest.decode_batch by columns).
KEYS: Final[Mapping[str, Callable[[Columns], list[str]]]] = {
    RECORD_TRANSITION: _transition_keys,
    RECORD_HEARTBEAT: lambda c: digests("h", c["vm_id"], c["observed_at"]),
    RECORD_IMPACT: lambda c: digests("i", c["vm_id"], c["detected_by"], c["began_at"]),
    RECORD_APPROVAL: lambda c: digests("a", c["vm_id"], c["event_id"], c["decision"]),
}
ENUMS: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    RECORD_TRANSITION: {"kind": KINDS},
    RECORD_HEARTBEAT: {},
    RECORD_IMPACT: {"detected_by": DETECTED_BY},
    RECORD_APPROVAL: {"decision": DECISIONS},
}


def record_id_of(payload: bytes) -> str:
    """The ``record_id`` of a record's JSON bytes ("" when it has none or is not a record)."""
    try:
        record_id = json.loads(payload).get("record_id", "")
    except (ValueError, AttributeError):
        return ""
    return record_id if isinstance(record_id, str) else ""


def approval_id(vm_id: str, event_id: str, decision: str) -> str:
    """The deterministic dedupe key of an approval decision: its VM, its event and what was decided."""
    return _digest("a", vm_id, event_id, decision)


def _digest(*parts: str) -> str:
    # A unit separator keeps ("a|b", "c") and ("a", "b|c") apart.
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def digests(kind: str, *parts: Sequence[str]) -> list[str]:
    """``_digest(kind, *record_parts)`` of many records at once, one column of text per part.

    The ingest checks a whole delivery's keys with it; it must stay byte for byte ``_digest``.
    """
    head, join, sha = kind + "\x1f", "\x1f".join, hashlib.sha256
    # map(join, zip(...)) lets zip reuse its tuple: no object per record besides the text and the digest
    return [sha((head + text).encode()).hexdigest()[:32] for text in map(join, zip(*parts))]


def format_time(moment: datetime) -> str:
    """UTC, millisecond precision, ``Z`` suffix: the only timestamp form on the wire."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: wire timestamps must be timezone-aware")
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """Inverse of ``format_time``; raises ValueError on anything else."""
    if not text.endswith("Z"):
        raise ValueError(f"wire timestamp must end in Z: {text!r}")
    moment = isotime.parse(text)
    return moment.astimezone(timezone.utc)


def encode(record: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of a record (sorted keys, no spaces): stable for hashing and dedupe."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# ---- what the collector made safe (issue 29): the originals travel beside the record, as dead letters ----

# The outbox row kept beside a record whose fields the collector made safe (an over-long Description, a number
# beyond its column): what those fields held. Not a record type of the contract: it ships like any row, under
# this record_type property, and the ingest keeps it whole in dead_letters (reason made_safe_by_collector).
RECORD_ORIGINAL: Final = "original"


class MadeSafe(dict[str, Any]):
    """A record (its safe values, as sent) whose ``notes`` say which fields were made safe and ``originals`` what
    they held before; the outbox keeps the originals in a row of their own (``original_row``)."""

    def __init__(self, record: Mapping[str, Any], notes: Sequence[str], originals: Mapping[str, Any]) -> None:
        super().__init__(record)
        self.notes = list(notes)
        self.originals = dict(originals)


def original_row(record: Mapping[str, Any], seq: int) -> bytes | None:
    """The payload of the row that keeps what a made-safe record's fields held, as row ``seq`` (None for a record
    stored as built). ASCII JSON, non-finite numbers as text: any value the collector was handed can be written."""
    if not isinstance(record, MadeSafe):
        return None
    originals = {
        k: repr(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.originals.items()
    }
    body = {
        "record_type": RECORD_ORIGINAL,
        "seq": seq,
        "vm_id": record.get("vm_id", ""),
        "of_record_type": record.get("record_type", ""),
        "of_record_id": record.get("record_id", ""),
        "notes": record.notes,
        "originals": originals,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str).encode()
