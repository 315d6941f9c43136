"""What each wire field must hold, and the precise field-by-field check that names the first violation (pure).

Every field declared in ``sevents.contract`` is a rule: its JSON type, its range (the ClickHouse column it
lands in must hold it), its size, and for timestamps the one wire form. Whether a value fits, and the reason
when not, is ``sevents.contract.problem`` (the collector's ``make_safe`` asks the same). ``check_document`` is
the reference: slow, simple, every field in order. ``ingest.decode`` decides the common case faster and defers
to it whenever in doubt.
"""

from __future__ import annotations

from collections.abc import Mapping
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
RULES: Final[Mapping[str, Mapping[str, Rule]]] = {t.name: {f.name: f for f in t.fields} for t in contract.RECORD_TYPES}
TRANSITION_RULES: Final = RULES[records.RECORD_TRANSITION]
HEARTBEAT_RULES: Final = RULES[records.RECORD_HEARTBEAT]
IMPACT_RULES: Final = RULES[records.RECORD_IMPACT]
APPROVAL_RULES: Final = RULES[records.RECORD_APPROVAL]


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
            raise InvalidRecord(contract.WRONG_TYPE, f"{name} is null")
        if rule.kind == "time" and not time_format:
            if type(value) is not str:
                raise InvalidRecord(contract.BAD_TIME, f"{name} is not a wire timestamp")
            continue
        found = contract.problem(rule, value, limits)
        if found is not None:
            raise InvalidRecord(found[0], f"{name}: {found[1]}")
