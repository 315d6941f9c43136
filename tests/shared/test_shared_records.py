"""The wire contract: deterministic keys and the one timestamp form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sevents import records


def test_transition_id_is_deterministic_and_sensitive_to_every_part() -> None:
    """The same key gives the same id; changing any part changes it."""
    base = records.transition_id("vm", "E1", 3, "appeared")
    assert base == records.transition_id("vm", "E1", 3, "appeared")
    variants = {
        records.transition_id("vm2", "E1", 3, "appeared"),
        records.transition_id("vm", "E2", 3, "appeared"),
        records.transition_id("vm", "E1", 4, "appeared"),
        records.transition_id("vm", "E1", 3, "disappeared"),
    }
    assert base not in variants and len(variants) == 4
    assert len(base) == 32


def test_separator_keeps_shifted_parts_apart() -> None:
    """Moving a character between neighbouring parts yields a different id."""
    assert records.transition_id("a|b", "c", 1, "k") != records.transition_id("a", "b|c", 1, "k")


@given(st.datetimes(timezones=st.just(UTC), min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1)))
def test_format_then_parse_keeps_the_millisecond(moment: datetime) -> None:
    """Formatting and parsing a wire timestamp loses only sub-millisecond digits."""
    parsed = records.parse_time(records.format_time(moment))
    assert parsed == moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def test_format_time_converts_to_utc_and_refuses_naive_times() -> None:
    """Offsets are converted to Z; a naive datetime is a programming error."""
    plus_two = datetime(2026, 1, 1, 2, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert records.format_time(plus_two) == "2026-01-01T00:00:00.123Z"
    with pytest.raises(ValueError, match="naive"):
        records.format_time(datetime(2026, 1, 1))


def test_encode_is_canonical() -> None:
    """Key order does not change the encoded bytes."""
    assert records.encode({"b": 1, "a": "é"}) == records.encode({"a": "é", "b": 1}) == '{"a":"é","b":1}'.encode()
