"""The conflict look-up reads every record table of a batch at once (``Writer.stored_versions``): each table's
stored keys are found in their own table, so a record of each type whose key is stored with other content is
dead-lettered, the first stays, and the batch's new and identical records are stored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from demo import synthetic
from ingest.handler import CONFLICT, DEFAULT_LIMITS, Handler, prepare
from ingest.rows import KEY_OF, TABLE_OF
from ingest.writer import Writer
from tests.ingest.conftest import deliveries, scalar
from tests.ingest.test_ingest_batch import approval, document_anomaly, impact

NOW = datetime(2026, 11, 23, tzinfo=UTC)


def _first() -> list[dict[str, Any]]:
    """One record of each type, and a transition without an EventId (keyed by its reason)."""
    return [synthetic.transition(), synthetic.heartbeat(), impact(), approval(), document_anomaly()]


def _changed(first: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Each of ``first`` with one field changed, and that field."""
    fields = ["status", "polls", "duration_ms", "http_status", "collector_version"]
    values: list[Any] = ["Started", 1, 9000, 500, "9.9.9"]
    return [({**record, name: value}, name) for record, name, value in zip(first, fields, values, strict=True)]


def test_one_batch_of_every_record_type_finds_each_table_s_stored_keys(ch: Any, db: str, handler: Handler) -> None:
    first = _first()
    handler(deliveries(first, "first"))
    changed = _changed(first)
    fresh = [synthetic.transition(vm_index=1), synthetic.heartbeat(vm_index=1), impact(1), approval(1)]
    handler(deliveries([record for record, _ in changed] + fresh + first, "second"))

    errors = [str(row[0]) for row in ch.query(f"SELECT error FROM {db}.dead_letters").result_rows]
    assert len(errors) == len(changed)
    for record, name in changed:
        table = TABLE_OF[record["record_type"]]
        key = f"{KEY_OF[table]} {record[KEY_OF[table]]} is stored with other {name}"
        assert [e for e in errors if key in e and e.startswith(f"{CONFLICT}:")], (key, errors)
    # the first of each key stays: each table holds its first record and the new one, and no changed row was written
    for table, count in {"transitions": 3, "heartbeats": 2, "impacts": 2, "approvals": 2}.items():
        assert scalar(ch, f"SELECT count() FROM {db}.{table} FINAL") == count, table
    for record, name in changed:
        table = TABLE_OF[record["record_type"]]
        written = ch.query(
            f"SELECT countIf(toString({name}) = {{value:String}}) FROM {db}.{table}",
            parameters={"value": str(record[name])},
        ).result_rows[0][0]
        assert written == 0, (table, name)


def test_the_look_up_names_only_stored_keys_of_the_batch_for_each_of_its_tables(ch: Any, db: str) -> None:
    writer = Writer(ch, db)
    first = _first()
    batch, _ = prepare(deliveries(first, "first"), source="test", limits=DEFAULT_LIMITS, received_at=NOW)
    assert writer.stored_versions(batch) == {"transitions": {}, "heartbeats": {}, "impacts": {}, "approvals": {}}
    writer.store(batch)

    later = [synthetic.transition(vm_index=1), synthetic.heartbeat(vm_index=1), *first[2:]]
    again, _ = prepare(deliveries(later, "second"), source="test", limits=DEFAULT_LIMITS, received_at=NOW)
    found = writer.stored_versions(again)
    stored = {TABLE_OF[r["record_type"]]: set() for r in later}
    for record in first[2:]:
        table = TABLE_OF[record["record_type"]]
        stored[table].add(record[KEY_OF[table]])
    assert {table: set(versions) for table, versions in found.items()} == stored
    assert all(len(versions) == 1 for table in found.values() for versions in table.values())


def _granules_kept_by(ch: Any, sql: str, index: str) -> tuple[int, int]:
    """(granules kept, granules before) by the skip index ``index`` in ``EXPLAIN indexes = 1`` of ``sql``."""
    lines = [str(row[0]).strip() for row in ch.query(f"EXPLAIN indexes = 1 {sql}").result_rows]
    at = lines.index(f"Name: {index}")
    kept, before = next(line for line in lines[at:] if line.startswith("Granules:")).split()[1].split("/")
    return int(kept), int(before)


def test_a_batch_of_new_events_reads_few_granules_of_a_large_table(ch: Any, db: str) -> None:
    """The look-up of a batch whose events are not stored is pruned by the bloom filter on ``event_id`` (migration
    0021: a false-positive rate of 0.001 over one granule). With 200 events in each granule, the default rate over
    four granules let about half of them through for 25 events; now nearly none pass."""
    ch.command(
        f"INSERT INTO {db}.transitions (vm_id, event_id, transition_id, kind, incarnation, observed_at) "
        "SELECT concat('vm-', toString(number % 100)), concat('E-', toString(number % 5000)), toString(number), "
        "'appeared', 1, toDateTime64('2026-11-02 00:00:00', 3, 'UTC') FROM numbers(200000)"
    )
    new_events = ", ".join(f"'N-{i}'" for i in range(25))
    stored_event = "'E-7'"
    kept, before = _granules_kept_by(
        ch, f"SELECT transition_id FROM {db}.transitions WHERE event_id IN ({new_events})", "event_id_idx"
    )
    assert before >= 24
    assert kept <= before // 10, (kept, before)
    # a stored event is still found: the filter has no false negatives
    kept, _ = _granules_kept_by(
        ch, f"SELECT transition_id FROM {db}.transitions WHERE event_id IN ({stored_event})", "event_id_idx"
    )
    assert kept >= 1
    assert scalar(ch, f"SELECT count() FROM {db}.transitions WHERE event_id = {stored_event}") == 40
