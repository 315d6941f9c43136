"""What each wire field must hold, and the precise field-by-field check that names the first violation (pure).

Every field declared in ``sevents.contract`` is a rule: its JSON type, its range (the ClickHouse column it
lands in must hold it), its size, and for timestamps the one wire form. ``check_document`` is the reference: slow,
simple, and the source of every rejection reason. ``ingest.decode`` decides the common case faster and
defers to it whenever in doubt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from ingest.errors import InvalidRecord
from sevents import contract, records
from sevents.contract import INT64, TIME_YEARS, UINT16, UINT32, UINT64, Limits

__all__ = [
    "APPROVAL_RULES",
    "COMMON_RULES",
    "HEARTBEAT_RULES",
    "IMPACT_RULES",
    "INT64",
    "RULES",
    "TIME_YEARS",
    "TRANSITION_RULES",
    "UINT16",
    "UINT32",
    "UINT64",
    "Limits",
    "Rule",
    "check_document",
]

# The rules are the contract's field declarations (sevents.contract): kind, nullability, range.
Rule = contract.Field

COMMON_RULES: Final[Mapping[str, Rule]] = {f.name: f for f in contract.COMMON}
TRANSITION_RULES: Final[Mapping[str, Rule]] = {f.name: f for f in contract.TRANSITION}
HEARTBEAT_RULES: Final[Mapping[str, Rule]] = {f.name: f for f in contract.HEARTBEAT}
IMPACT_RULES: Final[Mapping[str, Rule]] = {f.name: f for f in contract.IMPACT}
APPROVAL_RULES: Final[Mapping[str, Rule]] = {f.name: f for f in contract.APPROVAL}

RULES: Final[Mapping[str, Mapping[str, Rule]]] = {
    records.RECORD_TRANSITION: TRANSITION_RULES,
    records.RECORD_HEARTBEAT: HEARTBEAT_RULES,
    records.RECORD_IMPACT: IMPACT_RULES,
    records.RECORD_APPROVAL: APPROVAL_RULES,
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


_COUNT = Rule("count", "int", "UInt64", bounds=UINT64)


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
