"""The batch decoder (column by column) and the per-record decoder store the same rows and reject the same records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from demo import synthetic
from ingest.decode import Limits, decode_noted
from ingest.decode_batch import decode_batch
from ingest.errors import InvalidRecord
from ingest.handler import prepare
from ingest.rows import TABLE_OF
from ingest.source import Delivery
from sevents import contract, records
from sevents.records import encode
from tests.ingest.test_ingest_fastpath import EDGES, LIMITS, TIMES, VALUES
from tests.tiers import examples

NOW = datetime(2026, 11, 23, tzinfo=UTC)
WIRE_LIKE = st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z")
NEAR_WIRE = st.builds(  # wire timestamps at the edges: years, months, days, hours, seconds just in and out
    "{}-{}-{}T{}:{}:{}.{}Z".format,
    st.sampled_from(["1899", "1969", "1970", "2026", "2024", "2105", "2106", "2299", "0000"]),
    st.sampled_from(["00", "01", "02", "12", "13"]),
    st.sampled_from(["00", "01", "28", "29", "30", "31", "32"]),
    st.sampled_from(["00", "23", "24"]),
    st.sampled_from(["00", "59", "60"]),
    st.sampled_from(["00", "59", "60", "99"]),
    st.sampled_from(["000", "999"]),
)


def impact(vm_index: int = 0) -> dict[str, Any]:
    """One impact record as a collector would send it."""
    base = {k: v for k, v in synthetic.heartbeat(vm_index=vm_index).items() if k in contract.names(contract.COMMON)}
    began = "2026-11-21T11:59:50.000Z"
    key = records.impact_id(base["vm_id"], "pause", began)
    return {
        **base,
        "record_type": records.RECORD_IMPACT,
        "record_id": key,
        "impact_id": key,
        "detected_by": "pause",
        "began_at": began,
        "duration_ms": 3000,
        "event_id": "E-1",
        "event_type": "Freeze",
        "read_at": "2026-11-21T11:59:53.400Z",
    }


def approval(vm_index: int = 0) -> dict[str, Any]:
    """One approval record as a collector would send it."""
    base = {k: v for k, v in synthetic.heartbeat(vm_index=vm_index).items() if k in contract.names(contract.COMMON)}
    key = records.approval_id(base["vm_id"], "E-1", "approved")
    return {
        **base,
        "record_type": records.RECORD_APPROVAL,
        "record_id": key,
        "approval_id": key,
        "event_id": "E-1",
        "decision": "approved",
        "rule": "first-in-resources",
        "approver": base["vm_name"],
        "event_type": "Reboot",
        "not_before": "2026-11-21T12:15:00.000Z",
        "hook_exit": 0,
        "hook_ms": 2500,
        "http_status": 200,
        "decided_at": "2026-11-21T12:00:02.500Z",
    }


def document_anomaly() -> dict[str, Any]:
    """A document-level anomaly: no EventId, keyed by its reason."""
    record = synthetic.transition(event_id="", kind=records.KIND_ANOMALY, not_before=None, description=None)
    reason = "incarnation went back from 5 to 1"
    key = records.transition_id(record["vm_id"], f"document: {reason}", record["incarnation"], records.KIND_ANOMALY)
    return {**record, "anomaly": reason, "transition_id": key, "record_id": key}


BASES = [
    lambda: synthetic.transition(prev_status="Scheduled"),
    document_anomaly,
    synthetic.heartbeat,
    impact,
    approval,
]
FIELDS = sorted({name for make in BASES for name in make()} | {"future_field"})
TIME_VALUES = st.one_of(st.sampled_from(TIMES), WIRE_LIKE, NEAR_WIRE)
LONG_TEXT = st.integers(1400, 1600).map(lambda n: "é" * n)  # about the text limit below, twice as many bytes
BATCH_LIMITS = [*LIMITS, Limits(max_text_chars=1500)]


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    """A record of any type, as sent or with a few fields changed, in one of the forms a sender may use."""
    record = draw(st.sampled_from(BASES))()
    times = [n for n, f in {f.name: f for fs in contract.CONTRACT.values() for f in fs}.items() if f.kind == "time"]
    changes = draw(
        st.lists(
            st.one_of(
                st.tuples(st.sampled_from(FIELDS), VALUES),
                st.tuples(st.sampled_from(times), TIME_VALUES),
                st.tuples(st.sampled_from(FIELDS), LONG_TEXT),
            ),
            max_size=2,
        )
    )
    record.update(changes)
    form = draw(st.sampled_from(["canonical", "canonical", "spaced", "duplicate_key", "missing_field"]))
    if form == "spaced":
        return json.dumps(record).encode()
    if form == "duplicate_key" and changes:  # JSON's last value wins, in every parser here
        name, value = changes[0]
        return encode(record)[:-1] + b"," + json.dumps({name: value}).encode()[1:]
    if form == "missing_field" and changes:
        record.pop(changes[0][0])
    return encode(record)


def per_record(deliveries: list[Delivery], limits: Limits) -> tuple[dict[str, list[Any]], list[tuple[str, str]]]:
    """What the per-record decoder alone makes of each delivery: rows per table, and dead letters."""
    rows: dict[str, list[Any]] = {t: [] for t in TABLE_OF.values()}
    letters = []
    for d in deliveries:
        try:
            record_type, row, notes = decode_noted(d.payload, d.position, limits)
        except InvalidRecord as error:
            letters.append((d.position, str(error)))
            continue
        if notes:
            letters.append((d.position, f"made_safe: {notes}"))
        rows[TABLE_OF[record_type]].append(comparable(row))
    return rows, letters


def comparable(row: tuple[Any, ...] | list[Any]) -> tuple[Any, ...]:
    """Maps as sorted items (Arrow reads them back as lists of pairs), timestamps as UTC instants."""
    out = []
    for value in row:
        if isinstance(value, dict):
            value = sorted(value.items())
        elif isinstance(value, list) and value and isinstance(value[0], tuple):
            value = sorted(value)
        elif isinstance(value, datetime):
            value = value.astimezone(UTC)
        out.append(value)
    return tuple(out)


def stored(deliveries: list[Delivery], limits: Limits) -> tuple[dict[str, list[Any]], list[tuple[str, str]]]:
    """What ``prepare`` (the batch decoder, then the per-record one for the rest) makes of the deliveries."""
    batch, _ = prepare(deliveries, source="t", limits=limits, received_at=NOW)
    rows: dict[str, list[Any]] = {}
    for table in TABLE_OF.values():
        columns = batch.columns[table]
        arrow = [] if columns is None else [list(r.values()) for r in columns.to_pylist()]
        rows[table] = [comparable(r) for r in arrow + batch.rows[table]]
        assert [d.position for d in batch.origins[table]] == [r[-1] for r in rows[table]]
    return rows, [(letter[3], letter[4]) for letter in batch.dead_letters]


def by_position(rows: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {table: sorted(found, key=lambda r: r[-1]) for table, found in rows.items()}


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(payloads(), max_size=8), st.sampled_from(BATCH_LIMITS))
def test_a_delivery_ends_alike_decoded_as_a_batch_or_record_by_record(batch: list[bytes], limits: Limits) -> None:
    """Whatever a delivery holds, the rows stored and the dead letters (with their reasons) are the same both ways."""
    deliveries = [Delivery(p, f"p#{i}") for i, p in enumerate(batch)]
    rows, letters = stored(deliveries, limits)
    want_rows, want_letters = per_record(deliveries, limits)
    assert by_position(rows) == by_position(want_rows)
    assert sorted(letters) == sorted(want_letters)


def test_each_field_at_each_edge_in_a_delivery_of_good_records_is_left_to_the_per_record_decoder_alike() -> None:
    """One odd record among good ones: the good ones go column by column, the odd one ends as record by record."""
    for make in BASES:
        for name in make():
            for value in [*EDGES, *TIMES, None]:
                good = [encode(m()) for m in BASES]
                deliveries = [Delivery(p, f"p#{i}") for i, p in enumerate([*good, encode({**make(), name: value})])]
                for limits in LIMITS:
                    rows, letters = stored(deliveries, limits)
                    want_rows, want_letters = per_record(deliveries, limits)
                    assert by_position(rows) == by_position(want_rows), (name, value, limits)
                    assert sorted(letters) == sorted(want_letters), (name, value, limits)


def test_a_delivery_of_sound_records_is_decoded_entirely_column_by_column() -> None:
    """Records as collectors send them leave nothing to the per-record decoder: the fast path is the common one."""
    payloads = [encode(r) for r in synthetic.stream(300)] + [encode(m()) for m in BASES]
    decoded = decode_batch(payloads, [f"p#{i}" for i in range(len(payloads))], Limits())
    assert decoded.doubtful == []
    assert sum(len(indexes) for _, indexes in decoded.tables.values()) == len(payloads)
    assert all(isinstance(table, pa.Table) for table, _ in decoded.tables.values())


@given(st.lists(st.tuples(st.text(max_size=6), st.text(max_size=6), st.integers()), max_size=5))
def test_the_keys_of_a_delivery_at_once_are_the_keys_one_by_one(parts: list[tuple[str, str, int]]) -> None:
    """``records.digests`` over columns gives each record the key its own ``transition_id`` gives it."""
    vms, events, incarnations = ([p[i] for p in parts] for i in range(3))
    kinds = ["appeared"] * len(parts)
    at_once = records.digests("t", vms, events, [str(n) for n in incarnations], kinds)
    assert at_once == [records.transition_id(v, e, n, "appeared") for v, e, n in parts]
