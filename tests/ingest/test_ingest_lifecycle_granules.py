"""Reading the stored lifecycles costs what the events shown hold, not the history's size (migrations 0024, 0028,
0029).

Panels, alerts and audits read ``event_history`` and ``event_vm_history`` by EventId, and find the active set
from ``last_held_at``. EventIds are random, so each event read costs a granule wherever it falls: 8,192 rows
before 0024, 256 since. The active set reads the projection sorted by ``last_held_at``: the granules of the
recent holders only. ClickHouse's own plan (``EXPLAIN ESTIMATE``: the rows its index analysis leaves to read)
is the measure, on a history of 6,000 events with 20 VMs each.

Since 0028 the views read the EventIds a query names before FINAL merges the granules (PREWHERE), and every other
condition after it: an older version of an event never stands in for the newest.

Since 0029 event_history is partitioned by the month of each event's first sighting, and a read that knows when its
events were first seen at the earliest reads the months from then on; the newest version of each event among them.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest import event_sql

EVENTS = 6_000
VMS_PER_EVENT = 20
HELD = 5  # events some VM still shows: the rest ended long ago
GRANULE = 256
# a key's range may begin or end on a granule's boundary: ClickHouse then reads the neighbour too
AT_MOST = 2 * GRANULE


def _history(ch: Any, db: str) -> list[str]:
    """Every event's stored lifecycle and its VMs' (only the columns the reads look at); returns the EventIds."""
    ch.command(
        f"INSERT INTO {db}.event_history (event_id, last_held_at, computed_at) "
        f"SELECT toString(cityHash64(number)), if(number < {HELD}, now64(3), now64(3) - INTERVAL 300 DAY), now64(6) "
        f"FROM numbers({EVENTS})"
    )
    ch.command(
        f"INSERT INTO {db}.event_vm_history (event_id, vm_id, computed_at) "
        f"SELECT toString(cityHash64(intDiv(number, {VMS_PER_EVENT}))), toString(number % {VMS_PER_EVENT}), now64(6) "
        f"FROM numbers({EVENTS * VMS_PER_EVENT})"
    )
    ch.command(f"OPTIMIZE TABLE {db}.event_history FINAL")
    ch.command(f"OPTIMIZE TABLE {db}.event_vm_history FINAL")
    return [str(row[0]) for row in ch.query(f"SELECT event_id FROM {db}.event_history ORDER BY event_id").result_rows]


def _planned_rows(ch: Any, sql: str, **parameters: Any) -> int:
    return sum(int(row[3]) for row in ch.query(f"EXPLAIN ESTIMATE {sql}", parameters=parameters).result_rows)


def test_an_event_read_by_its_id_costs_a_granule_of_256_rows_and_its_vms(ch: Any, db: str) -> None:
    """Three events spread over the history: at most two granules each of event_history, and of event_vm_history
    their 20 VMs' rows and two granules around them; the whole tables are 6,000 and 120,000 rows."""
    ids = _history(ch, db)
    chosen = [ids[100], ids[EVENTS // 2], ids[-100]]
    events = _planned_rows(
        ch, f"SELECT * FROM {db}.event_history FINAL WHERE event_id IN {{ids:Array(String)}}", ids=chosen
    )
    assert 0 < events <= len(chosen) * AT_MOST
    vms = _planned_rows(
        ch, f"SELECT * FROM {db}.event_vm_history FINAL WHERE event_id IN {{ids:Array(String)}}", ids=chosen
    )
    assert 0 < vms <= len(chosen) * (VMS_PER_EVENT + AT_MOST)


def test_the_active_set_reads_the_recent_holders_granules_only(ch: Any, db: str) -> None:
    """``held_events`` finds the 5 events held now through the projection by last_held_at: a granule or two, not
    the 6,000 rows of the column."""
    _history(ch, db)
    held = event_sql.held_events(f"{db}.")
    assert len(ch.query(held).result_rows) == HELD
    assert 0 < _planned_rows(ch, held) <= AT_MOST
    plan = "\n".join(str(row[0]) for row in ch.query(f"EXPLAIN indexes = 1 {held}").result_rows)
    assert "by_last_held" in plan, plan


def _prewhere(ch: Any, sql: str) -> str:
    """The condition ClickHouse applies while reading, before FINAL merges ('' if none)."""
    plan = [str(row[0]).strip() for row in ch.query(f"EXPLAIN actions = 1 {sql}").result_rows]
    return " ".join(line for line in plan if line.startswith("Prewhere filter column"))


def test_the_views_read_the_named_events_before_final_merges_and_nothing_else(ch: Any, db: str) -> None:
    """Both views apply ``event_id IN`` while reading, and conditions on other columns only after the merge."""
    _history(ch, db)  # an empty table is not read at all
    for view in ("events", "event_vm_lifecycles"):
        sql = f"SELECT event_id FROM {db}.{view} WHERE event_id IN ('a', 'b') AND first_seen_at < now64(3)"
        prewhere = _prewhere(ch, sql)
        assert "event_id" in prewhere, (view, prewhere)
        assert "first_seen_at" not in prewhere, (view, prewhere)


def test_an_older_version_never_stands_in_for_the_newest(ch: Any, db: str) -> None:
    """An event stored twice, unmerged: first seen a day ago, then (the newest computation, from evidence that came
    late) two days ago. A read for events first seen in the last 36 hours finds neither version: the older one
    matches, but FINAL keeps the newest before the condition applies. Each VM's row likewise."""
    ch.command(f"SYSTEM STOP MERGES {db}.event_history")
    ch.command(f"SYSTEM STOP MERGES {db}.event_vm_history")
    for days, computed in ((1, "now64(6) - INTERVAL 1 MINUTE"), (2, "now64(6)")):
        ch.command(
            f"INSERT INTO {db}.event_history (event_id, event_type, first_seen_at, outcome, computed_at) "
            f"VALUES ('late', 'Reboot', now64(3) - INTERVAL {days} DAY, 'completed', {computed})"
        )
        ch.command(
            f"INSERT INTO {db}.event_vm_history (event_id, vm_id, first_seen_at, computed_at) "
            f"VALUES ('late', 'vm-1', now64(3) - INTERVAL {days} DAY, {computed})"
        )
    parts = f"SELECT count() FROM system.parts WHERE database = '{db}' AND table = 'event_history' AND active"
    assert ch.query(parts).result_rows[0][0] == 2
    for view in ("events", "event_vm_lifecycles"):
        stored = f"SELECT first_seen_at FROM {db}.{view} WHERE event_id IN ('late')"
        assert len(ch.query(stored).result_rows) == 1, view
        recent = f"{stored} AND first_seen_at >= now64(3) - INTERVAL 36 HOUR"
        assert ch.query(recent).result_rows == [], view


MONTHS = 12


def _year(ch: Any, db: str) -> None:
    """6,000 events first seen over the last 12 months, a few every day: event_history in 12 or 13 partitions."""
    ch.command(
        f"INSERT INTO {db}.event_history (event_id, first_seen_at, computed_at) "
        f"SELECT toString(cityHash64(number)), now64(3) - toIntervalHour(number * {MONTHS * 30 * 24} DIV {EVENTS}), "
        f"now64(6) FROM numbers({EVENTS})"
    )
    ch.command(f"OPTIMIZE TABLE {db}.event_history FINAL")


def test_a_read_bounded_in_time_reads_the_months_from_its_bound_only(ch: Any, db: str) -> None:
    """The events first seen in the last 7 days, read with the bound of a 7-day panel (60 days back): the same
    rows as a read of every month, from the partitions of those 60 days only (migration 0029)."""
    _year(ch, db)
    week = f"SELECT event_id FROM {db}.event_history WHERE first_seen_at >= now64(3) - INTERVAL 7 DAY"
    bound = "now64(3) - INTERVAL 60 DAY"
    every_month = f"SELECT event_id, first_seen_at FROM {event_sql.since(week, db=f'{db}.')} ORDER BY event_id"
    from_bound = (
        f"SELECT event_id, first_seen_at FROM {event_sql.since(week, db=f'{db}.', rows_after=bound)} ORDER BY event_id"
    )
    shown = ch.query(from_bound).result_rows
    assert len(shown) > 100
    assert shown == ch.query(every_month).result_rows
    in_months = ch.query(
        f"SELECT count() FROM {db}.event_history WHERE toYYYYMM(first_seen_at) >= toYYYYMM({bound})"
    ).result_rows[0][0]
    assert in_months < EVENTS / 3
    assert 0 < _planned_rows(ch, from_bound) <= in_months
    assert _planned_rows(ch, every_month) > EVENTS / 2


def _store(ch: Any, db: str, first_seen: str, seen_by: str, computed: str) -> None:
    ch.command(
        f"INSERT INTO {db}.event_history (event_id, event_type, first_seen_at, outcome, seen_by, computed_at) "
        f"VALUES ('edge', 'Reboot', toDateTime64('{first_seen}', 3, 'UTC'), 'completed', '{seen_by}', {computed})"
    )


def test_an_event_whose_first_sighting_crossed_a_month_is_read_as_its_newest_version(ch: Any, db: str) -> None:
    """The hard cases of the month partitions: versions of one event in two months.

    A VM's report of 1 December, then (newest) another VM's of 30 November that came late: the newest lies in the
    earlier month, and the older one stays in December's partition (merges stay within one). Then Azure's account
    of 30 November alone, then (newest) the collectors' first sighting of 1 December: the newest in the later
    month. A read whose bound keeps both months returns the newest only, and one whose bound keeps only December,
    as a reader's does when no event it names was first seen before December, returns the newest of the second."""
    older, newer = "now64(6) - INTERVAL 1 MINUTE", "now64(6)"
    _store(ch, db, "2026-12-01 00:05:00", "sevents", older)
    _store(ch, db, "2026-11-30 23:55:00", "sevents", newer)
    months = f"SELECT DISTINCT _partition_id FROM {db}.event_history ORDER BY 1"
    assert [row[0] for row in ch.query(months).result_rows] == ["202611", "202612"]
    one = "SELECT 'edge'"

    def read(bound: str) -> list[tuple[Any, ...]]:
        sql = event_sql.since(one, db=f"{db}.", columns="toString(first_seen_at), seen_by", rows_after=bound)
        return [tuple(row) for row in ch.query(f"SELECT * FROM {sql}").result_rows]

    both = "toDateTime64('2026-11-25 00:00:00', 3, 'UTC')"
    assert read(both) == [("2026-11-30 23:55:00.000", "sevents")]
    assert read("") == [("2026-11-30 23:55:00.000", "sevents")]
    # a bound of 30 November 23:50 UTC, given in a time zone where it is 1 December already
    tokyo = "toDateTime64('2026-12-01 08:50:00', 3, 'Asia/Tokyo')"
    assert read(tokyo) == [("2026-11-30 23:55:00.000", "sevents")]

    ch.command(f"TRUNCATE TABLE {db}.event_history")
    _store(ch, db, "2026-11-30 23:50:00", "platform", older)
    _store(ch, db, "2026-12-01 00:05:00", "sevents", newer)
    december = "toDateTime64('2026-12-01 00:00:00', 3, 'UTC')"
    assert read(december) == [("2026-12-01 00:05:00.000", "sevents")]
    assert read(both) == [("2026-12-01 00:05:00.000", "sevents")]


def test_only_the_events_view_is_read_by_month(ch: Any, db: str) -> None:
    """event_vm_history is not partitioned: a bound on its view is refused, not ignored."""
    with pytest.raises(ValueError, match="rows_after"):
        event_sql.since("SELECT 'a'", "event_vm_lifecycles", f"{db}.", rows_after="now64(3)")
    with pytest.raises(ValueError, match="rows_after"):
        event_sql.stored("SELECT 'a'", "event_vm_history", f"{db}.", rows_after="now64(3)")
    with pytest.raises(ValueError, match="event_history or event_vm_history"):
        event_sql.stored("SELECT 'a'", "events", f"{db}.")
