"""What each wire field must hold, and the precise field-by-field check that names the first violation (pure).

Every field of ``sevents.records`` has a rule: its JSON type, its range (the ClickHouse column it lands in
must hold it), its size, and for timestamps the one wire form. ``check_document`` is the reference: slow,
simple, and the source of every rejection reason. ``ingest.decode`` decides the common case faster and
defers to it whenever in doubt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ingest.errors import InvalidRecord
from sevents import records

INT64: Final = (-(2**63), 2**63 - 1)
UINT64: Final = (0, 2**64 - 1)
UINT32: Final = (0, 2**32 - 1)
UINT16: Final = (0, 2**16 - 1)
TIME_YEARS: Final = (1900, 2299)  # the range of ClickHouse DateTime64


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


def check_document(
    rules: Mapping[str, Rule], document: Mapping[str, Any], limits: Limits, *, time_format: bool = True
) -> None:
    """Every field of ``rules`` in ``document`` (all present) against its rule, in order; raises at the first bad one.

    ``time_format=False`` checks only that timestamps are text, leaving their form for later.
    """
    for name, rule in rules.items():
        value = document[name]
        if value is None:
            if rule.nullable:
                continue
            raise InvalidRecord("wrong_type", f"{name} is null")
        if rule.kind == "time" and not time_format:
            if type(value) is not str:
                raise InvalidRecord("bad_time", f"{name} is not a wire timestamp")
            continue
        _CHECKS[rule.kind](name, value, rule, limits)


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


def _time(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not str or len(value) != 24 or value[-1] != "Z" or value[10] != "T":
        raise InvalidRecord("bad_time", f"{name} is not a wire timestamp")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRecord("bad_time", f"{name}={value!r}") from None
    if not TIME_YEARS[0] <= moment.year <= TIME_YEARS[1]:
        raise InvalidRecord("out_of_range", f"{name}={value!r}")


def _texts(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not list:
        raise InvalidRecord("wrong_type", f"{name} is not a list")
    if len(value) > limits.max_list_items:
        raise InvalidRecord("too_large", f"{name} has {len(value)} items")
    for item in value:
        _text(name, item, rule, limits)


_COUNT = Rule("int", bounds=UINT64)


def _counts(name: str, value: Any, rule: Rule, limits: Limits) -> None:
    if type(value) is not dict:
        raise InvalidRecord("wrong_type", f"{name} is not an object")
    if len(value) > limits.max_map_items:
        raise InvalidRecord("too_large", f"{name} has {len(value)} entries")
    for key, count in value.items():
        _text(name, key, rule, limits)
        _int(name, count, _COUNT, limits)


_CHECKS: Final[dict[str, Callable[[str, Any, Rule, Limits], None]]] = {
    "text": _text,
    "int": _int,
    "bool": _bool,
    "time": _time,
    "texts": _texts,
    "counts": _counts,
}
