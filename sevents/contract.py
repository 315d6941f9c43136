"""The one declaration of the wire contract: every field of every record type, typed, with its limits and column.

From this table are derived: the field lists of ``sevents.records``, the collector's record builder
(``build``), the ingest's validation rules and msgspec structs (``ingest.rules``, ``ingest.decode``), the
ingest's row layout (``ingest.rows``), the ClickHouse columns the migrations must create (``columns``), and the
JSON-schema document for consumers (``json_schema``, committed as ``sevents/contract.schema.json``).

A limit is the range of the column the value lands in. A value outside it is made safe (``make_safe``) rather
than losing the whole record: text and lists are truncated, a nullable value becomes null, a counter is clamped,
and a note names each repair. Only key fields (the record's identity) can never be repaired: a record whose
key is bad cannot be understood and is dead-lettered whole.

Adding an optional field: one ``Field(..., default=...)`` line here plus a migration adding the column.
Records from older collectors lack it and get the default.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sevents import isotime

SCHEMA_VERSION: Final = 1
RECORD_TRANSITION: Final = "transition"
RECORD_HEARTBEAT: Final = "heartbeat"
RECORD_IMPACT: Final = "impact"
RECORD_APPROVAL: Final = "approval"

INT64: Final = (-(2**63), 2**63 - 1)
UINT64: Final = (0, 2**64 - 1)
UINT32: Final = (0, 2**32 - 1)
UINT16: Final = (0, 2**16 - 1)
# The years a record's times may fall in: those ClickHouse's DateTime can hold (1970-2105), which the tables' TTLs
# and partitions count in; a later or earlier time (a broken clock) would wrap there and vanish or live for ever.
TIME_YEARS: Final = (1970, 2105)

KINDS: Final = ("text", "int", "bool", "time", "texts", "counts")


class _Required:
    """Marks a field without a default: every record must carry it."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Final = _Required()


@dataclass(frozen=True)
class Limits:
    """Size limits; anything larger is made safe or is poison (a real record is a few hundred bytes)."""

    max_payload_bytes: int = 256 * 1024
    max_text_chars: int = 16 * 1024
    max_list_items: int = 4096
    max_map_items: int = 256


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True)
class Field:
    """One wire field: JSON kind, nullability, range, the ClickHouse column type, and whether it is identity."""

    name: str
    kind: str  # one of KINDS; "time" is a wire timestamp string, "texts" a list of str, "counts" {str: int}
    column: str  # the ClickHouse column type the migrations create
    nullable: bool = False
    bounds: tuple[int, int] = INT64  # for ints (and counts' values)
    key: bool = False  # identity: part of a dedupe key or the record's type; never made safe
    default: Any = REQUIRED  # optional fields have a default, used when a record lacks them
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


_LC = "LowCardinality(String)"
_TIME = "DateTime64(3, 'UTC')"


def _text(name: str, doc: str = "", *, column: str = "String", key: bool = False) -> Field:
    return Field(name, "text", column, key=key, doc=doc)


VM: Final = (
    _text("vm_id", "compute.vmId (GUID); the partition key and the observer in every dedupe key", key=True),
    _text("vm_name"),
    _text("location", column=_LC),
    _text("subscription_id", column=_LC),
    _text("resource_group", column=_LC),
    _text("resource_id"),
    _text("zone", '"" when not zonal', column=_LC),
    Field("fault_domain", "int", "Nullable(UInt16)", nullable=True, bounds=UINT16, doc="null when unknown"),
    Field("update_domain", "int", "Nullable(UInt16)", nullable=True, bounds=UINT16, doc="null when unknown"),
    _text("scale_set", 'vmScaleSetName, "" when not in a scale set', column=_LC),
)

COMMON: Final = (
    Field("schema_version", "int", "UInt16", bounds=UINT16, key=True),
    _text("record_type", column=_LC, key=True),
    _text("record_id", "the record's own key: transition_id, heartbeat_id, impact_id or approval_id", key=True),
    Field("seq", "int", "UInt64", bounds=UINT64, doc="per-VM monotonic sequence number, assigned by the outbox"),
    Field("observed_at", "time", _TIME, key=True),
    _text("api_version", "Scheduled Events api-version used for the poll", column=_LC),
    _text("collector_version", column=_LC),
    *VM,
)

TRANSITION: Final = (
    *COMMON,
    _text("transition_id", key=True),
    _text("event_id", '"" for document-level anomalies', key=True),
    Field("incarnation", "int", "Int64", key=True, doc="DocumentIncarnation the transition was seen in"),
    _text("kind", "appeared | status_changed | updated | disappeared | anomaly", column=_LC, key=True),
    _text("status", column=_LC),
    _text("prev_status", column=_LC),
    Field("prev_observed_at", "time", f"Nullable({_TIME})", nullable=True),
    _text("event_type", column=_LC),
    _text("resource_type", column=_LC),
    Field("resources", "texts", "Array(String)"),
    Field("affects_this_vm", "bool", "Bool"),
    Field("not_before", "time", f"Nullable({_TIME})", nullable=True),
    Field("description", "text", "Nullable(String)", nullable=True),
    Field("event_source", "text", "LowCardinality(Nullable(String))", nullable=True),
    Field("duration_s", "int", "Nullable(Int64)", nullable=True, doc="-1 unknown, null when absent"),
    Field("changed_fields", "texts", "Array(String)"),
    # Part of the key of document-level anomalies; notes of fields made safe are appended after the key check.
    _text("anomaly", "reason for kind=anomaly; notes of fields made safe"),
)

HEARTBEAT: Final = (
    *COMMON,
    _text("heartbeat_id", key=True),
    Field("last_incarnation", "int", "Nullable(Int64)", nullable=True),
    Field("last_poll_ok", "bool", "Bool"),
    _text("last_poll_error", column=_LC),
    Field("polls", "int", "UInt64", bounds=UINT64),
    Field("poll_errors", "counts", "Map(String, UInt64)", bounds=UINT64),
    Field("active_events", "int", "UInt32", bounds=UINT32),
    Field("outbox_depth", "int", "UInt64", bounds=UINT64),
    Field("drops", "counts", "Map(String, UInt64)", bounds=UINT64),
    Field("started_at", "time", _TIME),
    Field("final", "bool", "Bool", default=False, doc="the last heartbeat of a collector stopping cleanly"),
)

# Downtime the collector measured on its own VM (collector/downtime.py): a pause (the VM stopped running while
# the collector's clock kept counting) or a reboot (a new boot id). One record per observation.
IMPACT: Final = (
    *COMMON,
    _text("impact_id", key=True),
    _text("detected_by", "pause | reboot", column=_LC, key=True),
    Field("began_at", "time", _TIME, key=True, doc="the last moment the collector knew its VM running"),
    Field("duration_ms", "int", "UInt64", bounds=UINT64, doc="from began_at until the VM ran again"),
    _text("event_id", 'the event of this VM that was Started then; "" when no event announced it'),
    _text("event_type", '"" when no event announced it', column=_LC),
    # What a VM saw at its first read after a downtime is only "by then": an end it saw at a later read it saw.
    Field(
        "read_at",
        "time",
        f"Nullable({_TIME})",
        nullable=True,
        default=None,
        doc="the collector's first read of IMDS after the downtime (the poll that stored this record); "
        "absent from earlier collectors, null when a stop stored it without a read",
    ),
)

# A decision of the collector's approval policy (collector/approver.py) about one event: approved through IMDS,
# left to the approving VM, ready for the coordinator, refused by its hook, not covered by the policy, or the
# post-event hook's run; or a decision of the central coordinator (ingest/coordinator.py, vm_id "coordinator").
APPROVAL: Final = (
    *COMMON,
    _text("approval_id", key=True),
    _text("event_id", key=True),
    _text(
        "decision",
        "approved | approve_failed | left_to_approver | hook_failed | hook_timeout | hook_interrupted | "
        "not_covered | post_hook | dry_run_approved | ready",
        column=_LC,
        key=True,
    ),
    _text("rule", "the policy rule that decided: first-in-resources, self, or the rule the event failed", column=_LC),
    _text("approver", 'the VM that approves the event under the policy; "" when nobody will', column=_LC),
    _text("event_type", column=_LC),
    Field("not_before", "time", f"Nullable({_TIME})", nullable=True, doc="NotBefore when decided"),
    Field("hook_exit", "int", "Nullable(Int64)", nullable=True, doc="the hook's exit code; -9 killed; null: no hook"),
    Field("hook_ms", "int", "Nullable(UInt64)", nullable=True, bounds=UINT64, doc="how long the hook ran"),
    Field("http_status", "int", "Nullable(UInt16)", nullable=True, bounds=UINT16, doc="the approval POST's status"),
    Field("decided_at", "time", _TIME, doc="when the decision was final (after the hook and the POST)"),
)


@dataclass(frozen=True)
class RecordType:
    """One record type and its table of record: what every stage that handles it by name derives from.

    ``key``: the field holding its dedupe key (also its ``record_id``); ``time``: the time its table is partitioned
    by (``partition``: "month" or "day") and its retention counts from (``retention``: "history" or "heartbeats",
    the setting that says how long); ``proven``: the times a record says it observed, none of which may be later
    than the moment Event Hubs enqueued it (beyond the VM's clock skew); ``lookup``: the columns of the table's
    sorting key a record's key fixes, and ``lookup_time`` a time the key includes, which narrow the read of the
    stored versions of a batch's keys; ``purpose``: the table in one line.
    """

    name: str
    table: str
    fields: tuple[Field, ...]
    key: str
    time: str
    partition: str
    retention: str
    proven: tuple[str, ...]
    lookup: tuple[str, ...]
    lookup_time: str | None
    purpose: str


# In this order the ingest's fast paths try a payload's type: transitions, the most numerous, first.
RECORD_TYPES: Final = (
    RecordType(
        RECORD_TRANSITION,
        "transitions",
        TRANSITION,
        key="transition_id",
        time="observed_at",
        partition="month",
        retention="history",
        proven=("observed_at", "prev_observed_at"),
        lookup=("vm_id", "event_id"),
        lookup_time=None,
        purpose="every transition any collector observed, raw event fields and the observer's identity; "
        "deduplicated by transition_id, read with FINAL",
    ),
    RecordType(
        RECORD_HEARTBEAT,
        "heartbeats",
        HEARTBEAT,
        key="heartbeat_id",
        time="observed_at",
        partition="day",
        retention="heartbeats",
        proven=("observed_at", "started_at"),
        lookup=("vm_id",),
        lookup_time="observed_at",
        purpose="collector heartbeats (outbox depth, poll errors, the VM's identity and topology), kept 7 days",
    ),
    RecordType(
        RECORD_IMPACT,
        "impacts",
        IMPACT,
        key="impact_id",
        time="began_at",
        partition="month",
        retention="history",
        proven=("observed_at", "began_at", "read_at"),
        lookup=("vm_id",),
        lookup_time="began_at",
        purpose="the downtime each collector measured on its own VM (a pause or a reboot), with the event Started then",
    ),
    RecordType(
        RECORD_APPROVAL,
        "approvals",
        APPROVAL,
        key="approval_id",
        time="decided_at",
        partition="month",
        retention="history",
        proven=("observed_at", "decided_at"),
        lookup=("vm_id", "event_id"),
        lookup_time=None,
        purpose="one row per decision of a collector's approval policy about one event",
    ),
)
BY_NAME: Final[Mapping[str, RecordType]] = {t.name: t for t in RECORD_TYPES}
BY_TABLE: Final[Mapping[str, RecordType]] = {t.table: t for t in RECORD_TYPES}
CONTRACT: Final[Mapping[str, tuple[Field, ...]]] = {t.name: t.fields for t in RECORD_TYPES}
TABLES: Final[Mapping[str, str]] = {t.name: t.table for t in RECORD_TYPES}


# ---- attestation (issue 29: records a VM can prove; off unless configured) ----
# With ``attestation = true`` the collector's Event Hubs sink (collector/attestation.py) signs the exact body
# bytes of every event with the VM's own Ed25519 key and carries the signature and the key's id as application
# properties, so the payloads stay those of the outbox and the local path (which are never signed). Before the
# first record it sends, under the VM's vm_id as partition key (the same ordered partition as its records), one
# event with application property record_type = RECORD_ATTESTATION whose body is a JSON object of
# ATTESTATION_FIELDS: vm_id, public_key (base64 DER SubjectPublicKeyInfo), and IMDS's attested document as IMDS
# answers it (encoding "pkcs7", signature: base64 DER PKCS#7) fetched with nonce ``attestation_nonce(key)``. The
# ingest (ingest/attestation.py) verifies the document and pins the key to the vmId it names. An attestation is
# not a record: it goes to no record table, only to the ingest's table of pinned keys (attested_keys).
RECORD_ATTESTATION: Final = "attestation"
ATTESTATION_FIELDS: Final = ("vm_id", "public_key", "encoding", "signature")
PROPERTY_SIGNATURE: Final = "sevents_signature"  # base64 Ed25519 signature of the event's body bytes
PROPERTY_KEY_ID: Final = "sevents_key_id"  # key_id() of the signing key


def key_id(public_key_der: bytes) -> str:
    """The id of a public key: the hex SHA-256 of its DER SubjectPublicKeyInfo."""
    return hashlib.sha256(public_key_der).hexdigest()


def attestation_nonce(public_key_der: bytes) -> str:
    """The 10-digit nonce IMDS is asked to sign for a key: the key's SHA-256 as a number, modulo 10**10."""
    return f"{int.from_bytes(hashlib.sha256(public_key_der).digest(), 'big') % 10**10:010d}"


def names(fields: tuple[Field, ...]) -> tuple[str, ...]:
    return tuple(f.name for f in fields)


def columns(fields: tuple[Field, ...]) -> dict[str, str]:
    """The ClickHouse columns (name -> type) a table of these records must have besides the ingest's own."""
    return {f.name: f.column for f in fields}


# ---- making a record safe (pure; shared by the collector's builder and the ingest) ----


def make_safe(
    fields: tuple[Field, ...], record: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS
) -> tuple[dict[str, Any], list[str]]:
    """``record`` with every non-key field brought within its limits, and a note per repair.

    Fields this cannot repair (a key field, a wrong JSON type in a non-nullable field) are left as they are:
    the validator then rejects the record with its reason.
    """
    safe = dict(record)
    notes: list[str] = []
    for f in fields:
        if f.key or f.name not in safe:
            continue
        value = safe[f.name]
        fixed, note = _repair(f, value, limits)
        if note:
            safe[f.name] = fixed
            notes.append(f"{f.name}: {note}")
    return safe, notes


def _repair(f: Field, value: Any, limits: Limits) -> tuple[Any, str]:
    if value is None:
        return (None, "") if f.nullable else (value, "")
    found = problem(f, value, limits)
    if found is None:
        return value, ""
    if f.kind == "text" and isinstance(value, str) and len(value) > limits.max_text_chars:
        return value[: limits.max_text_chars], f"truncated from {len(value)} characters"
    if f.kind == "texts" and type(value) is list and all(isinstance(v, str) for v in value):
        items = [v[: limits.max_text_chars] for v in value[: limits.max_list_items]]
        return items, f"truncated ({len(value)} items)"
    if f.kind == "counts" and type(value) is dict:
        low, high = f.bounds
        kept = {
            str(k)[: limits.max_text_chars]: min(max(n, low), high)
            for k, n in list(value.items())[: limits.max_map_items]
            if type(n) is int
        }
        return kept, f"truncated or clamped ({len(value)} entries)"
    if f.nullable:
        return None, f"null: {found[1]}"
    if f.kind == "int" and type(value) is int:
        low, high = f.bounds
        return min(max(value, low), high), f"clamped: {found[1]}"
    return value, ""  # cannot repair: the validator names it


# Why a value does not fit its field, as (reason, what is wrong): the reason is the one a dead letter carries.
WRONG_TYPE: Final = "wrong_type"
TOO_LARGE: Final = "too_large"
OUT_OF_RANGE: Final = "out_of_range"
BAD_TIME: Final = "bad_time"
Problem = tuple[str, str]


def problem(f: Field, value: Any, limits: Limits = DEFAULT_LIMITS) -> Problem | None:
    """Why the non-null ``value`` does not fit ``f`` (None when it does): the one per-kind check, which the
    collector's ``make_safe`` and the ingest's ``ingest.rules.check_document`` both ask. For a list or a map, the
    first item or entry that does not fit."""
    if f.kind == "text":
        return _text_problem(value, limits)
    if f.kind == "int":
        return _int_problem(value, f.bounds)
    if f.kind == "bool":
        return None if type(value) is bool else (WRONG_TYPE, "not true/false")
    if f.kind == "time":
        return _time_problem(value)
    if f.kind == "texts":
        if type(value) is not list:
            return WRONG_TYPE, "not a list"
        if len(value) > limits.max_list_items:
            return TOO_LARGE, f"{len(value)} items"
        for item in value:
            found = _text_problem(item, limits)
            if found is not None:
                return found[0], f"an item: {found[1]}"
        return None
    if type(value) is not dict:
        return WRONG_TYPE, "not an object"
    if len(value) > limits.max_map_items:
        return TOO_LARGE, f"{len(value)} entries"
    for key, count in value.items():
        found = _text_problem(key, limits) or _int_problem(count, f.bounds)
        if found is not None:
            return found[0], f"entry {_short(key)}: {found[1]}"
    return None


def _text_problem(value: Any, limits: Limits) -> Problem | None:
    if not isinstance(value, str):
        return WRONG_TYPE, "not text"
    return (TOO_LARGE, f"{len(value)} characters") if len(value) > limits.max_text_chars else None


def _int_problem(value: Any, bounds: tuple[int, int]) -> Problem | None:
    if type(value) is not int:
        return WRONG_TYPE, "not an integer"
    low, high = bounds
    return None if low <= value <= high else (OUT_OF_RANGE, f"{_short(value)} outside [{low}, {high}]")


def _time_problem(value: Any) -> Problem | None:
    """The one wire timestamp form (``2026-11-21T23:23:24.123Z``) within ``TIME_YEARS``, or why not."""
    if type(value) is not str or len(value) != 24 or value[10] != "T" or value[23] != "Z":
        return BAD_TIME, f"{_short(value)} is not a wire timestamp"
    try:
        moment = isotime.parse(value)
    except ValueError:
        return BAD_TIME, f"{_short(value)} is not a wire timestamp"
    if not TIME_YEARS[0] <= moment.year <= TIME_YEARS[1]:
        return OUT_OF_RANGE, f"{value} outside the years {TIME_YEARS[0]}-{TIME_YEARS[1]}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} chars)"


def is_wire_time(value: Any) -> bool:
    """The one wire timestamp form (``2026-11-21T23:23:24.123Z``) within ``TIME_YEARS``."""
    return _time_problem(value) is None


# ---- building records (the collector's side) ----


def build(
    fields: tuple[Field, ...], values: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS, *, skip: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[str]]:
    """A record in contract order from ``values`` (optional fields defaulted), made safe; and the repair notes.

    Raises ValueError when a required field is missing or an unknown one is given: our bug, never shipped.
    ``skip`` names fields someone else adds later (``seq``: the outbox).
    """
    known = {f.name for f in fields}
    unknown = set(values) - known
    missing = {f.name for f in fields if f.required and f.name not in values} - set(skip)
    if unknown or missing:
        raise ValueError(f"fields differ from the contract: unknown {sorted(unknown)}, missing {sorted(missing)}")
    record = {f.name: values.get(f.name, f.default) for f in fields if f.name not in skip}
    return make_safe(fields, record, limits)


# ---- the document for consumers ----

_JSON_TYPES: Final[dict[str, dict[str, Any]]] = {
    "text": {"type": "string"},
    "int": {"type": "integer"},
    "bool": {"type": "boolean"},
    "time": {"type": "string", "format": "date-time", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"},
    "texts": {"type": "array", "items": {"type": "string"}},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
}


def json_schema(limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """A JSON-schema document of every record type (one ``oneOf`` branch each), with limits and columns."""
    branches = []
    for record_type, fields in CONTRACT.items():
        properties: dict[str, Any] = {}
        for f in fields:
            spec: dict[str, Any] = dict(_JSON_TYPES[f.kind])
            if f.kind == "int":
                spec.update(minimum=f.bounds[0], maximum=f.bounds[1])
            if f.kind == "text":
                spec["maxLength"] = limits.max_text_chars
            if f.kind == "texts":
                spec["maxItems"] = limits.max_list_items
            if f.kind == "counts":
                spec["maxProperties"] = limits.max_map_items
            if f.name == "record_type":
                spec["const"] = record_type
            if f.name == "schema_version":
                spec["const"] = SCHEMA_VERSION
            if f.nullable:
                spec = {"anyOf": [spec, {"type": "null"}]}
            if not f.required:
                spec["default"] = f.default
            spec["x-clickhouse-type"] = f.column
            if f.key:
                spec["x-key"] = True
            if f.doc:
                spec["description"] = f.doc
            properties[f.name] = spec
        branches.append(
            {
                "title": record_type,
                "type": "object",
                "properties": properties,
                "required": [f.name for f in fields if f.required],
                "additionalProperties": True,
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "sevents wire record",
        "x-schema-version": SCHEMA_VERSION,
        "x-max-payload-bytes": limits.max_payload_bytes,
        "oneOf": branches,
    }
