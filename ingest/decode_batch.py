"""Decode a whole delivery column by column (pure): the common case checked once per column, the rest per record.

Theory of operation. ``ingest.decode`` checks one record at a time, and at 10,000 records a delivery its Python
steps per record (a datetime per timestamp, a row, then the rows transposed again into Arrow columns) cost
about as much as ClickHouse's insert. Here msgspec still parses and type-checks every payload in C, into the
same structs, but each remaining rule runs once per column: integer ranges and list sizes with min and max,
the timestamps' wire form with one regular expression and one cast in Arrow, the kind-like fields with a set,
the dedupe keys in one comprehension (``records.digests``); the columns then go to Arrow as they are.

This path never rejects: a record it cannot vouch for on any rule is handed back by index, and the caller runs
it through ``ingest.decode.decode_noted``, which decides and names the reason. So a record is stored from here
only if the per-record path would store the same values (``tests/ingest/test_ingest_batch.py`` compares the
two on arbitrary deliveries).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ingest.columns import LAYOUTS, ArrowColumn
from ingest.decode import FAST_PLANS, Limits, Plan
from ingest.rules import UINT64
from sevents import contract, records

# The one wire form, within contract.TIME_YEARS (1970-2105), hours 00-23 and seconds 00-59: what this accepts,
# ``rules._time`` accepts too, with the same value (the cast then refuses days a month lacks).
WIRE_TIME: Final = (
    r"^(?:19[7-9]\d|20\d\d|210[0-5])-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    r"T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d\d\dZ$"
)
_TIMESTAMP: Final = pa.timestamp("ms", tz="UTC")
_LOW_CARDINALITY: Final = pa.dictionary(pa.int32(), pa.string())


@dataclass(frozen=True)
class Decoded:
    """A delivery's records this path vouches for, as one Arrow table per table, and the ones it leaves."""

    tables: Mapping[str, tuple[pa.Table, list[int]]]  # table -> its rows and the payload index of each row
    doubtful: list[int]  # payload indexes for the per-record decoder, in order


def decode_batch(payloads: Sequence[bytes], positions: Sequence[str], limits: Limits) -> Decoded:
    """The records of ``payloads`` (with ``positions`` as their ``source_position``) decoded column by column."""
    # A payload no longer than the text limit cannot hold a string over it (as in ``decode``'s fast path).
    fits = min(limits.max_text_chars, limits.max_payload_bytes)
    found: list[tuple[list[Any], list[int]]] = [([], []) for _ in FAST_PLANS]
    doubtful: list[int] = []
    try:  # the common delivery, all of the first type and sound: one comprehension, no bookkeeping per record
        if payloads and max(map(len, payloads)) <= fits:
            decode = FAST_PLANS[0].wire_decoder.decode
            found[0] = ([decode(payload) for payload in payloads], list(range(len(payloads))))
    except (msgspec.MsgspecError, ValueError, RecursionError):
        pass  # another type or an odd record somewhere: record by record below
    if not found[0][0]:
        _sort(payloads, fits, found, doubtful)
    tables = {}
    for plan, (structs, indexes) in zip(FAST_PLANS, found, strict=True):
        if structs:
            table, kept = _table(plan, structs, indexes, positions, limits, doubtful)
            if kept:
                tables[contract.TABLES[plan.record_type]] = (table, kept)
    doubtful.sort()
    return Decoded(tables, doubtful)


def _sort(payloads: Sequence[bytes], fits: int, found: list[tuple[list[Any], list[int]]], doubtful: list[int]) -> None:
    """Each payload decoded as the first record type it is valid JSON of, or added to ``doubtful``."""
    tries = [
        (p.wire_decoder.decode, structs.append, at.append) for p, (structs, at) in zip(FAST_PLANS, found, strict=True)
    ]
    for index, payload in enumerate(payloads):
        if len(payload) <= fits:
            for decode, keep, at in tries:
                try:
                    keep(decode(payload))
                except (msgspec.MsgspecError, ValueError, RecursionError):
                    continue  # not this record type, or not valid JSON of it: the next type, then the precise path
                at(index)
                break
            else:
                doubtful.append(index)
        else:
            doubtful.append(index)


def _table(
    plan: Plan, structs: list[Any], indexes: list[int], positions: Sequence[str], limits: Limits, doubtful: list[int]
) -> tuple[pa.Table, list[int]]:
    """One record type's rows as Arrow; the indexes of records in doubt are added to ``doubtful``."""
    # One list per field (no tuple per record: fewer objects to make, collect and free).
    columns: list[Sequence[Any]] = [list(map(field, structs)) for field in _fields(plan)]
    times, bad = _doubts(plan, columns, limits)
    if bad:
        doubtful.extend(indexes[j] for j in bad)
        keep = [j for j in range(len(indexes)) if j not in bad]
        indexes = [indexes[j] for j in keep]
        if not indexes:
            return pa.table({}), []
        columns = [[column[j] for j in keep] for column in columns]
        times = {i: times[i].take(keep) for i in times}
    try:
        return _arrow(LAYOUTS[contract.TABLES[plan.record_type]], columns, times, positions, indexes), indexes
    except (ValueError, TypeError, OverflowError):  # a value beyond its Arrow type (the checks say none is)
        doubtful.extend(indexes)
        return pa.table({}), []


_FIELDS: Final[dict[str, tuple[Callable[[Any], Any], ...]]] = {}


def _fields(plan: Plan) -> tuple[Callable[[Any], Any], ...]:
    """A getter per field of the plan's struct, in column order."""
    if plan.record_type not in _FIELDS:
        _FIELDS[plan.record_type] = tuple(operator.attrgetter(name) for name in plan.names)
    return _FIELDS[plan.record_type]


def _doubts(plan: Plan, columns: list[Sequence[Any]], limits: Limits) -> tuple[dict[int, pa.Array], set[int]]:
    """The timestamp columns as Arrow, and the rows (positions in ``columns``) any rule is in doubt about."""
    bad: set[int] = set()
    for i, low, high in plan.wide_ints:  # ranges msgspec cannot check (beyond int64)
        values = [v for v in columns[i] if v is not None] if plan.rules[plan.names[i]].nullable else columns[i]
        if values and not (low <= min(values) and max(values) <= high):
            bad.update(j for j, v in enumerate(columns[i]) if v is not None and not low <= v <= high)
    for i in plan.lists:
        if max(map(len, columns[i])) > limits.max_list_items:
            bad.update(j for j, items in enumerate(columns[i]) if len(items) > limits.max_list_items)
    for i in plan.maps:
        bad.update(j for j, counts in enumerate(columns[i]) if not _counts_fit(counts, limits))
    times = {i: _wire_times(columns[i], bad) for i in plan.times}
    named = dict(zip(plan.names, columns, strict=True))
    bad.update(_key_doubts(plan.record_type, named))
    return times, bad


def _counts_fit(counts: dict[str, int], limits: Limits) -> bool:
    return len(counts) <= limits.max_map_items and all(0 <= n <= UINT64[1] for n in counts.values())


def _wire_times(texts: Sequence[str | None], bad: set[int]) -> pa.Array:
    """Wire timestamps as an Arrow timestamp column; rows not in the wire form are added to ``bad`` (as null)."""
    strings = pa.array(texts, pa.string())
    wire = pc.match_substring_regex(strings, WIRE_TIME)
    try:
        if not wire.false_count:
            return strings.cast(_TIMESTAMP)
    except pa.ArrowInvalid:  # a day the month lacks (2026-02-30)
        pass
    # The rare case, one value at a time: the rows out of form are in doubt and cast as null.
    fine = [ok and text is not None and _real_day(text) for ok, text in zip(wire.to_pylist(), texts, strict=True)]
    bad.update(j for j, ok in enumerate(fine) if ok is False)
    return pa.array([text if ok else None for ok, text in zip(fine, texts, strict=True)], pa.string()).cast(_TIMESTAMP)


def _real_day(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _arrow(
    layout: Sequence[ArrowColumn],
    columns: Sequence[Sequence[Any]],
    times: Mapping[int, pa.Array],
    positions: Sequence[str],
    indexes: list[int],
) -> pa.Table:
    arrays = []
    for i, column in enumerate(layout[:-1]):  # the last one is source_position
        if i in times:
            arrays.append(times[i])
        elif column.dictionary:  # LowCardinality: converted straight into a dictionary array
            arrays.append(pa.array(columns[i], _LOW_CARDINALITY))
        else:
            arrays.append(pa.array(columns[i], column.type))
    arrays.append(
        pa.array(positions if len(indexes) == len(positions) else [positions[i] for i in indexes], pa.string())
    )
    return pa.Table.from_arrays(arrays, names=[c.name for c in layout])


# ---- the dedupe key of each record type, over columns: the rows whose key or kind-like field is wrong ----


def _off(expected: list[str], *given: Sequence[str]) -> set[int]:
    if all(g == expected for g in given):  # the common case: one comparison per column, in C
        return set()
    return {j for j, key in enumerate(expected) if any(g[j] != key for g in given)}


def _outside(values: Sequence[str], allowed: tuple[str, ...]) -> set[int]:
    if set(values) <= set(allowed):
        return set()
    return {j for j, v in enumerate(values) if v not in allowed}


def _key_doubts(record_type: str, c: Mapping[str, Sequence[Any]]) -> set[int]:
    """The rows whose fixed-set fields or dedupe keys are wrong (``sevents.records.ENUMS``, ``KEYS``)."""
    bad: set[int] = set()
    for name, allowed in records.ENUMS[record_type].items():
        bad |= _outside(c[name], allowed)
    expected = records.KEYS[record_type](c)
    return bad | _off(expected, c[contract.BY_NAME[record_type].key], c["record_id"])
