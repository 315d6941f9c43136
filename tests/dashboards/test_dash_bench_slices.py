"""The fleet benchmark's heartbeat load, cut into INSERTs: every step of the range once, no INSERT too large."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench_dashboards import Fleet, heartbeat_slices
from tests.tiers import examples

SINCE = datetime(2026, 11, 1, tzinfo=UTC)


@settings(max_examples=examples(200), deadline=None)
@given(
    vms=st.integers(1, 200_000),
    step_s=st.sampled_from([1, 60, 300, 3600, 86_400]),
    seconds=st.integers(0, 40 * 86_400),
    rows_per_insert=st.integers(1, 50_000_000),
)
def test_slices_cover_the_range_in_whole_steps_within_the_insert_limits(
    vms: int, step_s: int, seconds: int, rows_per_insert: int
) -> None:
    until = SINCE + timedelta(seconds=seconds)
    slices = heartbeat_slices(Fleet(vms, 100, until), SINCE, until, step_s, rows_per_insert)
    assert [s for s, _, _ in slices][:1] == ([SINCE] if seconds else [])
    assert all(a[1] == b[0] for a, b in pairwise(slices))  # contiguous
    assert not slices or slices[-1][1] == until
    for start, end, rows in slices:
        assert end - start <= timedelta(days=30)  # raw heartbeats: a partition a day, 100 an INSERT at most
        assert rows <= max(rows_per_insert, vms)  # at least one step of the whole fleet
        assert rows == int((end - start).total_seconds() // step_s) * vms
    # all but the last slice are whole steps, so no heartbeat is lost between slices
    assert all((end - start).total_seconds() % step_s == 0 for start, end, _ in slices[:-1])
    assert sum(rows for _, _, rows in slices) == seconds // step_s * vms
