"""Decode and validate one wire record (pure): bytes in, a checked dict out, or InvalidRecord with a reason.

Every field of ``sevents.records`` is checked against the rule below: its JSON type, its range (the
ClickHouse column it lands in must hold it), its size, and for timestamps the one wire form. The
record's dedupe key is recomputed and must match, since a wrong key silently breaks deduplication.
Unknown extra fields are allowed (adding an optional field does not bump the schema version) and dropped.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from ingest.errors import InvalidRecord
from sevents import records

INT64: Final = (-(2**63), 2**63 - 1)
UINT64: Final = (0, 2**64 - 1)
UINT32: Final = (0, 2**32 - 1)
UINT16: Final = (0, 2**16 - 1)


@dataclass(frozen=True)
class Limits:
    """Size limits; anything larger is poison (a real record is a few hundred bytes)."""

    max_payload_bytes: int = 256 * 1024
    max_text_chars: int = 16 * 1024
    max_list_items: int = 4096
    max_map_items: int = 256


@dataclass(frozen=True)
class Rule:
    """What one field must hold."""

    kind: str  # text | int | bool | time | texts | counts
    nullable: bool = False
    bounds: tuple[int, int] = INT64


_TEXT, _TIME, _BOOL = Rule("text"), Rule("time"), Rule("bool")

COMMON_RULES: Final[Mapping[str, Rule]] = {
    "schema_version": Rule("int", bounds=UINT16),
    "record_type": _TEXT,
    "record_id": _TEXT,
    "seq": Rule("int", bounds=UINT64),
    "observed_at": _TIME,
    "api_version": _TEXT,
    "collector_version": _TEXT,
    "vm_id": _TEXT,
    "vm_name": _TEXT,
    "location": _TEXT,
    "subscription_id": _TEXT,
    "resource_group": _TEXT,
    "resource_id": _TEXT,
    "zone": _TEXT,
    "fault_domain": Rule("int", nullable=True, bounds=UINT16),
    "update_domain": Rule("int", nullable=True, bounds=UINT16),
    "scale_set": _TEXT,
}

TRANSITION_RULES: Final[Mapping[str, Rule]] = {
    **COMMON_RULES,
    "transition_id": _TEXT,
    "event_id": _TEXT,
    "incarnation": Rule("int"),
    "kind": _TEXT,
    "status": _TEXT,
    "prev_status": _TEXT,
    "prev_observed_at": Rule("time", nullable=True),
    "event_type": _TEXT,
    "resource_type": _TEXT,
    "resources": Rule("texts"),
    "affects_this_vm": _BOOL,
    "not_before": Rule("time", nullable=True),
    "description": Rule("text", nullable=True),
    "event_source": Rule("text", nullable=True),
    "duration_s": Rule("int", nullable=True),
    "changed_fields": Rule("texts"),
    "anomaly": _TEXT,
}

HEARTBEAT_RULES: Final[Mapping[str, Rule]] = {
    **COMMON_RULES,
    "heartbeat_id": _TEXT,
    "last_incarnation": Rule("int", nullable=True),
    "last_poll_ok": _BOOL,
    "last_poll_error": _TEXT,
    "polls": Rule("int", bounds=UINT64),
    "poll_errors": Rule("counts"),
    "active_events": Rule("int", bounds=UINT32),
    "outbox_depth": Rule("int", bounds=UINT64),
    "drops": Rule("counts"),
    "started_at": _TIME,
}

RULES: Final[Mapping[str, Mapping[str, Rule]]] = {
    records.RECORD_TRANSITION: TRANSITION_RULES,
    records.RECORD_HEARTBEAT: HEARTBEAT_RULES,
}


_PY_TYPES: Final[dict[str, type]] = {"text": str, "int": int, "bool": bool, "time": str, "texts": list, "counts": dict}


@dataclass(frozen=True)
class _Plan:
    """One record type's rules, laid out for the hot path: one C-level fetch and one type signature per record.

    A record's type signature (the type of each field, in order) is checked once per distinct signature and
    remembered (only valid ones, at most 2**nullable fields); ranges, timestamps and list items are then
    checked only where types cannot vouch for them. Any doubt falls back to the field-by-field ``_check``,
    which raises the precise reason.
    """

    rules: Mapping[str, Rule]
    names: tuple[str, ...]
    fetch: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    ints: tuple[tuple[int, int, int], ...]
    times: tuple[int, ...]
    lists: tuple[int, ...]
    maps: tuple[int, ...]
    index: dict[str, int]
    valid_signatures: set[tuple[type, ...]]

    @classmethod
    def of(cls, rules: Mapping[str, Rule]) -> _Plan:
        kinds = [r.kind for r in rules.values()]
        return cls(
            rules=rules,
            names=tuple(rules),
            fetch=operator.itemgetter(*rules),
            ints=tuple((i, *r.bounds) for i, r in enumerate(rules.values()) if r.kind == "int"),
            times=tuple(i for i, k in enumerate(kinds) if k == "time"),
            lists=tuple(i for i, k in enumerate(kinds) if k == "texts"),
            maps=tuple(i for i, k in enumerate(kinds) if k == "counts"),
            index={name: i for i, name in enumerate(rules)},
            valid_signatures=set(),
        )

    def types_ok(self, signature: tuple[type, ...]) -> bool:
        if signature in self.valid_signatures:
            return True
        ok = all(
            t is _PY_TYPES[r.kind] or (r.nullable and t is type(None))
            for t, r in zip(signature, self.rules.values(), strict=True)
        )
        if ok:
            self.valid_signatures.add(signature)
        return ok

    def slow_check(self, document: Mapping[str, Any], limits: Limits) -> None:
        for name, rule in self.rules.items():
            _check(name, document[name], rule, limits)


_PLANS: Final[dict[str, _Plan]] = {t: _Plan.of(r) for t, r in RULES.items()}


def decode(payload: bytes, limits: Limits = Limits()) -> dict[str, Any]:
    """The validated record holding exactly the known fields; raises InvalidRecord and nothing else."""
    record_type, values = decode_values(payload, limits)
    plan = _PLANS[record_type]
    wire = [records.format_time(v) if i in plan.times and v is not None else v for i, v in enumerate(values)]
    return dict(zip(plan.names, wire, strict=True))


def decode_values(payload: bytes, limits: Limits = Limits()) -> tuple[str, tuple[Any, ...]]:
    """``decode`` for the hot path: the record type and the field values in ``RULES`` (column) order.

    Timestamps come back parsed (aware UTC datetimes), ready for their DateTime64 columns.
    """
    if len(payload) > limits.max_payload_bytes:
        raise InvalidRecord("too_large", f"{len(payload)} bytes > {limits.max_payload_bytes}")
    try:
        document = orjson.loads(payload)
    except (ValueError, RecursionError) as error:
        raise InvalidRecord("bad_json", str(error)[:200]) from None
    if type(document) is not dict:
        raise InvalidRecord("not_an_object", type(document).__name__)
    version = document.get("schema_version")
    if type(version) is not int or version != records.SCHEMA_VERSION:
        raise InvalidRecord("schema_version", f"unsupported schema_version {version!r}")
    record_type = document.get("record_type")
    plan = _PLANS.get(record_type) if isinstance(record_type, str) else None
    if plan is None or not isinstance(record_type, str):
        raise InvalidRecord("record_type", f"unknown record_type {record_type!r}")
    try:
        values = plan.fetch(document)
    except KeyError as missing:
        raise InvalidRecord("missing_field", str(missing.args[0])) from None
    # A payload no longer than the text limit cannot hold a string over it.
    if len(payload) > limits.max_text_chars or not plan.types_ok(tuple(map(type, values))):
        plan.slow_check(document, limits)
    else:
        for i, low, high in plan.ints:
            value = values[i]
            if value is not None and not low <= value <= high:
                plan.slow_check(document, limits)
        for i in plan.lists:
            items = values[i]
            if len(items) > limits.max_list_items or not all(type(item) is str for item in items):
                plan.slow_check(document, limits)
        for i in plan.maps:
            counts = values[i]
            if len(counts) > limits.max_map_items or not all(
                type(k) is str and type(n) is int and 0 <= n <= UINT64[1] for k, n in counts.items()
            ):
                plan.slow_check(document, limits)
    _check_key(plan, values)
    row = list(values)
    for i in plan.times:
        value = row[i]
        if value is not None:
            moment = _moment(value)
            if moment is None:
                plan.slow_check(document, limits)  # raises with the precise reason
            row[i] = moment
    return record_type, tuple(row)


def _check(name: str, value: Any, rule: Rule, limits: Limits) -> Any:
    """One field against its rule (the general path; ``decode`` inlines the common cases)."""
    if value is None:
        if rule.nullable:
            return None
        raise InvalidRecord("wrong_type", f"{name} is null")
    _CHECKS[rule.kind](name, value, rule, limits)
    return value


def _text(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if not isinstance(value, str):
        raise InvalidRecord("wrong_type", f"{name} is not text")
    if len(value) > limits.max_text_chars:
        raise InvalidRecord("too_large", f"{name} has {len(value)} characters")


def _int(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not int:
        raise InvalidRecord("wrong_type", f"{name} is not an integer")
    low, high = rule.bounds
    if not low <= value <= high:
        raise InvalidRecord("out_of_range", f"{name}={value} outside [{low}, {high}]")


def _bool(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not bool:
        raise InvalidRecord("wrong_type", f"{name} is not true/false")


def _moment(value: Any) -> datetime | None:
    """A wire timestamp as an aware datetime in ClickHouse's DateTime64 range, or None if it is not one."""
    if type(value) is not str or len(value) != 24 or value[10] != "T" or value[-1] != "Z":
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if 1900 <= moment.year <= 2299 else None


def _time(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not str or len(value) != 24 or value[-1] != "Z" or value[10] != "T":
        raise InvalidRecord("bad_time", f"{name} is not a wire timestamp")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRecord("bad_time", f"{name}={value!r}") from None
    if not 1900 <= moment.year <= 2299:  # the range of ClickHouse DateTime64
        raise InvalidRecord("out_of_range", f"{name}={value!r}")


def _texts(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not list:
        raise InvalidRecord("wrong_type", f"{name} is not a list")
    if len(value) > limits.max_list_items:
        raise InvalidRecord("too_large", f"{name} has {len(value)} items")
    for item in value:
        _text(name, item, rule, limits)


def _counts(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not dict:
        raise InvalidRecord("wrong_type", f"{name} is not an object")
    if len(value) > limits.max_map_items:
        raise InvalidRecord("too_large", f"{name} has {len(value)} entries")
    for key, count in value.items():
        _text(name, key, rule, limits)
        _int(name, count, Rule("int", bounds=UINT64), limits)


_CHECKS: Final[dict[str, Callable[[str, Any, Rule, Limits], None]]] = {
    "text": _text,
    "int": _int,
    "bool": _bool,
    "time": _time,
    "texts": _texts,
    "counts": _counts,
}


def _check_key(plan: _Plan, values: tuple[Any, ...]) -> None:
    at = plan.index
    vm_id = values[at["vm_id"]]
    if values[at["record_type"]] == records.RECORD_TRANSITION:
        kind = values[at["kind"]]
        if kind not in records.KINDS:
            raise InvalidRecord("bad_value", f"unknown kind {kind!r}")
        field = "transition_id"
        # A document-level anomaly has no EventId; the collector keys it by its reason instead.
        subject = values[at["event_id"]] or f"document: {values[at['anomaly']]}"
        expected = records.transition_id(vm_id, subject, values[at["incarnation"]], kind)
    else:
        field = "heartbeat_id"
        expected = records.heartbeat_id(vm_id, values[at["observed_at"]])
    if values[at[field]] != expected or values[at["record_id"]] != expected:
        raise InvalidRecord("bad_key", f"{field}/record_id do not match the record's identity")
