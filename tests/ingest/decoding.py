"""The ingest's one decoder (``ingest.decode.decode_noted``) read the ways tests compare it: the values alone, or
the record as a dict of wire values."""

from __future__ import annotations

from typing import Any

from ingest.decode import DEFAULT_LIMITS, RULES, Limits, decode_noted
from sevents import records


def values(payload: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[str, tuple[Any, ...]]:
    """The record type and the field values in ``RULES`` order (timestamps parsed), without a position."""
    record_type, row, _ = decode_noted(payload, "", limits)
    return record_type, row[:-1]


def record(payload: bytes, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The validated record holding exactly the known fields, timestamps as wire strings; raises InvalidRecord."""
    record_type, row = values(payload, limits)
    rules = RULES[record_type]
    return {
        name: records.format_time(value) if rule.kind == "time" and value is not None else value
        for (name, rule), value in zip(rules.items(), row, strict=True)
    }
