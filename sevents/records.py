"""The wire contract: the records a collector emits and the ingest loads, and how they are keyed.

Every stage (outbox, Event Hubs message, ClickHouse row) carries the same JSON object, one per record.
A record is a flat JSON object; ``record_type`` says which field set applies. Timestamps are strings in
UTC with millisecond precision (``2026-11-21T23:23:24.123Z``). Absent optional values are ``null``.

Changing a field's meaning or removing one bumps ``SCHEMA_VERSION``; adding an optional field does not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

SCHEMA_VERSION: Final = 1
CONTENT_TYPE: Final = "application/json"

RECORD_TRANSITION: Final = "transition"
RECORD_HEARTBEAT: Final = "heartbeat"
RECORD_TYPES: Final = (RECORD_TRANSITION, RECORD_HEARTBEAT)

# Transition kinds (see collector/transitions.py for the lifecycle table that produces them).
KIND_APPEARED: Final = "appeared"
KIND_STATUS_CHANGED: Final = "status_changed"
KIND_UPDATED: Final = "updated"
KIND_DISAPPEARED: Final = "disappeared"
KIND_ANOMALY: Final = "anomaly"
KINDS: Final = (KIND_APPEARED, KIND_STATUS_CHANGED, KIND_UPDATED, KIND_DISAPPEARED, KIND_ANOMALY)

# The observing VM's identity and topology, from instance metadata; on every record.
VM_FIELDS: Final = (
    "vm_id",  # compute.vmId (GUID); the partition key and the observer in every dedupe key
    "vm_name",
    "location",
    "subscription_id",
    "resource_group",
    "resource_id",
    "zone",  # "" when not zonal
    "fault_domain",  # int or null (older instance API versions)
    "update_domain",  # int or null
    "scale_set",  # vmScaleSetName, "" when not in a scale set
)

# Fields common to every record.
COMMON_FIELDS: Final = (
    "schema_version",
    "record_type",
    "record_id",  # transition_id for transitions, heartbeat_id for heartbeats
    "seq",  # per-VM monotonic sequence number, assigned by the outbox
    "observed_at",
    "api_version",  # Scheduled Events api-version used for the poll
    "collector_version",
    *VM_FIELDS,
)

TRANSITION_FIELDS: Final = (
    *COMMON_FIELDS,
    "transition_id",
    "event_id",  # "" for document-level anomalies (incarnation going backwards)
    "incarnation",  # DocumentIncarnation of the document the transition was seen in
    "kind",  # one of KINDS
    "status",  # "Scheduled" | "Started" | "" (disappeared: see prev_status)
    "prev_status",  # status before this transition, "" when appeared
    "prev_observed_at",  # when the previous state was observed, null when appeared
    "event_type",  # Freeze | Reboot | Redeploy | Preempt | Terminate (as IMDS sent it)
    "resource_type",
    "resources",  # list of resource names, underscore prefix of 2017-03-01 removed
    "affects_this_vm",  # this VM's name is in resources
    "not_before",  # timestamp string or null (blank in IMDS)
    "description",  # str or null (absent before 2019-04-01)
    "event_source",  # "Platform" | "User" or null (absent before 2019-08-01)
    "duration_s",  # DurationInSeconds: int, -1 unknown, null when absent (before 2020-07-01)
    # Event fields that changed (snake_case names as here): for updated; for status_changed the fields that
    # changed along with the status (NotBefore blanking on Started not counted); for anomaly what changed; else []
    "changed_fields",
    "anomaly",  # short reason for kind=anomaly, else ""
)

HEARTBEAT_FIELDS: Final = (
    *COMMON_FIELDS,
    "heartbeat_id",
    "last_incarnation",  # int or null before the first successful poll
    "last_poll_ok",  # bool
    "last_poll_error",  # error kind of the last failed poll, "" when the last poll succeeded
    "polls",  # polls since the collector started
    "poll_errors",  # {error kind: count} since the collector started
    "active_events",  # number of events in the last document
    "outbox_depth",  # records waiting in the outbox
    "drops",  # {reason: count} since the collector started
    "started_at",  # when this collector process started
)


def transition_id(vm_id: str, event_id: str, incarnation: int, kind: str) -> str:
    """The deterministic dedupe key of a transition, the same in the collector, on the wire and in ClickHouse.

    Document-level anomalies (event_id "") pass ``"document: " + anomaly`` as ``event_id`` (the reason names the
    incarnations), so two incarnation resets to the same number stay two records (collector/enrich.py).
    """
    return _digest("t", vm_id, event_id, str(incarnation), kind)


def heartbeat_id(vm_id: str, observed_at: str) -> str:
    """The deterministic dedupe key of a heartbeat."""
    return _digest("h", vm_id, observed_at)


def _digest(*parts: str) -> str:
    # A unit separator keeps ("a|b", "c") and ("a", "b|c") apart.
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def format_time(moment: datetime) -> str:
    """UTC, millisecond precision, ``Z`` suffix: the only timestamp form on the wire."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: wire timestamps must be timezone-aware")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """Inverse of ``format_time``; raises ValueError on anything else."""
    if not text.endswith("Z"):
        raise ValueError(f"wire timestamp must end in Z: {text!r}")
    moment = datetime.fromisoformat(text[:-1] + "+00:00")
    return moment.astimezone(UTC)


def encode(record: Mapping[str, Any]) -> bytes:
    """Canonical JSON bytes of a record (sorted keys, no spaces): stable for hashing and dedupe."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
