"""Keeps each event's stored lifecycle current (``event_history``, migration 0017), and each observing VM's
(``event_vm_history``, migration 0022).

Whatever stores evidence of an event (a collector's transitions, downtime or approvals, Azure's account of it)
calls ``refresh`` with the events it touched once ClickHouse confirmed the rows and before the batch is
acknowledged: each is computed again from all its evidence (``event_evidence_since``) and written as one row, after
a row per observing VM (``event_vm_evidence_since``). A crash in between leaves the batch unacknowledged, so it is
delivered again and the refresh runs then.

The newest computation wins (``computed_at`` is the server's clock when it read): two workers refreshing one
event at once each read after their own rows were stored, so the later read saw both. What changes with time
alone (a holder's silence, the 30-day horizon) is not stored; ``events`` and ``event_vm_lifecycles`` look it up
when read.
"""

# The SQL is a constant of this module; every value is bound server-side.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

# events per statement: the EventIds are bound as one array, and one statement reads their rows once
CHUNK: Final = 2_000

# The first day any row of the events was written (their first rollup row, or Azure's first account of one only
# Azure has): the evidence view reads from it. Today when nothing of them is stored (nothing to compute).
_FIRST_DAY: Final = """
SELECT toDate(least(
    ifNull((SELECT minOrNull(first_seen_at) FROM {db}.event_rollup WHERE event_id IN {{ids:Array(String)}}), now64(3)),
    ifNull((SELECT minOrNull(first_seen_at) FROM {db}.azure_scheduled_events WHERE event_id IN {{ids:Array(String)}}),
           now64(3))))
"""

# The day is bound, not a subquery's alias: a parameterised view's argument must be a value on a cluster too.
_REFRESH: Final = """
INSERT INTO {db}.event_history
SELECT *, now64(6) AS computed_at FROM {db}.event_evidence_since(since_day = {{day:Date}})
WHERE event_id IN {{ids:Array(String)}}
"""

# refresh_all's slices: the events whose EventId hashes to {slice} of {slices} (the filter is on the views' window
# key, so ClickHouse applies it before their windows and aggregations).
_ALL: Final = """
INSERT INTO {db}.event_history
SELECT *, now64(6) AS computed_at FROM {db}.event_evidence_since(since_day = toDate('1970-01-01'))
WHERE cityHash64(event_id) % {{slices:UInt32}} = {{slice:UInt32}}
"""

# Each observing VM's row of the events (migration 0022), written before the event's own: event_history's
# computed_at is what says an event is refreshed (``stale``), so a crash between the two leaves it stale.
_REFRESH_VMS: Final = """
INSERT INTO {db}.event_vm_history
SELECT *, now64(6) AS computed_at FROM {db}.event_vm_evidence_since(since_day = {{day:Date}})
WHERE event_id IN {{ids:Array(String)}}
"""

_ALL_VMS: Final = """
INSERT INTO {db}.event_vm_history
SELECT *, now64(6) AS computed_at FROM {db}.event_vm_evidence_since(since_day = toDate('1970-01-01'))
WHERE cityHash64(event_id) % {{slices:UInt32}} = {{slice:UInt32}}
"""

# (event, VM) pairs of the history: refresh_all computes about SLICE_PAIRS of them in one statement. The per-VM
# view's windows are not spilled to disk: a year of 100,000 VMs (16.7 M pairs) at once needed more than 21 GiB.
_PAIRS: Final = "SELECT count() FROM {db}.event_vm_rollup"
SLICE_PAIRS: Final = 2_000_000

# The marks: event_rollup.stored_at for transitions, event_refresh_queue for impacts and approvals (migration
# 0018); a week back, as long as the queue keeps its marks. An event missing from event_history joins with
# computed_at at its default (1970): stale as well if the rollup holds evidence of it (an EventId only downtime
# named has no lifecycle to compute, so it would stay stale).
_STALE: Final = """
SELECT q.event_id
FROM
(
    SELECT event_id, max(marked) AS queued
    FROM
    (
        SELECT event_id, stored_at AS marked FROM {db}.event_rollup WHERE stored_at >= now64(6) - INTERVAL 7 DAY
        UNION ALL
        SELECT event_id, queued_at AS marked FROM {db}.event_refresh_queue
    )
    GROUP BY event_id
) AS q
LEFT JOIN
(
    SELECT event_id, max(computed_at) AS computed
    FROM {db}.event_history
    WHERE event_id IN (
        SELECT event_id FROM {db}.event_rollup WHERE stored_at >= now64(6) - INTERVAL 7 DAY
        UNION ALL
        SELECT event_id FROM {db}.event_refresh_queue)
    GROUP BY event_id
) AS h USING (event_id)
WHERE h.computed < q.queued
  AND (h.computed > 0 OR q.event_id IN (
      SELECT event_id FROM {db}.event_rollup WHERE stored_at >= now64(6) - INTERVAL 7 DAY))
ORDER BY q.event_id
"""

# On a cluster the evidence view joins and filters Distributed tables by subqueries over others: each subquery is
# run once and sent to every shard (without it ClickHouse refuses double-distributed subqueries). Nothing on one
# node. event_history is partitioned by month (migration 0029): a refresh of events of more than 100 months (a
# replayed history, refresh_all) writes a part per month instead of failing.
_SETTINGS: Final = {"distributed_product_mode": "global", "max_partitions_per_insert_block": 0}


def refresh(client: Any, database: str, event_ids: Iterable[str], settings: Mapping[str, Any] | None = None) -> int:
    """Compute and store the lifecycle of each of ``event_ids`` (empty ids ignored); returns how many were asked.

    Raises what the client raises: the caller's batch is then not acknowledged, so it is stored and refreshed
    again.
    """
    ids = sorted({str(event_id) for event_id in event_ids if event_id})
    options = {**_SETTINGS, **dict(settings or {})}
    for start in range(0, len(ids), CHUNK):
        chunk = {"ids": ids[start : start + CHUNK]}
        day = client.query(_FIRST_DAY.format(db=database), parameters=chunk, settings=options).result_rows[0][0]
        for statement in (_REFRESH_VMS, _REFRESH):
            client.command(statement.format(db=database), parameters={**chunk, "day": day}, settings=options)
    return len(ids)


def stale(client: Any, database: str, settings: Mapping[str, Any] | None = None) -> list[str]:
    """The queued events whose stored lifecycle is older than their latest mark (or that have none)."""
    options = {**_SETTINGS, **dict(settings or {})}
    return [row[0] for row in client.query(_STALE.format(db=database), settings=options).result_rows]


def refresh_all(
    client: Any,
    database: str,
    settings: Mapping[str, Any] | None = None,
    slice_pairs: int = SLICE_PAIRS,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Compute every event of the history again (after loading rows by other means than the ingest), in slices of
    the EventIds of about ``slice_pairs`` (event, VM) pairs each, so that memory follows the slice, not the
    history. ``progress(done, slices)`` after each slice (a year of 100,000 VMs takes nine). Returns the number of
    slices."""
    options = {**_SETTINGS, "max_bytes_before_external_group_by": 1_000_000_000, **dict(settings or {})}
    pairs = int(client.query(_PAIRS.format(db=database), settings=options).result_rows[0][0])
    slices = max(1, -(-pairs // slice_pairs))
    for slice_ in range(slices):
        for statement in (_ALL_VMS, _ALL):
            client.command(
                statement.format(db=database), parameters={"slices": slices, "slice": slice_}, settings=options
            )
        if progress:
            progress(slice_ + 1, slices)
    return slices
