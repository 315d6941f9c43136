"""sevents.isotime reads on Python 3.9 what 3.11's datetime.fromisoformat reads (the collector runs on both)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sevents import isotime

UTC = UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2016-09-19T18:29:47Z", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("2016-09-19T18:29:47z", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("2016-09-19T18:29:47.1234567Z", datetime(2016, 9, 19, 18, 29, 47, 123456, tzinfo=UTC)),
        ("2016-09-19T18:29:47.1Z", datetime(2016, 9, 19, 18, 29, 47, 100000, tzinfo=UTC)),
        ("2016-09-19T18:29:47+0200", datetime(2016, 9, 19, 18, 29, 47, tzinfo=timezone(timedelta(hours=2)))),
        ("2016-09-19 18:29", datetime(2016, 9, 19, 18, 29)),
    ],
)
def test_reads_the_forms_azure_and_3_11_accept(text: str, expected: datetime) -> None:
    """Z, seven fraction digits (.NET), short fractions and colon-less offsets all read as 3.11 reads them."""
    assert isotime.parse(text) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "2016-09-19T18:29:47Q", "2016-13-01T00:00:00Z"])
def test_junk_raises_value_error(text: str) -> None:
    """Anything else raises ValueError, as fromisoformat does."""
    with pytest.raises(ValueError, match=r"."):
        isotime.parse(text)


@given(st.datetimes(timezones=st.just(UTC)))
def test_wire_form_round_trips(moment: datetime) -> None:
    """Every aware time written with a Z suffix reads back as the same instant."""
    text = moment.isoformat().replace("+00:00", "Z")
    assert isotime.parse(text) == moment
